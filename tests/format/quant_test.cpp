// Quantization recipes (SPEC §3, §4): properties that hold for any input. Bit-exactness against
// compressed-tensors and vLLM is pinned by the golden-file tests (tests/golden/golden_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "common/error.h"
#include "format/numerics.h"
#include "format/quant.h"

namespace nvfp4 {
namespace {

std::vector<float> random_matrix(int64_t n, int64_t k, DType t, float std, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, std);
  std::vector<float> w(static_cast<size_t>(n * k));
  for (auto& v : w) v = round_to(t, d(rng));
  return w;
}

TEST(CtGlobalScale, RoundsInTheModelDtypeAndFallsBackToOne) {
  EXPECT_EQ(ct_global_enc(6.0f, DType::BF16), 448.0f);
  // 2688 / 0.1 = 26880: bf16 keeps 8 bits (26880 = 0x6900 -> exact 26880), fp16 also exact; 2688/0.3 is not.
  const float q = 2688.0f / 0.3f;
  EXPECT_EQ(ct_global_enc(0.3f, DType::BF16), bf16_to_f32(f32_to_bf16(q)));
  EXPECT_EQ(ct_global_enc(0.3f, DType::F16), f16_to_f32(f32_to_f16(q)));
  EXPECT_EQ(ct_global_enc(0.3f, DType::F32), q);
  EXPECT_EQ(ct_global_enc(0.0f, DType::BF16), 1.0f);       // amax == 0
  EXPECT_EQ(ct_global_enc(0.03f, DType::F16), 1.0f);       // 89600 overflows fp16
  EXPECT_NE(ct_global_enc(0.05f, DType::F16), 1.0f);       // 53760 does not
}

TEST(CtQuantize, RejectsKNotMultipleOf16) {
  std::vector<float> w(8 * 24, 0.5f);
  EXPECT_THROW(ct_quantize(w.data(), 8, 24, DType::BF16, 1.0f), Error);
  EXPECT_THROW(modelopt_quantize(w.data(), 8, 24), Error);
}

// Dequantized weights are within half a grid step of the input: |w - deq| <= t·max_step/2 per group, where
// t = S/gs and the grid step of E2M1 near |y| is at most 2 (between 4 and 6); relative to the group's amax this
// is at most amax_g·(1/6)·... — we check the precise per-element bound: |y - e2m1(y)| <= step(y)/2.
void check_dequant_bound(const std::vector<float>& w, const Nvfp4Matrix& q) {
  std::vector<float> deq(w.size());
  dequantize(q, deq.data());
  const int64_t groups = q.cols / kGroupSize;
  double ref_norm = 0;
  for (int64_t r = 0; r < q.rows; ++r)
    for (int64_t c = 0; c < q.cols; ++c) {
      const float s = e4m3_decode(q.scales[r * groups + c / kGroupSize]);
      const double t = static_cast<double>(s) * q.global.dec;  // one grid unit in weight space
      const double y = w[r * q.cols + c] / t;
      const double ay = std::min(std::fabs(y), 6.0);
      const double step = ay <= 2.0 ? 0.5 : (ay <= 4.0 ? 1.0 : 2.0);
      const double clip = std::max(0.0, std::fabs(y) - 6.0);  // saturated values may sit beyond the grid
      // + 2^-20 relative: t·q·dec is computed in f32 (two roundings) in `dequantize`.
      EXPECT_LE(std::fabs(deq[r * q.cols + c] - w[r * q.cols + c]),
                (step / 2 + clip) * t * (1 + 1e-6) + std::fabs(w[r * q.cols + c]) * 1e-6)
          << r << "," << c;
      ref_norm += static_cast<double>(w[r * q.cols + c]) * w[r * q.cols + c];
    }
  EXPECT_GT(ref_norm, 0.0);
}

TEST(CtQuantize, DequantizesWithinHalfAGridStep) {
  for (DType t : {DType::BF16, DType::F16, DType::F32}) {
    const auto w = random_matrix(33, 96, t, 0.05f, 1);
    const float gs = ct_global_enc(abs_max(w.data(), static_cast<int64_t>(w.size())), t);
    const Nvfp4Matrix q = ct_quantize(w.data(), 33, 96, t, gs);
    EXPECT_EQ(q.global.enc, gs);
    EXPECT_EQ(q.global.dec, 1.0f / gs);
    check_dequant_bound(w, q);
  }
}

TEST(ModeloptQuantize, DequantizesWithinHalfAGridStepAndUsesOneForZeroBlocks) {
  auto w = random_matrix(17, 64, DType::BF16, 0.1f, 2);
  for (int c = 16; c < 32; ++c) w[c] = 0.0f;  // a zero block in row 0
  const Nvfp4Matrix q = modelopt_quantize(w.data(), 17, 64);
  EXPECT_EQ(q.scales[1], 0x38);  // 1.0
  EXPECT_EQ(q.global.dec, abs_max(w.data(), static_cast<int64_t>(w.size())) / 2688.0f);
  check_dequant_bound(w, q);
}

TEST(CtQuantize, ZeroTensorGivesScaleOneEighthAndZeroCodes) {
  std::vector<float> w(16 * 32, 0.0f);
  const Nvfp4Matrix q = ct_quantize(w.data(), 16, 32, DType::BF16, ct_global_enc(0.0f, DType::BF16));
  for (uint8_t s : q.scales) ASSERT_EQ(s, 0x20);
  for (uint8_t c : q.codes) ASSERT_EQ(c, 0x00);
}

TEST(ActivationQuantizer, FollowsTheFourStepsOfTheSpec) {
  // One row, one group, hand-computed: gs = 2688/6 = 448, vmax = 6 -> s8 = e4m3(448·(6·f32(1/6))) = 448,
  // os = 1/(448·f32(1/448)), codes = e2m1(x·os).
  float x[16] = {6, -6, 0.25f, 0.75f, 1.25f, -1.75f, 2.5f, 3.5f, 5, -0.1f, 0, 1, 2, 3, 4, 1.5f};
  uint8_t codes[8], scales[1];
  quantize_activations(x, 1, 16, 448.0f, codes, scales);
  EXPECT_EQ(scales[0], 0x7E);
  const uint8_t want[16] = {7, 0xF, 0, 2, 2, 0xC, 4, 6, 6, 0x8, 0, 2, 4, 5, 6, 3};
  for (int i = 0; i < 16; ++i) EXPECT_EQ(get_e2m1(codes, i), want[i]) << i;
  // A zero group: scale 0, output scale 0, every code 0.
  float z[16] = {};
  quantize_activations(z, 1, 16, 448.0f, codes, scales);
  EXPECT_EQ(scales[0], 0);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(codes[i], 0);
}

}  // namespace
}  // namespace nvfp4
