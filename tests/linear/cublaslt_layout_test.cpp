// The operand images of the cuBLASLt FP4 executor (backends/cublaslt/fp4_layout.h), checked without a GPU:
//  - weights padded and swizzled at awkward shapes: every byte is either the source byte at its formula
//    position or a zero pad byte;
//  - a model of the block-scaled GEMM that reads the padded, swizzled images the way cuBLASLt does agrees
//    exactly with the CPU reference of W4A4 native semantics (backends/cpu), so what we hand cuBLASLt means
//    what SPEC §5 says.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "backends/cpu/linear.h"
#include "backends/cublaslt/fp4_layout.h"
#include "format/numerics.h"
#include "format/quant.h"
#include "format/swizzle.h"

namespace nvfp4::cublaslt {
namespace {

// Random (rows, cols) values representable in bf16, heavy-tailed so that block scales vary.
std::vector<float> random_bf16(int64_t rows, int64_t cols, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(-3.0f, 3.0f);
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (auto& x : v) x = round_to(DType::BF16, scale * nd(rng) * std::exp(ud(rng)));
  return v;
}

LinearWeights make_layer(int64_t n, int64_t k, uint32_t seed) {
  const std::vector<float> w = random_bf16(n, k, seed, 0.05f);
  LinearWeights lw;
  lw.name = "test.proj";
  lw.weight = ct_quantize(w.data(), n, k, DType::BF16, ct_global_enc(abs_max(w.data(), w.size()), DType::BF16));
  lw.has_input_scale = true;
  lw.input_global = GlobalScale::from_enc(ct_global_enc(20.0f, DType::BF16));  // calibration amax 20
  return lw;
}

struct Shape {
  int64_t n, k;
};
// N around the 128-row tile, K around the 64-element (4 scale columns) tile, and both tiny.
const Shape kShapes[] = {{1, 16},   {3, 48},   {5, 64},   {127, 80},  {128, 64}, {129, 144},
                         {200, 1040}, {257, 16}, {64, 4096 + 16}, {16, 192}};

TEST(CublasLtLayout, WeightImagePaddedAndSwizzled) {
  for (const Shape s : kShapes) {
    SCOPED_TRACE("N=" + std::to_string(s.n) + " K=" + std::to_string(s.k));
    const LinearWeights lw = make_layer(s.n, s.k, static_cast<uint32_t>(s.n * 7919 + s.k));
    const Fp4Operand o = make_weight_operand(lw.weight);
    const int64_t rp = round_up(s.n, 128), kp = round_up(s.k, 64), groups = s.k / 16;
    ASSERT_EQ(o.rows_pad, rp);
    ASSERT_EQ(o.cols_pad, kp);
    ASSERT_EQ(static_cast<int64_t>(o.codes.size()), rp * kp / 2);
    ASSERT_EQ(static_cast<int64_t>(o.scales.size()), rp * kp / 16);
    ASSERT_EQ(kp % 64, 0);
    ASSERT_EQ((kp / 2) % 32, 0);  // every code row starts 32-byte aligned
    // Codes: source bytes in place, zeros elsewhere.
    for (int64_t r = 0; r < rp; ++r)
      for (int64_t b = 0; b < kp / 2; ++b) {
        const uint8_t got = o.codes[r * (kp / 2) + b];
        const uint8_t want = (r < s.n && b < s.k / 2) ? lw.weight.codes[r * (s.k / 2) + b] : 0;
        ASSERT_EQ(got, want) << "code byte (" << r << ", " << b << ")";
      }
    // Scales: every source entry at its formula position; every other byte zero.
    std::set<int64_t> used;
    for (int64_t r = 0; r < s.n; ++r)
      for (int64_t c = 0; c < groups; ++c) {
        const int64_t off = swizzled_offset(r, c, kp / 16);
        ASSERT_LT(off, static_cast<int64_t>(o.scales.size()));
        ASSERT_TRUE(used.insert(off).second) << "two entries at one offset";
        ASSERT_EQ(o.scales[off], lw.weight.scales[r * groups + c]);
      }
    for (int64_t off = 0; off < static_cast<int64_t>(o.scales.size()); ++off)
      if (!used.count(off)) {
        ASSERT_EQ(o.scales[off], 0) << "padding scale byte " << off;
      }
    // Round trip.
    const Nvfp4Matrix back = read_operand(o);
    EXPECT_EQ(back.codes, lw.weight.codes);
    EXPECT_EQ(back.scales, lw.weight.scales);
  }
}

TEST(CublasLtLayout, SwizzleFormulaMatchesTheTileDescription) {
  // Independent restatement of the 128x4 tile: within a 512-byte tile, row r's 4 scales sit at
  // 16·(r mod 32) + 4·(r div 32); tiles run along K first (Cp/4 per 128-row band).
  const int64_t rows = 300, cols = 9, cp = round_up(cols, 4);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t band = r / 128, tile = c / 4, rr = r % 128;
      const int64_t want = (band * (cp / 4) + tile) * 512 + 16 * (rr % 32) + 4 * (rr / 32) + (c % 4);
      ASSERT_EQ(swizzled_offset(r, c, cp), want);
    }
}

// Quantizes activations the way the CUDA quantizer does (SPEC §4, CPU implementation), as an FP4 operand.
Fp4Operand activation_operand(const std::vector<float>& x, int64_t m, int64_t k, float gs_enc) {
  std::vector<uint8_t> codes(static_cast<size_t>(m * k / 2)), scales(static_cast<size_t>(m * k / 16));
  quantize_activations(x.data(), m, k, gs_enc, codes.data(), scales.data());
  return make_operand(codes.data(), scales.data(), m, k);
}

TEST(CublasLtLayout, ModelOfTheGemmAgreesWithNativeSemantics) {
  for (const Shape s : kShapes) {
    for (int64_t m : {1, 7, 130}) {
      if (s.k > 2048 && m > 7) continue;  // keep the f64 loops short
      SCOPED_TRACE("N=" + std::to_string(s.n) + " K=" + std::to_string(s.k) + " m=" + std::to_string(m));
      const LinearWeights lw = make_layer(s.n, s.k, static_cast<uint32_t>(s.n + 31 * s.k));
      const std::vector<float> x = random_bf16(m, s.k, static_cast<uint32_t>(m * 131 + s.k));
      std::vector<uint16_t> xb(x.size());
      for (size_t i = 0; i < x.size(); ++i) xb[i] = to_bits16(DType::BF16, x[i]);

      std::vector<double> ref(static_cast<size_t>(m * s.n));
      cpu_linear_reference_f64(lw, Semantics::W4A4, DType::BF16, xb.data(), m, ref.data());
      double norm = 0;
      for (double v : ref) norm += v * v;
      ASSERT_GT(norm, 0.0) << "trivial reference";

      const Fp4Operand wo = make_weight_operand(lw.weight);
      const Fp4Operand xo = activation_operand(x, m, s.k, lw.input_global.enc);
      std::vector<double> acc(static_cast<size_t>(m * s.n));
      model_block_scaled_gemm(wo, xo, acc.data());
      const double alpha = native_alpha(lw);
      for (size_t i = 0; i < acc.size(); ++i)
        ASSERT_EQ(acc[i] * alpha, ref[i]) << "element " << i;  // same exact products, same order: bit-equal
    }
  }
}

TEST(CublasLtLayout, ModelNoticesNonZeroPadding) {
  // The check above can fail: a non-zero scale in the K padding of the activation image (with a non-zero
  // code under it) changes the product.
  const int64_t n = 8, k = 48, m = 2;  // Kp = 64: one padded group per row
  const LinearWeights lw = make_layer(n, k, 5);
  std::vector<float> x = random_bf16(m, k, 6);
  Fp4Operand xo = activation_operand(x, m, k, lw.input_global.enc);
  Fp4Operand wo = make_weight_operand(lw.weight);
  std::vector<double> clean(static_cast<size_t>(m * n)), dirty(clean.size());
  model_block_scaled_gemm(wo, xo, clean.data());
  xo.scales[swizzled_offset(0, 3, 4)] = 0x38;  // 1.0 in the padded group of row 0
  wo.scales[swizzled_offset(0, 3, 4)] = 0x38;
  xo.codes[0 * 32 + 24] = 0x22;  // 1.0, 1.0 in padded columns 48, 49
  wo.codes[0 * 32 + 24] = 0x22;
  model_block_scaled_gemm(wo, xo, dirty.data());
  EXPECT_NE(clean[0], dirty[0]);
}

TEST(CublasLtLayout, RejectsBadShapes) {
  std::vector<uint8_t> codes(64), scales(8);
  EXPECT_THROW(make_operand(codes.data(), scales.data(), 4, 24), Error);
  EXPECT_THROW(make_operand(codes.data(), scales.data(), 0, 16), Error);
}

}  // namespace
}  // namespace nvfp4::cublaslt
