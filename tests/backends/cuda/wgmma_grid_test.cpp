// The wgmma kernel's host grid rules (CPU only; no GPU needed): token tile and K split.
#include <gtest/gtest.h>

#include <cstdint>

#include "backends/cuda/cuda_linear_internal.h"

namespace nvfp4::cuda {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

TEST(CudaWgmmaGrid, TokenTileAndConsumersByMAndRule) {
  EXPECT_EQ(wgmma_tile_tokens(33), 64);
  EXPECT_EQ(wgmma_tile_tokens(64), 64);
  EXPECT_EQ(wgmma_tile_tokens(65), 128);
  EXPECT_EQ(wgmma_tile_tokens(4096), 128);
  EXPECT_EQ(wgmma_consumers(64, 3), 2);   // default: 4 consumer warpgroups only at M = 65-128
  EXPECT_EQ(wgmma_consumers(65, 3), 4);
  EXPECT_EQ(wgmma_consumers(128, 3), 4);
  EXPECT_EQ(wgmma_consumers(129, 3), 2);
  EXPECT_EQ(wgmma_consumers(1000, 4), 4);
  EXPECT_EQ(wgmma_consumers(40, 5), 2);
}

// Every split takes >= 8 chunks and none is empty (the kernel gives split z the chunks [z·per, z·per + per)),
// on layer sizes from one tile to the largest bench layer and M from 33 to 4096.
TEST(CudaWgmmaGrid, SplitsAreBoundedAndNeverEmpty) {
  for (int64_t n16 : {1, 3, 4, 5, 64, 256, 640, 1792, 3584})
    for (int64_t kc : {1, 3, 7, 8, 15, 16, 17, 64, 65, 128, 224, 448})
      for (int64_t m : {33, 64, 65, 128, 256, 4096}) {
        const int s = wgmma_splits(m, n16 * 16, n16, kc, 132);
        ASSERT_GE(s, 1);
        ASSERT_LE(s, 8);
        if (s > 1) {
          EXPECT_GE(kc / s, 8) << "n16 " << n16 << " kc " << kc << " m " << m;
          const int64_t per = ceil_div(kc, s);
          EXPECT_LT((s - 1) * per, kc) << "empty last split: n16 " << n16 << " kc " << kc << " splits " << s;
        }
      }
}

// Bench layers on an H200 (132 SMs, blocks of 256 rows, one per SM), worked by hand from the estimate (rounds =
// the busiest SM's blocks, at least 1; x chunks x 0.62 µs (64 tokens) or 0.81 µs (128); plus M·N·(8·s + 2)
// bytes at 3 TB/s and 2 µs when split; a split must beat the best so far by 5%). docs/PERF.md (change 24) has
// these layers measured with splits 1, 2, 4, 8.
TEST(CudaWgmmaGrid, SplitsFollowTheTimeEstimate) {
  // 57344x8192, M = 64: 224 blocks (2 rounds), 128 chunks: s=1 2 x 128 x 0.62 = 158.72; s=2: 448 blocks, 4
  // rounds x 64 x 0.62 + 64·57344·18 / 3e6 + 2.
  EXPECT_NEAR(wgmma_time_us(64, 57344, 57344 / 16, 8192 / 64, 132, 1), 158.72, 0.01);
  EXPECT_NEAR(wgmma_time_us(64, 57344, 57344 / 16, 8192 / 64, 132, 2), 158.72 + 64 * 57344 * 18 / 3e6 + 2, 0.01);
  EXPECT_EQ(wgmma_splits(64, 57344, 57344 / 16, 8192 / 64, 132), 1);
  // 4096x4096, M = 64: 16 blocks, 64 chunks. s=1 39.68; s=2 32 x 0.62 + 1.57 + 2 = 23.41; s=3 22 x 0.62 + 2.27
  // + 2 = 17.91; s=4 14.89; s=5 13 x 0.62 + 3.67 + 2 = 13.73; s=6 13.19 and s=7 13.27 (not 5% better);
  // s=8 8 x 0.62 + 5.77 + 2 = 12.73.
  EXPECT_EQ(wgmma_splits(64, 4096, 4096 / 16, 4096 / 64, 132), 8);
  // 10240x8192, M = 64: 40 blocks, 128 chunks. s=3: 120 blocks, 1 round x 43 x 0.62 + 5.68 + 2 = 34.34; s=4
  // and more: 160+ blocks, 2 rounds or more.
  EXPECT_EQ(wgmma_splits(64, 10240, 10240 / 16, 8192 / 64, 132), 3);
  // 28672x4096, M = 128: 112 blocks (1 round) x 64 chunks x 0.81 = 51.84; s=2: 2 rounds.
  EXPECT_NEAR(wgmma_time_us(128, 28672, 28672 / 16, 4096 / 64, 132, 1), 51.84, 0.01);
  EXPECT_EQ(wgmma_splits(128, 28672, 28672 / 16, 4096 / 64, 132), 1);
  // Too few chunks to split: 4096x512 (8 chunks) stays whole however short its grid.
  EXPECT_EQ(wgmma_splits(64, 4096, 4096 / 16, 512 / 64, 132), 1);
}

}  // namespace
}  // namespace nvfp4::cuda
