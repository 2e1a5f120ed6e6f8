// The vLLM flavour's power-of-two form (vllm_weights.h), on the host: which layers take it, and that where a
// layer takes it the kernels' operations give w_dq = T(e2m1 · f32(S·D_w)) times 2^σ for every block scale and
// every code (both signs). The operations are re-done here from the T bit patterns (the top mantissa bit
// cleared with dequant_bits.h's masks) with a rounding to T after each one, not with the plan's algebra.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backends/cuda/dequant_bits.h"
#include "backends/cuda/vllm_weights.h"
#include "format/numerics.h"
#include "format/quant.h"

namespace nvfp4::cuda {
namespace {

std::vector<uint8_t> finite_scales() {
  std::vector<uint8_t> v;
  for (int b = 0; b < 256; ++b)
    if ((b & 0x7F) != 0x7F) v.push_back(static_cast<uint8_t>(b));
  return v;
}

// One T operation: the exact result (a double, exact for these few-bit operands) rounded to T once.
double t_op(DType t, double exact) {
  const float f = static_cast<float>(exact);
  EXPECT_EQ(static_cast<double>(f), exact) << "operation result not exact in f32 before the T rounding";
  return round_to(t, f);
}

// The kernels' value for (scale byte, code), or NaN where a step is not exact in T.
double kernel_value(DType t, const VllmPow2Plan& plan, float d_w, uint8_t scale, uint8_t code) {
  const float fa = e4m3_decode(scale) * std::ldexp(d_w, plan.shift);
  const double a = round_to(t, fa), b2 = round_to(t, fa * 3.0f);
  const double y = t_op(t, b2 - 2.0 * a), c = t_op(t, 3.0 * a - b2);
  const double v = e2m1_decode(code);
  const uint16_t mant = t == DType::BF16 ? kBf16TopMantissa & 0xFFFF : kF16TopMantissa & 0xFFFF;
  const double e = from_bits16(t, static_cast<uint16_t>(to_bits16(t, static_cast<float>(v)) & ~mant));
  const double z = t_op(t, e * c);
  return t_op(t, v * y + z);
}

// Every (scale, code) of a layer that took the plan: the kernels' value is w_dq · 2^σ, and the plan's factors are
// the powers of two they claim to be.
void expect_kernel_values(DType t, const VllmPow2Plan& plan, float d_w, const std::vector<uint8_t>& scales,
                          const std::string& what) {
  EXPECT_EQ(plan.unscale, std::ldexp(1.0f, -plan.shift)) << what;
  EXPECT_EQ(plan.w_dec, std::ldexp(d_w, plan.shift - kE4m3FieldExp)) << what;
  EXPECT_TRUE(std::isnormal(plan.w_dec)) << what;
  int bad = 0;
  for (uint8_t s : scales)
    for (uint8_t code = 0; code < 16; ++code) {
      const double want = round_to(t, e2m1_decode(code) * (e4m3_decode(s) * d_w));
      const double got = kernel_value(t, plan, d_w, s, code);
      if (!(got == std::ldexp(want, plan.shift)) && bad++ < 3)
        ADD_FAILURE() << dtype_name(t) << " " << what << " scale " << int(s) << " code " << int(code) << ": " << got
                      << " vs " << std::ldexp(want, plan.shift);
    }
  EXPECT_EQ(bad, 0) << dtype_name(t) << " " << what;
}

TEST(VllmPow2Plan, KernelOperationsGiveTheReferenceWhereTaken) {
  const std::vector<uint8_t> scales = finite_scales();
  int taken = 0;
  for (DType t : {DType::BF16, DType::F16}) {
    for (float amax : {0.01f, 0.37f, 3.0f, 60.0f, 2688.0f}) {  // 2688: global scale 1
      const float d_w = GlobalScale::from_enc(ct_global_enc(amax, t)).dec;
      const VllmPow2Plan plan = vllm_pow2_plan(t, d_w, scales.data(), scales.size());
      if (t == DType::BF16) {
        EXPECT_TRUE(plan.ok) << "bf16, amax " << amax << ": " << plan.why;
      }
      if (!plan.ok) {
        EXPECT_NE(plan.why.find("block scale"), std::string::npos) << plan.why;
        continue;
      }
      ++taken;
      expect_kernel_values(t, plan, d_w, scales, "amax " + std::to_string(amax));
    }
  }
  EXPECT_GE(taken, 6);  // every bf16 case and at least the fp16 ones with global scale near 1
}

// A layer whose block scales are all small against 1/D_w (here at most 0.94 with D_w = 0.05/2688, a random
// checkpoint's): putting its largest block value at 2^kVllmTopExp would need σ = 25 and make the kernels' f32
// factor D_w·2^(σ+120) overflow. The plan takes a smaller σ instead, and the kernels' values stay exact.
TEST(VllmPow2Plan, TinyBlockValuesTakeASmallerShift) {
  const float d_w = GlobalScale::from_enc(2688.0f / 0.05f).dec;
  std::vector<uint8_t> small;
  for (int b = 0x28; b < 0x38; ++b) small.push_back(static_cast<uint8_t>(b));  // 0.125 .. 0.9375
  const VllmPow2Plan plan = vllm_pow2_plan(DType::BF16, d_w, small.data(), small.size());
  ASSERT_TRUE(plan.ok) << plan.why;
  float a_max = 0.0f;
  for (uint8_t s : small) a_max = std::max(a_max, round_to(DType::BF16, e4m3_decode(s) * d_w));
  EXPECT_LT(plan.shift, kVllmTopExp - std::ilogb(a_max));  // below the usual choice: the cap applied
  expect_kernel_values(DType::BF16, plan, d_w, small, "scales 0x28-0x37");
}

// fp16 with calibrated global scales: the smallest block scales give w_dq in fp16's subnormals, where rounding
// does not commute with powers of two. The plan must refuse such a layer, and take it once those scales are gone.
TEST(VllmPow2Plan, Fp16SubnormalWeightsKeepTheRoundingPerWeight) {
  const float d_w = GlobalScale::from_enc(ct_global_enc(0.37f, DType::F16)).dec;
  const std::vector<uint8_t> all = finite_scales();
  const VllmPow2Plan refused = vllm_pow2_plan(DType::F16, d_w, all.data(), all.size());
  EXPECT_FALSE(refused.ok);
  EXPECT_NE(refused.why.find("block scale 0x"), std::string::npos) << refused.why;
  std::vector<uint8_t> large;
  for (int b = 0x50; b < 0x7F; ++b) large.push_back(static_cast<uint8_t>(b));  // S >= 2
  EXPECT_TRUE(vllm_pow2_plan(DType::F16, d_w, large.data(), large.size()).ok);
  const std::vector<uint8_t> zeros(64, 0);
  EXPECT_TRUE(vllm_pow2_plan(DType::F16, d_w, zeros.data(), zeros.size()).ok);  // all-zero weights
}

}  // namespace
}  // namespace nvfp4::cuda
