// The thread pool behind parallel_for (common/parallel.h): every index of every region runs exactly once and
// is finished (its writes visible) when parallel_for returns, over many regions in quick succession (where a
// worker still leaving one region meets the next) and several thread counts; exceptions reach the caller and
// leave the pool usable; nested regions run inline; NVFP4_NUM_THREADS's spelling.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "common/parallel.h"

namespace nvfp4 {
namespace {

struct ThreadCount {
  int saved = num_threads();
  ~ThreadCount() { set_num_threads(saved); }
};

TEST(ParallelFor, EveryIndexOnceAndDoneOnReturnOverManyRegions) {
  ThreadCount keep;
  for (int threads : {1, 2, 3, 5}) {
    set_num_threads(threads);
    EXPECT_EQ(num_threads(), threads);
    std::vector<int> hits(257);
    for (int region = 0; region < 20000; ++region) {
      const size_t n = 1 + static_cast<size_t>(region % 257);
      // Plain (non-atomic) increments: a chunk run twice, or one still running after the return, shows up in
      // the check below (or as a data race under a sanitizer).
      parallel_for(n, 1, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) ++hits[i];
      });
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(hits[i], 1) << "threads " << threads << ", region " << region << ", index " << i;
        hits[i] = 0;
      }
    }
  }
}

TEST(ParallelFor, ExceptionReachesTheCallerAndThePoolStaysUsable) {
  ThreadCount keep;
  set_num_threads(3);
  EXPECT_THROW(parallel_for(64, 1,
                            [](size_t b, size_t) {
                              if (b == 0) throw std::runtime_error("chunk 0");
                            }),
               std::runtime_error);
  std::atomic<size_t> sum{0};
  parallel_for(1000, 1, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) sum += i;
  });
  EXPECT_EQ(sum.load(), 1000u * 999u / 2);
}

TEST(ParallelFor, NestedRegionsRunInline) {
  ThreadCount keep;
  set_num_threads(2);
  std::atomic<int> inner{0};
  parallel_for(8, 1, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) parallel_for(10, 1, [&](size_t ib, size_t ie) { inner += static_cast<int>(ie - ib); });
  });
  EXPECT_EQ(inner.load(), 80);
}

TEST(ThreadCount, OnlyADecimalIntegerFromOneToTheMaximum) {
  int n = -1;
  EXPECT_TRUE(parse_thread_count("1", &n));
  EXPECT_EQ(n, 1);
  EXPECT_TRUE(parse_thread_count("16", &n));
  EXPECT_EQ(n, 16);
  EXPECT_TRUE(parse_thread_count("4096", &n));
  EXPECT_EQ(n, kMaxThreads);
  n = -1;
  for (const char* bad : {"", "0", "4097", "-2", "+2", "2x", "x2", " 2", "2 ", "1.5", "abc", "99999999999999999999"}) {
    EXPECT_FALSE(parse_thread_count(bad, &n)) << "'" << bad << "'";
    EXPECT_EQ(n, -1) << "'" << bad << "' changed the output";
  }
  EXPECT_FALSE(parse_thread_count(nullptr, &n));
}

}  // namespace
}  // namespace nvfp4
