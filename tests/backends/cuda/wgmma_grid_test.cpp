// The wgmma kernel's host grid rules (CPU only; no GPU needed): warpgroups per block and the K split.
#include <gtest/gtest.h>

#include <cstdint>

#include "backends/cuda/cuda_linear_internal.h"

namespace nvfp4::cuda {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

TEST(CudaWgmmaGrid, WarpgroupsByRuleAndWidth) {
  EXPECT_EQ(wgmma_warpgroups(8192, 3), 2);
  EXPECT_EQ(wgmma_warpgroups(57344, 3), 2);
  EXPECT_EQ(wgmma_warpgroups(8191, 3), 1);
  EXPECT_EQ(wgmma_warpgroups(4096, 3), 1);
  EXPECT_EQ(wgmma_warpgroups(57344, 4), 1);  // forced 128-row blocks
  EXPECT_EQ(wgmma_warpgroups(4096, 5), 2);   // forced 256-row blocks
}

// Every split takes >= 8 chunks and none is empty (the kernel gives split z the chunks [z·per, z·per + per)),
// on layer sizes from one tile to the largest bench layer, M from 33 to 4096 and 1-4 blocks per SM.
TEST(CudaWgmmaGrid, SplitsAreBoundedAndNeverEmpty) {
  for (int64_t n16 : {1, 3, 4, 5, 64, 256, 640, 1792, 3584})
    for (int64_t kc : {1, 3, 7, 8, 15, 16, 17, 64, 65, 128, 224, 448})
      for (int64_t m : {33, 64, 65, 128, 256, 4096})
        for (int wgs : {1, 2})
          for (int64_t bps : {1, 2, 3, 4}) {
            const int s = wgmma_splits(m, n16 * 16, n16, kc, wgs, 132, static_cast<int>(bps));
            ASSERT_GE(s, 1);
            ASSERT_LE(s, 8);
            if (s > 1) {
              EXPECT_GE(kc / s, 8) << "n16 " << n16 << " kc " << kc << " m " << m;
              const int64_t per = ceil_div(kc, s);
              EXPECT_LT((s - 1) * per, kc) << "empty last split: n16 " << n16 << " kc " << kc << " splits " << s;
            }
          }
}

// Bench layers on an H200 (132 SMs; 256-row blocks run 2 per SM, 128-row ones 3), worked by hand from the
// estimate (rounds = the busiest SM's blocks / blocks per SM, at least 1; x chunks x 1.46 µs (256 rows) or 0.9 µs
// (128 rows); plus M·N·(8·s + 2) bytes at 3 TB/s and 2 µs when split; a split must beat the best so far by 5%).
// docs/PERF.md (change 20) has these layers measured with splits 1, 2, 4, 8 and the earlier rules' picks.
TEST(CudaWgmmaGrid, SplitsFollowTheTimeEstimate) {
  // 57344x8192, M = 64: 224 blocks (2 per SM on the busiest: 1 round), 128 chunks: s=1 128 x 1.46 = 186.88;
  // s=2: 448 blocks, 4 per SM = 2 rounds x 64 x 1.46 + 64·57344·18 / 3e6 + 2 = 210.91.
  EXPECT_NEAR(wgmma_time_us(64, 57344, 57344 / 16, 8192 / 64, 2, 132, 2, 1), 186.88, 0.01);
  EXPECT_NEAR(wgmma_time_us(64, 57344, 57344 / 16, 8192 / 64, 2, 132, 2, 2), 186.88 + 64 * 57344 * 18 / 3e6 + 2, 0.01);
  EXPECT_EQ(wgmma_splits(64, 57344, 57344 / 16, 8192 / 64, 2, 132, 2), 1);
  // 28672x4096, M = 64: 112 blocks, 64 chunks. s=1: 93.4; s=2: 1 round x 32 x 1.46 + 11.0 + 2 = 59.7; s=3: 336
  // blocks, 3 per SM = 1.5 rounds x 22 x 1.46 + 15.9 + 2 = 66.1.
  EXPECT_EQ(wgmma_splits(64, 28672, 28672 / 16, 4096 / 64, 2, 132, 2), 2);
  // 28672x4096, M = 192: 336 blocks (3 per SM: 1.5 rounds) x 64 x 1.46 = 140.2; s=2: 3 rounds x 32 x 1.46 + 33.0
  // + 2 = 175.2.
  EXPECT_NEAR(wgmma_time_us(192, 28672, 28672 / 16, 4096 / 64, 2, 132, 2, 1), 140.16, 0.01);
  EXPECT_EQ(wgmma_splits(192, 28672, 28672 / 16, 4096 / 64, 2, 132, 2), 1);
  // 10240x8192, M = 64: 40 blocks, 128 chunks. s=5: 200 blocks (2 per SM) x 26 x 1.46 + 9.2 + 2 = 49.1; s=6:
  // 1 round x 22 x 1.46 + 10.9 + 2 = 45.0 (8% better); s=7, 8: 3 per SM, 1.5 rounds.
  EXPECT_EQ(wgmma_splits(64, 10240, 10240 / 16, 8192 / 64, 2, 132, 2), 6);
  // 8192x28672, M = 64: 32 blocks, 448 chunks: every s up to 8 stays in one round; s=8: 56 x 1.46 + 11.5 + 2.
  EXPECT_EQ(wgmma_splits(64, 8192, 8192 / 16, 28672 / 64, 2, 132, 2), 8);
  // 4096x4096, M = 128 (128-row blocks, 3 per SM): 64 blocks. s=4: 256 blocks, 1 round x 16 x 0.9 + 5.9 + 2 =
  // 22.3; s=5: 1 round x 13 x 0.9 + 7.3 + 2 = 21.0, 5.6% better (measured: 23.9 µs, s=4 23.1: the one pick
  // more than 2% slower than the fastest measured).
  EXPECT_EQ(wgmma_splits(128, 4096, 4096 / 16, 4096 / 64, 1, 132, 3), 5);
  // Too few chunks to split: 4096x512 (8 chunks) stays whole however short its grid.
  EXPECT_EQ(wgmma_splits(64, 4096, 4096 / 16, 512 / 64, 1, 132, 3), 1);
}

}  // namespace
}  // namespace nvfp4::cuda
