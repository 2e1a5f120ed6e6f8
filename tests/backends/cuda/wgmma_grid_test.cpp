// The fused kernels' host grid rules (CPU only; no GPU needed): the decode kernel's tiles per warp and K split,
// the wgmma kernel's token tile and K split.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>

#include "backends/cuda/cuda_linear_internal.h"
#include "backends/cuda/gemm.cuh"
#include "common/error.h"

namespace nvfp4::cuda {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

TEST(CudaWgmmaGrid, TokenTileAndConsumersByMAndRule) {
  EXPECT_EQ(wgmma_tile_tokens(33), 64);
  EXPECT_EQ(wgmma_tile_tokens(64), 64);
  EXPECT_EQ(wgmma_tile_tokens(65), 128);
  EXPECT_EQ(wgmma_tile_tokens(4096), 128);
  EXPECT_EQ(wgmma_consumers(33, 3), 4);  // default: 4 consumer warpgroups up to M = 128
  EXPECT_EQ(wgmma_consumers(64, 3), 4);
  EXPECT_EQ(wgmma_consumers(128, 3), 4);
  EXPECT_EQ(wgmma_consumers(129, 3), 2);
  EXPECT_EQ(wgmma_consumers(1000, 4), 4);
  EXPECT_EQ(wgmma_consumers(40, 5), 2);
  EXPECT_EQ(wgmma_consumers(64, 3, 128), 2);  // blocks of 128 rows: two warpgroups of one row block
  EXPECT_EQ(wgmma_consumers(64, 3, 192), 3);  // blocks of 192 rows: three
  EXPECT_EQ(wgmma_consumers(1000, 5, 192), 3);
  // Every choice is one the launcher takes.
  for (int rows : {256, 192, 128})
    for (int rule : {3, 4, 5, 9, 12})
      for (int64_t m : {33, 64, 65, 128, 129, 1000})
        EXPECT_TRUE(detail::wgmma_consumers_fit(rows, wgmma_consumers(m, rule, rows))) << rows << " " << rule << " " << m;
}

// The smallest M on the wgmma kernel: 17 from 20 Mi weights on (measured: 6144x4096, 24 Mi, faster there at M =
// 17-32), whatever the estimates say; below, 17 where the wgmma estimate at M = 32 beats the decode kernel's on its
// nt4 nw1 wk8 grid. On 132 SMs that is change 124's measured split of eight layers (docs/PERF.md): the wgmma kernel
// for 4608x3584 (288 blocks: a second wave), 8192x2048 (512 blocks), 2048x8192 and 1024x4096 (128 and 64 blocks of 16
// and 8 chunks per warp), the decode kernel for 4096x4096, 4096x2048, 2048x2048 and 3072x3072 (one wave of at most
// 8 chunks per warp); grids the decode estimate was not fitted to (two tiles per warp: 8960x1536) keep it. Where
// the decode kernel is the faster at M = 32, the same comparison at M = 64 keeps it there up to 64 (65).
TEST(CudaWgmmaGrid, WgmmaFromM17ByWeightCountOrEstimate) {
  EXPECT_EQ(kWgmmaFrom17MinWeights, 5120 * 4096);
  for (Semantics s : {Semantics::W4A16, Semantics::W4A4, Semantics::W4A4_VLLM})
    for (int sms : {132, 114, 78, 1}) {
      EXPECT_EQ(default_wgmma_from(s, 5120, 4096, sms), 17);
      EXPECT_EQ(default_wgmma_from(s, 4096, 5120, sms), 17);
      EXPECT_EQ(default_wgmma_from(s, 8192, 28672, sms), 17);
      EXPECT_EQ(default_wgmma_from(s, 128256, 4096, sms), 17);
    }
  for (Semantics s : {Semantics::W4A16, Semantics::W4A4}) {
    for (auto [n, k] : {std::pair<int64_t, int64_t>{4608, 3584}, {8192, 2048}, {2048, 8192}, {1024, 4096}})
      EXPECT_EQ(default_wgmma_from(s, n, k, 132), 17) << n << "x" << k;
    for (auto [n, k] : {std::pair<int64_t, int64_t>{4096, 4096}, {4096, 2048}, {2048, 2048}, {3072, 3072}})
      EXPECT_GE(default_wgmma_from(s, n, k, 132), 33) << n << "x" << k;
    EXPECT_EQ(decode_grid(32, 8960 / 16, 1536 / 64, 132, 13).nw, 2);
    EXPECT_EQ(default_wgmma_from(s, 8960, 1536, 132), 33);
    // M = 33-64 (change 126, H200): the decode kernel's two token tile rows one wave of blocks (2048x2048 and
    // 2048x1024: 256 blocks of 264 slots; 1024x2048: 128) measured 0.59-0.98x the wgmma kernel's time, two waves
    // (4096x2048, 4096x1536, 3072x2048: 384-512 blocks) 1.32-1.48x; 4100x1024 (514 blocks of 2 chunks per warp) a
    // tie for W4A16 and 1.11x for W4A4.
    for (auto [n, k] : {std::pair<int64_t, int64_t>{2048, 2048}, {2048, 1024}, {1024, 2048}})
      EXPECT_EQ(default_wgmma_from(s, n, k, 132), 65) << n << "x" << k;
    for (auto [n, k] : {std::pair<int64_t, int64_t>{4096, 2048}, {4096, 1536}, {3072, 2048}, {4100, 1024}})
      EXPECT_EQ(default_wgmma_from(s, n, k, 132), 33) << n << "x" << k;
    // A decode grid at M = 64 the estimate was not fitted to (K split 4 ways: 896x896) keeps the wgmma kernel there.
    EXPECT_EQ(decode_grid(64, 896 / 16, 896 / 64, 132, 13).wk, 4);
    EXPECT_NE(default_wgmma_from(s, 896, 896, 132), 65);
  }
  // Warps of more than 4 chunks keep the wgmma kernel at M = 33-64 where the decode estimate puts them ahead
  // (kDecodeTo64MaxChunksPerWarp): 1024x3072 and 1024x2816 W4A4 (6 chunks; W4A16 runs the wgmma kernel from 17),
  // 1280x2560 and 2048x2560 (5): W4A4 measured 1.00-1.19x the wgmma kernel's time on the decode kernel there
  // (2048x2560 W4A16, also kept: 0.93-1.01x).
  for (auto [n, k] : {std::pair<int64_t, int64_t>{1024, 3072}, {1024, 2816}, {1280, 2560}, {2048, 2560}}) {
    const int64_t kc = k / 64;
    const DecodeGrid g = decode_grid(64, n / 16, kc, 132, 13);
    ASSERT_EQ(g.wk, 8);
    EXPECT_GT(ceil_div(kc, int64_t{8}), kDecodeTo64MaxChunksPerWarp);
    const WgmmaGrid w = wgmma_grid(64, n, n / 16, kc, 132, false);
    EXPECT_LT(decode_nt4_grid_us(g, kc), wgmma_call_us(64, n, n / 16, kc, 132, w.split, w.rows, false) + kWgmmaCallUs)
        << n << "x" << k;
    EXPECT_EQ(default_wgmma_from(Semantics::W4A4, n, k, 132), 33) << n << "x" << k;
  }
  EXPECT_EQ(default_wgmma_from(Semantics::W4A16, 1024, 3072, 132), 17);
  EXPECT_EQ(default_wgmma_from(Semantics::W4A16, 2048, 2560, 132), 33);
  // The estimates themselves: the decode kernel's waves (288 blocks on 264 slots: 2) x (2.9 + 0.87 x 7 chunks).
  const DecodeGrid g = decode_grid(32, 4608 / 16, 3584 / 64, 132, 13);
  ASSERT_EQ(g.blocks, 288);
  ASSERT_EQ(g.slots, 264);
  EXPECT_NEAR(decode_nt4_grid_us(g, 3584 / 64), 2 * (kDecodeWaveUs + 7 * kDecodeChunkUs), 1e-9);
}

// The wgmma kernel permutes the activations itself on one round of 128-row, 64-token blocks (at most one block per
// SM): 4096x4096 at M = 33-64 and 4096x14336 at M = 64 on 132 SMs (docs/PERF.md, change 118); not on two rounds nor
// where the kernel has no such form.
TEST(CudaWgmmaGrid, OwnPermutationOnOneRoundOfBlocks) {
  const int64_t n16 = 4096 / 16, kc = 4096 / 64;
  for (int64_t m : {33, 64}) {
    const WgmmaGrid g = wgmma_grid(m, 4096, n16, kc, 132);
    ASSERT_EQ(g.rows, 128);
    ASSERT_EQ(g.split.splits, 4);
    EXPECT_TRUE(wgmma_raw_x_pays(m, n16, 132, g.rows, g.split)) << m;
    EXPECT_FALSE(wgmma_raw_x_pays(m, n16, 100, g.rows, g.split)) << m;  // 128 blocks: two rounds on 100 SMs
  }
  const WgmmaGrid g = wgmma_grid(64, 4096, n16, 14336 / 64, 132);  // 4096x14336: 128 blocks of 56 chunks
  ASSERT_EQ(g.rows, 128);
  EXPECT_TRUE(wgmma_raw_x_pays(64, n16, 132, g.rows, g.split));
  EXPECT_TRUE(wgmma_raw_x_pays(64, n16, 132, 128, {4, 8}));      // 8 unsplit row blocks + 24 x 4 split: 104 blocks
  EXPECT_FALSE(wgmma_raw_x_pays(64, n16, 132, 128, {5, 0}));     // 160 blocks: two rounds
  EXPECT_FALSE(wgmma_raw_x_pays(64, 28672 / 16, 132, 128, {1, 0}));  // 28672x4096: 224 blocks
  EXPECT_FALSE(wgmma_raw_x_pays(65, n16, 132, 128, {4, 0}));     // 128-token tiles: no such form
  EXPECT_FALSE(wgmma_raw_x_pays(64, n16, 132, 256, {8, 0}));     // 256-row blocks: no such form
  EXPECT_FALSE(wgmma_raw_x_pays(64, n16, 132, 192, {4, 0}));     // 192-row blocks: no such form
}

// A call that may permute its activations in the wgmma kernel (W4A16) credits grids of that form whose blocks have at
// most kWgmmaOwnPermuteMaxChunks chunks with the permutation kernel's time (kWgmmaPermuteUs, 1.5 µs); W4A4, which
// always runs that kernel, compares the plain estimates. Worked by hand on 132 SMs (docs/PERF.md, change 123):
// - 6144x4096, M = 64: 128 rows in 2 splits, 96 blocks of 32 chunks in one round, 32 x 0.3025 + 64 x 6144 x 18
//   bytes at 5 TB/s + 2 = 13.10, credited 11.60; 256 rows, 5 splits: 13 x 0.55 + 64 x 6144 x 42 / 5e6 + 2 = 12.45;
//   192 rows, 4 splits: 16 x 0.4235 + 64 x 6144 x 34 / 5e6 + 2 = 11.45, not 5% below 11.60: 128 rows. Without the
//   credit 192 rows (11.45 < 0.95 x 12.45).
// - 4096x14336, M = 17: 128 rows in 4 splits, 128 blocks of 56 chunks, 56 x 0.3025 + 17 x 4096 x 34 / 5e6 + 2 =
//   19.41, credited 17.91; 256 rows in 8 splits: 28 x 0.55 + 17 x 4096 x 66 / 5e6 + 2 = 18.32: 128 rows with the
//   credit, 256 without.
// - 8192x8192, M = 17: 128 rows in 2 splits would be 128 blocks of 64 chunks, no credit: 256 rows in 4 splits
//   either way.
TEST(CudaWgmmaGrid, OwnPermutationCreditedWhereTheCallMayUseIt) {
  const int64_t n16 = 6144 / 16, kc = 4096 / 64;
  EXPECT_NEAR(wgmma_time_us(64, 6144, n16, kc, 132, {2, 0}, 128), 32 * 0.3025 + 64.0 * 6144 * 18 / 5e6 + 2, 0.01);
  EXPECT_NEAR(wgmma_call_us(64, 6144, n16, kc, 132, {2, 0}, 128, true),
              wgmma_time_us(64, 6144, n16, kc, 132, {2, 0}, 128) - kWgmmaPermuteUs, 1e-9);
  EXPECT_NEAR(wgmma_call_us(64, 6144, n16, kc, 132, {2, 0}, 128, false),
              wgmma_time_us(64, 6144, n16, kc, 132, {2, 0}, 128), 1e-9);
  // two rounds (5 splits: 240 blocks): no such form, no credit
  EXPECT_NEAR(wgmma_call_us(64, 6144, n16, kc, 132, {5, 0}, 128, true),
              wgmma_time_us(64, 6144, n16, kc, 132, {5, 0}, 128), 1e-9);
  EXPECT_NEAR(wgmma_time_us(64, 6144, n16, kc, 132, {4, 0}, 192), 16 * 0.55 * 0.77 + 64.0 * 6144 * 34 / 5e6 + 2,
              0.01);
  const WgmmaGrid own = wgmma_grid(64, 6144, n16, kc, 132, true);
  EXPECT_EQ(own.rows, 128);
  EXPECT_EQ(own.split.splits, 2);
  EXPECT_TRUE(wgmma_raw_x_pays(64, n16, 132, own.rows, own.split));
  const WgmmaGrid plain = wgmma_grid(64, 6144, n16, kc, 132, false);
  EXPECT_EQ(plain.rows, 192);
  EXPECT_EQ(plain.split.splits, 4);

  const int64_t n16b = 4096 / 16, kcb = 14336 / 64;
  EXPECT_NEAR(wgmma_time_us(17, 4096, n16b, kcb, 132, {8, 0}, 256), 28 * 0.55 + 17.0 * 4096 * 66 / 5e6 + 2, 0.01);
  EXPECT_NEAR(wgmma_time_us(17, 4096, n16b, kcb, 132, {4, 0}, 128), 56 * 0.3025 + 17.0 * 4096 * 34 / 5e6 + 2, 0.01);
  const WgmmaGrid own17 = wgmma_grid(17, 4096, n16b, kcb, 132, true);
  EXPECT_EQ(own17.rows, 128);
  EXPECT_EQ(own17.split.splits, 4);
  const WgmmaGrid plain17 = wgmma_grid(17, 4096, n16b, kcb, 132, false);
  EXPECT_EQ(plain17.rows, 256);
  EXPECT_EQ(plain17.split.splits, 8);

  const int64_t n16c = 8192 / 16, kcc = 8192 / 64;
  EXPECT_TRUE(wgmma_raw_x_pays(17, n16c, 132, 128, {2, 0}));
  EXPECT_NEAR(wgmma_call_us(17, 8192, n16c, kcc, 132, {2, 0}, 128, true),
              wgmma_time_us(17, 8192, n16c, kcc, 132, {2, 0}, 128), 1e-9);
  const WgmmaGrid long_blocks = wgmma_grid(17, 8192, n16c, kcc, 132, true);
  EXPECT_EQ(long_blocks.rows, 256);
  EXPECT_EQ(long_blocks.split.splits, 4);
}

// The split of the last round's blocks is considered before the split of every block: 57344x8192 at M = 17 on 132
// SMs (224 row blocks of 256, 128 chunks) takes the 4-way split from row block 132 (the 92 blocks of the second,
// partial round), although a uniform 4-way split also estimates more than 5% below the unsplit grid; the uniform one
// measured 9% slower there (docs/PERF.md, change 112).
TEST(CudaWgmmaGrid, TailSplitConsideredBeforeTheUniformOne) {
  const int64_t n = 57344, n16 = n / 16, kc = 8192 / 64;
  const double unsplit = wgmma_time_us(17, n, n16, kc, 132, {1, 0}, 256);
  EXPECT_LT(wgmma_time_us(17, n, n16, kc, 132, {4, 0}, 256), 0.95 * unsplit);  // the uniform split qualifies too
  const WgmmaGrid g = wgmma_grid(17, n, n16, kc, 132);
  EXPECT_EQ(g.rows, 256);
  EXPECT_EQ(g.split.splits, 4);
  EXPECT_EQ(g.split.split_rb0, 132);
}

// The one rule for a split's first row block: inside the layer in the call's block height, any block without a
// split. 300 rows: blocks 0-2 of 128 rows, 0-1 of 256.
TEST(CudaWgmmaGrid, SplitStartsInsideTheLayer) {
  using detail::wgmma_split_inside;
  EXPECT_TRUE(wgmma_split_inside(2, 2, 128, 300));
  EXPECT_FALSE(wgmma_split_inside(2, 3, 128, 300));
  EXPECT_TRUE(wgmma_split_inside(4, 1, 256, 300));
  EXPECT_FALSE(wgmma_split_inside(4, 2, 256, 300));
  EXPECT_FALSE(wgmma_split_inside(2, -1, 128, 300));
  EXPECT_TRUE(wgmma_split_inside(1, 7, 256, 300));  // no split: split_rb0 is not used
}

// Every split takes >= 8 chunks and none is empty (the kernel gives split z the chunks [z·per, z·per + per)),
// and a partial split starts inside the layer, on layer sizes from one tile to the largest bench layer and M from
// 33 to 4096.
TEST(CudaWgmmaGrid, SplitsAreBoundedAndNeverEmpty) {
  for (int rows : {256, 192, 128})
  for (int64_t n16 : {1, 3, 4, 5, 64, 256, 640, 1792, 3584})
    for (int64_t kc : {1, 3, 7, 8, 15, 16, 17, 64, 65, 128, 224, 448})
      for (int64_t m : {33, 64, 65, 128, 256, 1024, 4096}) {
        const WgmmaSplit sp = wgmma_split(m, n16 * 16, n16, kc, 132, rows);
        const int s = sp.splits;
        ASSERT_GE(s, 1);
        ASSERT_LE(s, 8);
        if (s > 1) {
          EXPECT_GE(kc / s, 8) << "n16 " << n16 << " kc " << kc << " m " << m;
          const int64_t per = ceil_div(kc, s);
          EXPECT_LT((s - 1) * per, kc) << "empty last split: n16 " << n16 << " kc " << kc << " splits " << s;
          EXPECT_GE(sp.split_rb0, 0);
          EXPECT_LT(sp.split_rb0 * rows, n16 * 16) << "n16 " << n16 << " kc " << kc << " m " << m << " rows " << rows;
        }
      }
}

// Bench layers on an H200 (132 SMs, blocks of 256 rows, one per SM), worked by hand from the estimate: blocks
// started in launch order on the first free SM, finish time in chunks x 0.55 µs (64 tokens) or 0.74 µs (128);
// plus M·cols·(8·s + 2) bytes and 2 µs when split, the bytes at 5 TB/s where the partial sums (4·s·M·cols bytes)
// take at most 32 MiB and at 3 TB/s above; a split must beat the best so far by 5%, uniform splits tried before
// the ones of the last round's blocks. docs/PERF.md (changes 24, 28 and 63) has these layers measured.
TEST(CudaWgmmaGrid, SplitsFollowTheTimeEstimate) {
  // 57344x8192, M = 64: 224 blocks (2 rounds), 128 chunks: s=1 2 x 128 x 0.55 = 140.8; s=2: 448 blocks, 4
  // rounds x 64, partial sums of 29.4 MB. Last round: 92 blocks, split from block 132: 4 ways, 368 blocks of 32
  // chunks after 132 of 128 end at 128 + 3 x 32 = 224 chunks, 123.2 µs + 64 x 23552 columns x 34 bytes (24.1
  // MB of partial sums) = 135.45, not 5% below 140.8: no split.
  EXPECT_NEAR(wgmma_time_us(64, 57344, 57344 / 16, 8192 / 64, 132, {1, 0}), 140.8, 0.01);
  EXPECT_NEAR(wgmma_time_us(64, 57344, 57344 / 16, 8192 / 64, 132, {2, 0}), 140.8 + 64 * 57344 * 18 / 5e6 + 2,
              0.01);
  EXPECT_NEAR(wgmma_time_us(64, 57344, 57344 / 16, 8192 / 64, 132, {4, 132}), 123.2 + 64.0 * 23552 * 34 / 5e6 + 2,
              0.01);
  EXPECT_EQ(wgmma_split(64, 57344, 57344 / 16, 8192 / 64, 132).splits, 1);
  // 4096x4096, M = 64: 16 blocks, 64 chunks. s=1 35.2; s=2 32 x 0.55 + 0.94 + 2 = 20.54; s=3 22 x 0.55 + 1.36 +
  // 2 = 15.46; s=4 16 x 0.55 + 1.78 + 2 = 12.58; s=5 13 x 0.55 + 2.20 + 2 = 11.35; s=6 11 x 0.55 + 2.62 + 2 =
  // 10.67; s=7 10 x 0.55 + 3.04 + 2 = 10.54 (not 5% below 10.67); s=8 8 x 0.55 + 3.46 + 2 = 9.86 (< 10.14).
  EXPECT_NEAR(wgmma_time_us(64, 4096, 4096 / 16, 4096 / 64, 132, {4, 0}), 16 * 0.55 + 64 * 4096 * 34 / 5e6 + 2, 0.01);
  EXPECT_EQ(wgmma_split(64, 4096, 4096 / 16, 4096 / 64, 132).splits, 8);
  // 6144x4096, M = 64: 24 blocks, 64 chunks. s=4: 96 blocks, 16 x 0.55 + 2.67 + 2 = 13.47; s=5: 120 blocks,
  // 13 x 0.55 + 3.30 + 2 = 12.45 (< 12.80); s=6 and 8: 144 and 192 blocks, two rounds.
  EXPECT_EQ(wgmma_split(64, 6144, 6144 / 16, 4096 / 64, 132).splits, 5);
  // 10240x8192, M = 64: 40 blocks, 128 chunks. s=3: 120 blocks, 1 round x 43 x 0.55 + 3.41 + 2 = 29.06; s=4
  // and more: 160+ blocks, 2 rounds or more.
  EXPECT_EQ(wgmma_split(64, 10240, 10240 / 16, 8192 / 64, 132).splits, 3);
  // 28672x4096, M = 128: 112 blocks (1 round) x 64 chunks x 0.74 = 47.36; s=2: 2 rounds.
  EXPECT_NEAR(wgmma_time_us(128, 28672, 28672 / 16, 4096 / 64, 132, {1, 0}), 47.36, 0.01);
  EXPECT_EQ(wgmma_split(128, 28672, 28672 / 16, 4096 / 64, 132).splits, 1);
  // 4096x14336, M = 768: 6 x 16 = 96 blocks of 224 chunks, 165.76. s=4: 384 blocks of 56 chunks in 3 rounds,
  // 124.32, but its partial sums take 50.3 MB (more than L2 keeps): 768 x 4096 x 34 bytes at 3 TB/s + 2 =
  // 161.97, not 5% below: no split (at 5 TB/s it would split, and measured 7% slower).
  EXPECT_NEAR(wgmma_time_us(768, 4096, 4096 / 16, 14336 / 64, 132, {4, 0}), 168 * 0.74 + 768.0 * 4096 * 34 / 3e6 + 2,
              0.01);
  EXPECT_EQ(wgmma_split(768, 4096, 4096 / 16, 14336 / 64, 132).splits, 1);
  // 10240x8192, M = 1024: 8 x 40 = 320 blocks of 128 chunks, 3 rounds: 384 x 0.74 = 284.16. Uniform splits
  // pay for all 10240 columns (s=2: 5 rounds of 64 = 320 chunks, 83.9 MB of partial sums at 3 TB/s: + 62.9 + 2
  // = 301.7). The last round's 56 blocks are the 7 last 256-row blocks: split from block 33, 2 ways, 112 blocks
  // of 64 chunks after 2 rounds: 320 x 0.74 + 1024 x 1792 x 18 / 5e6 + 2 = 245.41 (s=3: 342 chunks; s=4: 320
  // chunks + 12.48 + 2 = 251.28).
  EXPECT_NEAR(wgmma_time_us(1024, 10240, 10240 / 16, 8192 / 64, 132, {1, 0}), 284.16, 0.01);
  EXPECT_NEAR(wgmma_time_us(1024, 10240, 10240 / 16, 8192 / 64, 132, {2, 0}),
              320 * 0.74 + 1024.0 * 10240 * 18 / 3e6 + 2, 0.01);
  EXPECT_NEAR(wgmma_time_us(1024, 10240, 10240 / 16, 8192 / 64, 132, {2, 33}), 245.41, 0.01);
  const WgmmaSplit tail = wgmma_split(1024, 10240, 10240 / 16, 8192 / 64, 132);
  EXPECT_EQ(tail.splits, 2);
  EXPECT_EQ(tail.split_rb0, 33);
  // 6144x4096, M = 1024: 192 blocks of 64 chunks (128 chunks, 94.72 µs). The last round's 60 blocks take 8
  // 256-row blocks: the 128 whole blocks leave 4 SMs free at once, which take 8 of the 128 half blocks (32
  // chunks each) by chunk 64, the other 120 end at 96: 96 x 0.74 + 1024 x 2048 x 18 / 5e6 + 2 = 80.59.
  EXPECT_NEAR(wgmma_time_us(1024, 6144, 6144 / 16, 4096 / 64, 132, {2, 16}), 80.59, 0.01);
  const WgmmaSplit small = wgmma_split(1024, 6144, 6144 / 16, 4096 / 64, 132);
  EXPECT_EQ(small.splits, 2);
  EXPECT_EQ(small.split_rb0, 16);
  // Too few chunks to split: 4096x512 (8 chunks) stays whole however short its grid.
  EXPECT_EQ(wgmma_split(64, 4096, 4096 / 16, 512 / 64, 132).splits, 1);
}

// Blocks of 128 rows (0.55 x the chunk time: 0.3025 µs for 64 tokens, 0.407 for 128) against 256, each with its
// own best split, worked by hand.
TEST(CudaWgmmaGrid, RowsPerBlockFollowTheTimeEstimate) {
  // 4096x4096, M = 64: 256 rows: s=8, 9.86 (above). 128 rows: 32 blocks of 64 chunks, s=1 19.36; s=2 64 blocks,
  // 32 x 0.3025 + 0.94 + 2 = 12.62; s=3 96 blocks, 22 x 0.3025 + 1.36 + 2 = 10.02; s=4 128 blocks, 16 x 0.3025 +
  // 1.78 + 2 = 8.62; s=5-8 two rounds (10.3-12.1): s=4, 8.62 < 9.86, so blocks of 128 rows.
  EXPECT_NEAR(wgmma_time_us(64, 4096, 4096 / 16, 4096 / 64, 132, {4, 0}, 128),
              16 * 0.3025 + 64 * 4096 * 34 / 5e6 + 2, 0.01);
  EXPECT_EQ(wgmma_split(64, 4096, 4096 / 16, 4096 / 64, 132, 128).splits, 4);
  EXPECT_EQ(wgmma_grid(64, 4096, 4096 / 16, 4096 / 64, 132).rows, 128);
  // 57344x8192, M = 1024: 256 rows: 1792 blocks of 128 chunks, 14 rounds, 1792 x 0.74 = 1326.08; 128 rows: 3584
  // blocks, 28 rounds (27.2 of work), 3584 x 0.407 = 1458.7 unsplit: blocks of 256 rows.
  EXPECT_NEAR(wgmma_time_us(1024, 57344, 57344 / 16, 8192 / 64, 132, {1, 0}, 128), 3584 * 0.74 * 0.55, 0.01);
  EXPECT_EQ(wgmma_grid(1024, 57344, 57344 / 16, 8192 / 64, 132).rows, 256);
}

// The launcher refuses block shapes it has no kernel for, with its own message, before touching the device (no
// GPU needed; a refusal from the CUDA runtime instead would carry another message): rows other than 128, 192 and
// 256, a consumer count that does not fit the rows (192 and 128 rows: three and two warpgroups; 256: two or four),
// a token tile other than 64 and 128.
TEST(CudaWgmmaGrid, LauncherRefusesBlockShapesItHasNoKernelFor) {
  auto refusal = [](int rows, int tile_tokens, int consumers) -> std::string {
    detail::GemmParams p;
    p.wgmma_rows = rows;
    try {
      detail::launch_wgmma_gemm(p, DType::BF16, detail::Mode::Exact, tile_tokens, consumers, nullptr);
    } catch (const Error& e) {
      return e.what();
    }
    return "(not refused)";
  };
  const int bad[][3] = {{100, 128, 2}, {320, 128, 4}, {192, 128, 2}, {192, 64, 4}, {256, 128, 3},
                        {128, 64, 3},  {128, 128, 4}, {192, 96, 3}};
  for (const auto& b : bad) {
    const std::string msg = refusal(b[0], b[1], b[2]);
    EXPECT_NE(msg.find("wgmma gemm:"), std::string::npos)
        << "rows " << b[0] << " tokens " << b[1] << " consumers " << b[2] << ": " << msg;
  }
  EXPECT_NE(refusal(192, 128, 2).find("blocks of 192 and 128 rows: 3 and 2"), std::string::npos);
}

// Blocks of 192 rows (0.77 x the chunk time: 0.5698 µs for 128 tokens) where their estimate is at least 5% below
// the 256- and 128-row grids', worked by hand.
TEST(CudaWgmmaGrid, RowsOf192WhereTheyAreFivePercentFaster) {
  const int64_t n16 = 6144 / 16, kc = 4096 / 64;
  // 6144x4096, M = 1024: 8 token tiles x 32 row blocks of 192 = 256 blocks of 64 chunks, 2 rounds unsplit:
  // 128 x 0.5698 = 72.93 (its splits add partial sums without shortening the rounds). 256 rows: 80.59 with the
  // last round's blocks split (above); 128 rows: 384 blocks, 3 rounds, 192 x 0.407 = 78.14. 72.93 < 0.95 x 78.14.
  EXPECT_NEAR(wgmma_rows_factor(192), 0.77, 1e-12);
  EXPECT_NEAR(wgmma_time_us(1024, 6144, n16, kc, 132, {1, 0}, 192), 128 * 0.74 * 0.77, 0.01);
  EXPECT_NEAR(wgmma_time_us(1024, 6144, n16, kc, 132, {1, 0}, 128), 192 * 0.74 * 0.55, 0.01);
  EXPECT_EQ(wgmma_split(1024, 6144, n16, kc, 132, 192).splits, 1);
  const WgmmaGrid g = wgmma_grid(1024, 6144, n16, kc, 132);
  EXPECT_EQ(g.rows, 192);
  EXPECT_EQ(g.split.splits, 1);
  // 6144x4096, M = 256: 128 rows, 96 blocks of 64 chunks in one round, 64 x 0.407 = 26.05; 192 rows, 64 blocks
  // split 2 ways, 128 blocks of 32 chunks: 32 x 0.5698 + 256 x 6144 x 18 bytes at 5 TB/s + 2 = 25.89, below
  // 26.05 but not by 5% (measured: 26.3 µs on 128 rows, 31.6 on that 192-row split): 128 rows.
  EXPECT_NEAR(wgmma_time_us(256, 6144, n16, kc, 132, {2, 0}, 192), 32 * 0.74 * 0.77 + 256.0 * 6144 * 18 / 5e6 + 2,
              0.01);
  EXPECT_EQ(wgmma_split(256, 6144, n16, kc, 132, 192).splits, 2);
  EXPECT_EQ(wgmma_grid(256, 6144, n16, kc, 132).rows, 128);
}

// Above the small layers' crossover (M = 512), M up to 1024 stays on the wgmma kernel where its grid fills its
// rounds. 4096x4096 at M = 1024: 8 token tiles x 16 row blocks = 128 blocks of 64 chunks, one round unsplit (the
// grid's pick), so the fill is 128 / 132. At M = 768, 6 token tiles x 22 blocks of 192 rows = 132 blocks, one full
// round; 6144x4096 at M = 1024: 256 blocks of 192 rows, 2 rounds for 1.94 rounds of work (each grid's work spread
// at its own chunk time). 6144x4096 at M = 768: 256-row blocks with the last round's split, fill 0.85: the
// dequantize + cuBLAS path.
TEST(CudaWgmmaGrid, FullRoundsKeepSmallLayersOnTheWgmmaKernel) {
  const WgmmaGrid g = wgmma_grid(1024, 4096, 4096 / 16, 4096 / 64, 132);
  EXPECT_EQ(g.rows, 256);
  EXPECT_EQ(g.split.splits, 1);
  EXPECT_NEAR(wgmma_round_fill(1024, 4096, 4096 / 16, 4096 / 64, 132), 128.0 / 132.0, 1e-9);
  EXPECT_EQ(wgmma_grid(768, 4096, 4096 / 16, 4096 / 64, 132).rows, 192);
  EXPECT_NEAR(wgmma_round_fill(768, 4096, 4096 / 16, 4096 / 64, 132), 1.0, 1e-9);
  EXPECT_NEAR(wgmma_round_fill(1024, 6144, 6144 / 16, 4096 / 64, 132), 256.0 / 264.0, 1e-9);
  EXPECT_LT(wgmma_round_fill(768, 6144, 6144 / 16, 4096 / 64, 132), kFullRoundFill);
  // Whole rounds of 256-row blocks on any SM count: 16 row blocks x 8 token tiles on 64 SMs, exactly 2 rounds.
  EXPECT_NEAR(wgmma_round_fill(1024, 4096, 4096 / 16, 4096 / 64, 64), 1.0, 1e-9);

  EXPECT_EQ(default_full_round_max_m(Semantics::W4A16, 4096, 4096, true), 1024);
  EXPECT_EQ(default_full_round_max_m(Semantics::W4A4, 6144, 4096, true), 1024);
  EXPECT_EQ(default_full_round_max_m(Semantics::W4A4_VLLM, 4096, 4096, true), 0);  // its own crossovers
  EXPECT_EQ(default_full_round_max_m(Semantics::W4A16, 28672, 4096, true), 0);      // not a small layer
  EXPECT_EQ(default_full_round_max_m(Semantics::W4A16, 4096, 4096, false), 0);      // no wgmma kernel

  const int64_t n16 = 4096 / 16, kc = 4096 / 64;
  EXPECT_TRUE(fused_kernel_at(512, 512, 1024, 4096, n16, kc, 132));    // the crossover itself
  EXPECT_TRUE(fused_kernel_at(1024, 512, 1024, 4096, n16, kc, 132));   // one full round
  EXPECT_TRUE(fused_kernel_at(768, 512, 1024, 4096, n16, kc, 132));    // 132 blocks of 192 rows
  EXPECT_FALSE(fused_kernel_at(1024, 512, 0, 4096, n16, kc, 132));     // an explicit crossover: no exception
  EXPECT_FALSE(fused_kernel_at(1024, 512, 1024, 4096, n16, kc, 120));  // 128 blocks on 120 SMs: 2 rounds
  EXPECT_FALSE(fused_kernel_at(2048, 512, 1024, 4096, n16, kc, 132));  // full rounds too, but above 1024
  EXPECT_TRUE(fused_kernel_at(1024, 512, 1024, 6144, 6144 / 16, kc, 132));  // 256 blocks of 192 rows
  EXPECT_FALSE(fused_kernel_at(768, 512, 1024, 6144, 6144 / 16, kc, 132));
}

// Bench layers on 132 SMs, worked by hand from the rule (blocks with the largest K split, 8 warps per block; 3
// blocks per SM for one token tile and one weight tile per warp and for the light variants, 2 otherwise).
TEST(CudaDecodeGrid, TilesPerWarpAndSplitByRule) {
  struct Case {
    int64_t m, n16, kc;
    int rule;
    detail::Mode mode;
    int nt, nw, wk;
    int64_t blocks, slots;
    bool light;
    const char* what;
    bool partial_chunk = true;  // K % 64 != 0
  };
  constexpr detail::Mode kExact = detail::Mode::Exact, kVllm = detail::Mode::Vllm, kPow2 = detail::Mode::VllmPow2;
  const Case cases[] = {
      // 10240x8192 (640 tiles, 128 chunks), M = 1: 4 tiles per warp give 160 blocks (< 90% of 264), 2 give 320
      // on 264 slots, a second wave 21% full: 1 tile per warp, 640 blocks on 396 slots (rule 3); rule 2 keeps 2.
      {1, 640, 128, 3, kExact, 1, 1, 8, 640, 396, false, "10240x8192 m1"},
      {1, 640, 128, 2, kExact, 1, 2, 8, 320, 264, false, "10240x8192 m1 rule 2"},
      // M = 16: two token tiles, 2 tiles per warp (2 blocks per SM), 320 blocks.
      {16, 640, 128, 3, kExact, 2, 2, 8, 320, 264, false, "10240x8192 m16"},
      // 6144x4096 (384 tiles, 64 chunks), M = 16: 96 and 192 blocks are under 90% of a wave, 1 tile per warp:
      // 384 blocks, more than the 264 slots of the 2-block kernel: the light kernel, 396 slots, one wave (not
      // under rule 2).
      {16, 384, 64, 3, kExact, 2, 1, 8, 384, 396, true, "6144x4096 m16"},
      {16, 384, 64, 2, kExact, 2, 1, 8, 384, 264, false, "6144x4096 m16 rule 2"},
      // 4096x4096 (256 tiles), M = 16: 256 blocks fit one wave of the 2-block kernel, which it keeps.
      {16, 256, 64, 3, kExact, 2, 1, 8, 256, 264, false, "4096x4096 m16"},
      // 57344x8192 (3584 tiles): 896 blocks with 4 tiles per warp (3.4 waves).
      {1, 3584, 128, 3, kExact, 1, 4, 8, 896, 264, false, "57344x8192 m1"},
      // 8192x28672 (512 tiles, 448 chunks): 2 tiles per warp, 256 blocks, within one wave of 264.
      {1, 512, 448, 3, kExact, 1, 2, 8, 256, 264, false, "8192x28672 m1"},
      // 28672x4096 (1792 tiles): 448 blocks with 4 tiles per warp (1.7 waves: its second wave is 70% full).
      {1, 1792, 64, 3, kExact, 1, 4, 8, 448, 264, false, "28672x4096 m1"},
      // 4096x4096 (256 tiles): 64 and 128 blocks are too few, 1 tile per warp, 256 blocks on 396 slots.
      {1, 256, 64, 3, kExact, 1, 1, 8, 256, 396, false, "4096x4096 m1"},
      // Rule 7 (the default): 10240x8192 at M = 1 keeps 2 tiles per warp on the light kernel (3 blocks per SM),
      // 320 blocks in one wave of 396 slots, except in the vLLM flavour's per-weight form (1 tile, as rule 3); at
      // M = 16 its grid of 2 tiles (320 blocks on 264 slots) becomes 1 tile per warp on the light 16-token kernel,
      // 640 blocks (1.6 waves of 396), and half the K split, 320 blocks; the vLLM flavour (both forms) keeps the
      // split.
      {1, 640, 128, 7, kExact, 1, 2, 8, 320, 396, true, "10240x8192 m1 rule 7"},
      {1, 640, 128, 7, kVllm, 1, 1, 8, 640, 396, false, "10240x8192 m1 rule 7 vllm"},
      {1, 640, 128, 7, kPow2, 1, 2, 8, 320, 396, true, "10240x8192 m1 rule 7 vllm pow2"},
      // 12672x8192 (792 tiles) at M = 1: 396 two-tile blocks, exactly 1.5 waves of 264: the light kernel holds
      // them in one wave of 396.
      {1, 792, 128, 7, kExact, 1, 2, 8, 396, 396, true, "12672x8192 m1 rule 7"},
      {16, 640, 128, 7, kExact, 2, 1, 4, 320, 396, true, "10240x8192 m16 rule 7"},
      {16, 640, 128, 7, kVllm, 2, 1, 8, 640, 396, true, "10240x8192 m16 rule 7 vllm"},
      {16, 640, 128, 7, kPow2, 2, 1, 8, 640, 396, true, "10240x8192 m16 rule 7 vllm pow2"},
      // 6144x4096 at M = 16: 384 light blocks, within one wave: unchanged.
      {16, 384, 64, 7, kExact, 2, 1, 8, 384, 396, true, "6144x4096 m16 rule 7"},
      // 28672x4096: 448 blocks on 264 slots (1.7 waves) at the largest K split; half of it, 224 blocks, fills
      // 85% of one wave.
      {1, 1792, 64, 7, kExact, 1, 4, 4, 224, 264, false, "28672x4096 m1 rule 7"},
      {16, 1792, 64, 7, kExact, 2, 4, 4, 224, 264, false, "28672x4096 m16 rule 7"},
      // ... and leaves the other grids as rule 3 has them: 57344x8192 needs 3.4 waves.
      {1, 3584, 128, 7, kExact, 1, 4, 8, 896, 264, false, "57344x8192 m1 rule 7"},
      // The power-of-two form at M <= 8: 28672x4096's one wave of 224 four-tile blocks becomes 896 light two-tile
      // blocks with the full K split (rule 8's grid); 57344x8192's 3.4 waves keep their four tiles.
      {1, 1792, 64, 7, kPow2, 1, 2, 8, 896, 396, true, "28672x4096 m1 rule 7 vllm pow2"},
      {8, 1792, 64, 7, kPow2, 1, 2, 8, 896, 396, true, "28672x4096 m8 rule 7 vllm pow2"},
      {16, 1792, 64, 7, kPow2, 2, 4, 4, 224, 264, false, "28672x4096 m16 rule 7 vllm pow2"},
      {1, 3584, 128, 7, kPow2, 1, 4, 8, 896, 264, false, "57344x8192 m1 rule 7 vllm pow2"},
      {16, 512, 448, 7, kExact, 2, 2, 8, 256, 264, false, "8192x28672 m16 rule 7"},
      {1, 256, 64, 7, kExact, 1, 1, 8, 256, 396, false, "4096x4096 m1 rule 7"},
      // Rule 8: the light kernels everywhere at M <= 16.
      {1, 256, 64, 8, kExact, 1, 2, 8, 128, 396, true, "4096x4096 m1 rule 8"},
      {16, 256, 64, 8, kExact, 2, 1, 8, 256, 396, true, "4096x4096 m16 rule 8"},
      // 512x1040 (32 tiles, 17 chunks, the last partial): 8 warps of 3 chunks would leave the last two without
      // any; 4 warps of 5. 512x576 (9 whole chunks) keeps 4 warps of 3, the last one idle.
      {1, 32, 17, 7, kExact, 1, 1, 4, 16, 396, false, "512x1040 m1 rule 7"},
      {1, 32, 9, 7, kExact, 1, 1, 4, 16, 396, false, "512x576 m1 rule 7", false},
      // M = 32, 4096x4096: 32-token tiles (2 tiles per warp at most), 128 blocks < 264 slots: 1 tile, then the K
      // split grows while the grid is under one wave: 8 warps, 256 blocks.
      {32, 256, 64, 3, kExact, 4, 1, 8, 256, 264, false, "4096x4096 m32"},
  };
  for (const Case& c : cases) {
    const DecodeGrid g = decode_grid(c.m, c.n16, c.kc, 132, c.rule, c.mode, c.partial_chunk);
    EXPECT_EQ(g.nt, c.nt) << c.what;
    EXPECT_EQ(g.nw, c.nw) << c.what;
    EXPECT_EQ(g.wk, c.wk) << c.what;
    EXPECT_EQ(g.blocks, c.blocks) << c.what;
    EXPECT_EQ(g.slots, c.slots) << c.what;
    EXPECT_EQ(g.light, c.light) << c.what;
  }
}

// Rule 10: rule 7's grid, then one-token-tile grids of one tile per warp whose tiles fit 2 blocks per SM as one
// tile per block, with >= 2 chunks per warp of 12, run as blocks of 12 warps (wk = 12, one tile per block, 2
// blocks per SM); every other grid as rule 7's. Rule 11 (the default) adds the same at M = 9-16 on the light
// 16-token kernel.
TEST(CudaDecodeGrid, WideFormWhereOneTileBlocksFitTwoPerSm) {
  struct Case {
    int64_t m, n16, kc;
    detail::Mode mode;
    bool partial_chunk;
    bool wide;
    int64_t blocks;
    const char* what;
  };
  constexpr detail::Mode kExact = detail::Mode::Exact, kVllm = detail::Mode::Vllm, kPow2 = detail::Mode::VllmPow2;
  const Case cases[] = {
      {1, 256, 64, kExact, false, true, 256, "4096x4096 m1"},      // 256 one-tile blocks <= 264
      {8, 256, 64, kPow2, false, true, 256, "4096x4096 m8 pow2"},  // one token tile up to M = 8
      {1, 256, 224, kVllm, false, true, 256, "4096x14336 m1 vllm"},
      {1, 256, 25, kExact, true, true, 256, "4096x1552 m1"},  // rule 7: 4 warps of 7 chunks, 128 blocks of 2 tiles
      {1, 69, 24, kExact, false, true, 69, "1100x1536 m1"},   // kc = 24: 2 chunks per warp
      {1, 69, 23, kExact, false, false, 69, "1100x1472 m1"},  // 23 chunks: fewer than 2 per warp of 12
      {1, 264, 64, kExact, false, true, 264, "4224x4096 m1"},      // exactly 2 per SM
      {1, 265, 64, kExact, false, false, 265, "4240x4096 m1"},     // one block more: rule 7's 3-per-SM grid
      {1, 384, 64, kExact, false, false, 384, "6144x4096 m1"},     // 384 blocks: already 3 per SM
      {1, 640, 128, kExact, false, false, 320, "10240x8192 m1"},   // the light two-tile kernel
      {16, 256, 64, kExact, false, false, 256, "4096x4096 m16"},   // two token tiles
  };
  for (const Case& c : cases) {
    const DecodeGrid g7 = decode_grid(c.m, c.n16, c.kc, 132, 7, c.mode, c.partial_chunk);
    const DecodeGrid g = decode_grid(c.m, c.n16, c.kc, 132, 10, c.mode, c.partial_chunk);
    EXPECT_NE(g7.wk, detail::kWideWarps) << c.what;
    EXPECT_EQ(g.wk, c.wide ? detail::kWideWarps : g7.wk) << c.what;
    EXPECT_EQ(g.blocks, c.blocks) << c.what;
    if (!c.wide) {
      EXPECT_EQ(g.blocks, g7.blocks) << c.what;
    }
    EXPECT_EQ(g.slots, c.wide ? 264 : g7.slots) << c.what;
    EXPECT_EQ(g.nt, g7.nt) << c.what;
    EXPECT_EQ(g.nw, g7.nw) << c.what;
    EXPECT_EQ(g.light, g7.light) << c.what;
  }
  EXPECT_EQ(decode_grid(1, 256, 25, 132, 7, kExact, true).wk, 4);  // the partial-chunk split the wide form avoids
  // Rule 11: M <= 8 as rule 10; at M = 9-16 the light 16-token kernel in the wide form where its tiles fit.
  struct Case16 {
    int64_t m, n16, kc;
    bool wide;
  };
  const Case16 cases16[] = {{1, 256, 64, true},  {16, 256, 64, true}, {9, 256, 224, true}, {16, 128, 128, true},
                            {16, 384, 64, false}, {16, 256, 23, false}, {17, 256, 64, false}};
  for (const Case16& c : cases16) {
    const DecodeGrid g10 = decode_grid(c.m, c.n16, c.kc, 132, 10);
    const DecodeGrid g = decode_grid(c.m, c.n16, c.kc, 132, 11);
    const std::string what = std::to_string(c.n16) + " tiles, " + std::to_string(c.kc) + " chunks, m" +
                             std::to_string(c.m);
    EXPECT_EQ(g.wk == detail::kWideWarps, c.wide) << what;
    if (c.m <= 8 || !c.wide) {
      EXPECT_EQ(g.wk, g10.wk) << what;
      EXPECT_EQ(g.light, g10.light) << what;
      EXPECT_EQ(g.blocks, g10.blocks) << what;
    } else {
      EXPECT_TRUE(g.light) << what;
      EXPECT_EQ(g.nt, 2) << what;
      EXPECT_EQ(g.nw, 1) << what;
      EXPECT_EQ(g.blocks, c.n16) << what;
      EXPECT_EQ(g.slots, 264) << what;
    }
  }
  // The kernel's own W4A4 row quantization: the wide form's 12 K ranges of at most ceil(kc / 12) chunks.
  EXPECT_EQ(detail::row_quant_smem_bytes(64, detail::kWideWarps), 12 * 6 * 128);
  EXPECT_EQ(detail::row_quant_smem_bytes(64, 8), 8 * 8 * 128);
  EXPECT_TRUE(row_quant_pays(decode_grid(1, 256, 64, 132, 10), 64, 132));
}

// Rule 13: rule 11's grid, and where one wave of it leaves r < SMs / 2 SMs one block more than the others, its
// last r block rows in min(4, SMs / r) >= 2 parts over K (>= 4 chunks per warp, K a multiple of 64). Worked out by
// hand for 132 SMs: 10240x8192 at M = 1 (640 tiles, 128 chunks) runs 320 light two-tile blocks on 396 slots, q = 2,
// r = 56, 2 parts: 264 + 2·56 = 376 blocks; at M = 16 320 light 16-token blocks of 2 groups (wk 4), the same
// split; 588 tiles: 294 blocks, r = 30, 4 parts of 32 chunks (none with 64 chunks: 2 per warp, or 48); 12672x8192
// (396 blocks) fills its wave evenly; 28672x4096 (224 blocks on 264 slots, r = 92) and 57344x8192 (several waves)
// do not split. 594 and 658 tiles: the layers of CudaLinear.TailSplitWithinBoundAndDeterministic on 132 SMs.
TEST(CudaDecodeGrid, TailSplitWhereOneWaveLeavesFewSmsABlockMore) {
  constexpr detail::Mode kExact = detail::Mode::Exact;
  struct Case {
    int64_t m, n16, kc;
    bool partial_chunk;
    int parts;
    int64_t rows;
  };
  const Case cases[] = {{1, 640, 128, false, 2, 56}, {8, 640, 128, false, 2, 56}, {16, 640, 128, false, 2, 56},
                        {1, 588, 128, false, 4, 30}, {1, 588, 64, false, 1, 0},   {1, 588, 48, false, 1, 0},
                        {1, 594, 128, false, 4, 33}, {1, 658, 64, false, 2, 65},  {1, 640, 128, true, 1, 0},
                        {1, 792, 128, false, 1, 0},  {1, 1792, 64, false, 1, 0},  {1, 3584, 128, false, 1, 0},
                        {1, 640, 4, false, 1, 0},    {40, 640, 128, false, 1, 0}};
  for (const Case& c : cases) {
    const std::string what = std::to_string(c.n16) + " tiles, " + std::to_string(c.kc) + " chunks, m" +
                             std::to_string(c.m) + (c.partial_chunk ? ", partial chunk" : "");
    const DecodeGrid g11 = decode_grid(c.m, c.n16, c.kc, 132, 11, kExact, c.partial_chunk);
    const DecodeGrid g = decode_grid(c.m, c.n16, c.kc, 132, 13, kExact, c.partial_chunk);
    EXPECT_EQ(g11.split_parts, 1) << what;
    EXPECT_EQ(g.split_parts, c.parts) << what;
    EXPECT_EQ(g.split_rows, c.rows) << what;
    EXPECT_EQ(g.blocks, g11.blocks + c.rows * (c.parts - 1)) << what;
    EXPECT_EQ(g.nt, g11.nt) << what;
    EXPECT_EQ(g.nw, g11.nw) << what;
    EXPECT_EQ(g.wk, g11.wk) << what;
    EXPECT_EQ(g.light, g11.light) << what;
    EXPECT_EQ(g.slots, g11.slots) << what;
    if (g.split_parts > 1) {
      EXPECT_EQ(g11.blocks % 132, c.rows) << what;
      EXPECT_LT(g11.blocks / 132, g11.slots / 132) << what;  // one wave with room for a part beside each SM's blocks
      EXPECT_GE(c.kc / g.split_parts, 4 * g.wk) << what;
    }
  }
  EXPECT_EQ(decode_grid(1, 640, 128, 132, 13).wk, 8);
  EXPECT_TRUE(decode_grid(1, 640, 128, 132, 13).light);
}

// Rule 14: a decode grid of more than two waves takes the K split at which its blocks make one wave of >= 80% of the
// slots, where there is one; other grids are rule 13's. 57344x8192 (3584 tiles, 128 chunks): 896 four-tile blocks at
// a split of 8 (3.4 waves of 264) -> 224 at 2 (0.85 of a wave; 448 at 4 is 1.7 waves, 112 at 1 0.42); 128256x4096
// (8016 tiles): 2004 -> 251 at 1; 36864x8192 (2304 tiles): 576 at 8, 288 at 4 (1.09 waves), 144 at 2 (0.55): none
// fits, it keeps 8; 28672x4096 (1792 tiles) is one wave already.
TEST(CudaDecodeGrid, LongBlocksWhereAGridNeedsMoreThanTwoWaves) {
  for (int64_t m : {1, 8, 16}) {
    const DecodeGrid g13 = decode_grid(m, 3584, 128, 132, 13, detail::Mode::Exact, false);
    const DecodeGrid g14 = decode_grid(m, 3584, 128, 132, 14, detail::Mode::Exact, false);
    EXPECT_EQ(g13.wk, 8) << m;
    EXPECT_EQ(g13.blocks, 896) << m;
    EXPECT_EQ(g14.nw, 4) << m;
    EXPECT_EQ(g14.wk, 2) << m;
    EXPECT_EQ(g14.blocks, 224) << m;
    EXPECT_EQ(g14.split_parts, 1) << m;
  }
  EXPECT_EQ(decode_grid(1, 4064, 16, 132, 14).wk, 2);  // the GPU test's layer (8·132 - 40 groups, K = 1024)
  EXPECT_EQ(decode_grid(1, 4064, 16, 132, 14).blocks, 254);
  EXPECT_EQ(decode_grid(16, 4064, 16, 132, 14).wk, 2);
  EXPECT_EQ(decode_grid(1, 8016, 64, 132, 14).wk, 1);
  EXPECT_EQ(decode_grid(1, 8016, 64, 132, 14).blocks, 251);
  EXPECT_EQ(decode_grid(16, 8016, 64, 132, 14).wk, 1);
  EXPECT_EQ(decode_grid(1, 2304, 128, 132, 14).wk, 8);
  EXPECT_EQ(decode_grid(16, 2304, 128, 132, 14).blocks, decode_grid(16, 2304, 128, 132, 13).blocks);
  for (int64_t n16 : {1792, 640, 256, 2004, 2304, 8016})
    for (int64_t m : {1, 16}) {
      const DecodeGrid g13 = decode_grid(m, n16, 64, 132, 13, detail::Mode::Exact, false);
      const DecodeGrid g14 = decode_grid(m, n16, 64, 132, 14, detail::Mode::Exact, false);
      if (g13.blocks > 2 * g13.slots) {
        EXPECT_TRUE(g14.wk == g13.wk || (g14.blocks <= g14.slots && 5 * g14.blocks >= 4 * g14.slots))
            << n16 << " m" << m;
      } else {
        EXPECT_EQ(g14.wk, g13.wk) << n16 << " m" << m;
        EXPECT_EQ(g14.blocks, g13.blocks) << n16 << " m" << m;
      }
    }
  // The default by bandwidth per SM: an H100 SXM's 3.35 TB/s over 132 SMs takes rule 14, an H200's 4.8 TB/s rule 15,
  // an unknown bandwidth rule 15.
  EXPECT_EQ(default_grid_rule(3.35e12 / 132), 14);
  EXPECT_EQ(default_grid_rule(4.8e12 / 132), 15);
  EXPECT_EQ(default_grid_rule(0), 15);
  // 40 token rows run 32-token tiles: rule 13's grid.
  EXPECT_EQ(decode_grid(40, 3584, 128, 132, 14).wk, decode_grid(40, 3584, 128, 132, 13).wk);
}

// Rule 15: rule 14's grid where rule 13's warps have at most kLongBlockMaxWarpChunks (8) chunks, else rule 13's.
// 57344x4096 (3584 tiles, 64 chunks) and 128256x4096 (8016 tiles): 8 chunks per warp at rule 13's split of 8, so
// 224 blocks at a split of 2 and 251 unsplit as under rule 14; 57344x8192 (128 chunks): 16 per warp, so rule 13's 896
// blocks; the GPU test's layer of rule 14 (K = 1024: 2 chunks per warp) rule 14's grid. Over a range of layers and
// M <= 16, every semantics: rule 15's grid is rule 14's or rule 13's by that count.
TEST(CudaDecodeGrid, Rule15TakesLongBlocksWhereRule13sWarpsAreShort) {
  for (int64_t m : {1, 8, 16}) {
    EXPECT_EQ(decode_grid(m, 3584, 64, 132, 15).wk, 2) << m;
    EXPECT_EQ(decode_grid(m, 3584, 64, 132, 15).blocks, 224) << m;
    EXPECT_EQ(decode_grid(m, 8016, 64, 132, 15).wk, 1) << m;
    EXPECT_EQ(decode_grid(m, 8016, 64, 132, 15).blocks, 251) << m;
    EXPECT_EQ(decode_grid(m, 3584, 128, 132, 15).wk, 8) << m;
    EXPECT_EQ(decode_grid(m, 3584, 128, 132, 15).blocks, 896) << m;
    EXPECT_EQ(decode_grid(m, 4064, 16, 132, 15).blocks, decode_grid(m, 4064, 16, 132, 14).blocks) << m;
  }
  auto same = [](const DecodeGrid& a, const DecodeGrid& b) {
    return a.nt == b.nt && a.nw == b.nw && a.wk == b.wk && a.blocks == b.blocks && a.light == b.light &&
           a.split_parts == b.split_parts;
  };
  int long_seen = 0, kept_seen = 0;
  for (detail::Mode mode : {detail::Mode::Exact, detail::Mode::Vllm, detail::Mode::VllmPow2})
    for (int64_t kc : {16, 32, 64, 96, 128, 224})
      for (int64_t n16 : {256, 640, 1792, 2304, 3584, 4064, 8016})
        for (int64_t m : {1, 8, 9, 16}) {
          const DecodeGrid g13 = decode_grid(m, n16, kc, 132, 13, mode, false);
          const DecodeGrid g14 = decode_grid(m, n16, kc, 132, 14, mode, false);
          const DecodeGrid g15 = decode_grid(m, n16, kc, 132, 15, mode, false);
          const bool short_warps = ceil_div(kc, g13.wk) <= kLongBlockMaxWarpChunks;
          EXPECT_TRUE(same(g15, short_warps ? g14 : g13)) << n16 << "x" << kc << " m" << m;
          if (!same(g13, g14)) ++(short_warps ? long_seen : kept_seen);
        }
  EXPECT_GT(long_seen, 0);  // the range holds grids of both kinds
  EXPECT_GT(kept_seen, 0);
}

// A forced decode grid (measurements): the blocks of the grid asked for, worked out by hand, and a one-line
// refusal for what has no kernel or no room. 640 tiles and 128 chunks (10240x8192), 132 SMs.
TEST(CudaDecodeGrid, ForcedGridCountsItsBlocksAndRefusesWhatHasNoKernel) {
  struct Case {
    int64_t m;
    ForcedDecodeGrid f;
    int nt;
    int64_t blocks, slots, split_rows;
  };
  const Case cases[] = {
      {16, ForcedDecodeGrid{1, 4, true, 1}, 2, 320, 396, 0},      // 640 groups, 2 per block of 8 warps
      {16, ForcedDecodeGrid{1, 4, true, 2}, 2, 640, 396, 320},    // ... every row in 2 parts
      {16, ForcedDecodeGrid{2, 8, false, 1}, 2, 320, 264, 0},     // 320 groups, 1 per block
      {16, ForcedDecodeGrid{4, 2, false, 4}, 2, 160, 264, 40},    // 160 groups, 4 per block, 4 parts
      {16, ForcedDecodeGrid{1, 12, true, 1}, 2, 640, 264, 0},     // the wide form: one tile per block, 2 per SM
      {1, ForcedDecodeGrid{2, 8, true, 1}, 1, 320, 396, 0},       // the light two-tile kernel
      {1, ForcedDecodeGrid{1, 12, false, 3}, 1, 1920, 264, 640},  // wide form, 3 parts of 128 / 3 = 42 chunks >= 24
      {32, ForcedDecodeGrid{2, 1, false, 1}, 4, 40, 264, 0}};     // 320 groups, 8 per block
  for (const Case& c : cases) {
    const std::string what = "m" + std::to_string(c.m) + " nw" + std::to_string(c.f.nw) + " wk" +
                             std::to_string(c.f.wk) + (c.f.light ? " light" : "") + " parts " + std::to_string(c.f.parts);
    const DecodeGrid g = forced_decode_grid(c.m, 640, 128, 132, c.f, false);
    EXPECT_EQ(g.nt, c.nt) << what;
    EXPECT_EQ(g.nw, c.f.nw) << what;
    EXPECT_EQ(g.wk, c.f.wk) << what;
    EXPECT_EQ(g.light, c.f.light) << what;
    EXPECT_EQ(g.blocks, c.blocks) << what;
    EXPECT_EQ(g.slots, c.slots) << what;
    EXPECT_EQ(g.split_parts, c.f.parts) << what;
    EXPECT_EQ(g.split_rows, c.split_rows) << what;
  }
  auto refused = [](int64_t m, const ForcedDecodeGrid& f, int64_t kc, bool partial, const char* why) {
    try {
      forced_decode_grid(m, 640, kc, 132, f, partial);
      ADD_FAILURE() << "accepted: " << why;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("forced decode grid"), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  };
  refused(32, ForcedDecodeGrid{4, 8, false, 1}, 128, false, "four tiles per warp with 32-token tiles");
  refused(1, ForcedDecodeGrid{1, 8, true, 1}, 128, false, "no light one-tile kernel for one token tile");
  refused(16, ForcedDecodeGrid{2, 8, true, 1}, 128, false, "no light two-tile kernel for 16 tokens");
  refused(16, ForcedDecodeGrid{2, 12, false, 1}, 128, false, "no wide form with two tiles");
  refused(16, ForcedDecodeGrid{1, 3, false, 1}, 128, false, "a K split of 3");
  refused(1, ForcedDecodeGrid{1, 8, false, 2}, 128, true, "a split with K not a multiple of 64");
  refused(1, ForcedDecodeGrid{1, 8, false, 16}, 128, false, "parts of 8 chunks over 8 warps");
  refused(1, ForcedDecodeGrid{1, 8, false, 1}, 9, true, "9 chunks, the last partial, over 8 warps: the last gets none");
  refused(16, ForcedDecodeGrid{4, 1, false, 8}, 128, false, "160 groups x 8 parts of 4 KB slots: more than the workspace");
}

// W4A4 at M = 1, the decode kernel quantizing the row itself or a quantizer kernel before it (row_quant_pays),
// on the default grid: the bench layers on either side of the measured crossover of 12288 values per SM (blocks
// x 8 warps x their K range), layers whose K ranges take more than 32 KB of shared memory, small models' layers,
// and the one-tile-only condition. Values per SM worked out by hand: 4096x4096 256·8·512/132 = 7944, 6144x4096
// 11916, 28672x4096 224·8·1024/132 = 13902, 4096x14336 256·8·1792/132 = 27803; 8192x28672 K ranges of 3584
// values, 56 KB; 576x576 18·8·192/132 = 209.
TEST(CudaDecodeGrid, RowQuantWhereItPays) {
  struct Case {
    int64_t n, k;
    bool pays;
  };
  const Case cases[] = {{4096, 4096, true},    {6144, 4096, true},   {28672, 4096, false}, {4096, 14336, false},
                        {10240, 8192, false},  {57344, 8192, false}, {8192, 28672, false}, {576, 576, true},
                        {1536, 576, true},     {576, 1536, true},    {2048, 2048, true},   {16, 32768, false}};
  for (const Case& c : cases) {
    const int64_t kc = ceil_div(c.k, 64);
    const DecodeGrid g = decode_grid(1, c.n / 16, kc, 132, 7, detail::Mode::Exact, c.k % 64 != 0);
    EXPECT_EQ(row_quant_pays(g, kc, 132), c.pays) << c.n << "x" << c.k;
  }
  // 16 tokens (two token tiles) never: the kernel quantizes one row.
  const DecodeGrid g16 = decode_grid(16, 256, 64, 132, 7);
  EXPECT_FALSE(row_quant_pays(g16, 64, 132));
  // The limit is per SM: 4096x4096's grid of 256 one-tile blocks on a quarter of the SMs would quantize 4x the
  // values per SM (that device's own grid takes 4 tiles per warp and 64 blocks, and pays again).
  const DecodeGrid g4096 = decode_grid(1, 256, 64, 132, 7);
  EXPECT_TRUE(row_quant_pays(g4096, 64, 132));
  EXPECT_FALSE(row_quant_pays(g4096, 64, 33));
  EXPECT_TRUE(row_quant_pays(decode_grid(1, 256, 64, 33, 7), 64, 33));
}

}  // namespace
}  // namespace nvfp4::cuda
