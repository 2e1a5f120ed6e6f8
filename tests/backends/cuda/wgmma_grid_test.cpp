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
            const int s = wgmma_splits(m, n16, kc, wgs, bps * 132);
            ASSERT_GE(s, 1);
            ASSERT_LE(s, 8);
            if (s > 1) {
              EXPECT_GE(kc / s, 8) << "n16 " << n16 << " kc " << kc << " m " << m;
              const int64_t per = ceil_div(kc, s);
              EXPECT_LT((s - 1) * per, kc) << "empty last split: n16 " << n16 << " kc " << kc << " splits " << s;
            }
          }
}

// Bench layers on an H200 (132 SMs; 2 blocks per SM for 256-row blocks: 264 slots), worked by hand from the
// rule (cost = block-rounds x chunks per block; a split must beat the best so far by 10%).
TEST(CudaWgmmaGrid, SplitsFollowTheCostRule) {
  const int64_t slots = 2 * 132;
  // 57344x8192, M = 64: 224 blocks, 128 chunks. s=1: 1 x 128; s=2: 2 x 64; s=3: 3 x 43; s=4: 4 x 32;
  // s=5: 5 x 26; s=6: 6 x 22; s=7: 6 x 19 = 114, the first 10% better (the ragged second round is filled).
  EXPECT_EQ(wgmma_splits(64, 57344 / 16, 8192 / 64, 2, slots), 7);
  // 8192x28672, M = 64: 32 blocks, 448 chunks: every s up to 8 stays in one round; s=8: 1 x 56.
  EXPECT_EQ(wgmma_splits(64, 8192 / 16, 28672 / 64, 2, slots), 8);
  // 28672x4096, M = 64: 112 blocks, 64 chunks. s=2: 1 x 32; s=3: 2 x 22; s=4: 2 x 16 = 32 (not 10% better).
  EXPECT_EQ(wgmma_splits(64, 28672 / 16, 4096 / 64, 2, slots), 2);
  // 57344x8192, M = 128: 448 blocks. s=1: 2 x 128 = 256; s=2: 4 x 64 = 256; s=3: 6 x 43 = 258; s=4: 7 x 32 = 224.
  EXPECT_EQ(wgmma_splits(128, 57344 / 16, 8192 / 64, 2, slots), 4);
  // Too few chunks to split: 4096x512 (8 chunks) stays whole however short its grid.
  EXPECT_EQ(wgmma_splits(64, 4096 / 16, 512 / 64, 1, 3 * 132), 1);
}

}  // namespace
}  // namespace nvfp4::cuda
