#include "backends/cuda/vllm_weights.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "backends/cuda/dequant_bits.h"
#include "common/error.h"
#include "format/numerics.h"

namespace nvfp4::cuda {
namespace {

// x is a finite value of T, exactly.
bool exact_in(DType t, double x) {
  if (!std::isfinite(x)) return false;
  const float f = static_cast<float>(x);
  return static_cast<double>(f) == x && static_cast<double>(round_to(t, f)) == x;
}

std::string scale_hex(int s) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02X", s);
  return buf;
}

}  // namespace

VllmPow2Plan vllm_pow2_plan(DType t, float d_w, const uint8_t* scales, size_t n) {
  NVFP4_CHECK(t == DType::BF16 || t == DType::F16, std::string("vllm_pow2_plan: activation type ") + dtype_name(t));
  VllmPow2Plan plan;
  bool seen[256] = {};
  for (size_t i = 0; i < n; ++i) seen[scales[i]] = true;
  double a_max = 0.0;
  for (int s = 0; s < 256; ++s)
    if (seen[s] && !e4m3_is_nan(static_cast<uint8_t>(s)))
      a_max = std::max(a_max, std::fabs(static_cast<double>(round_to(t, e4m3_decode(static_cast<uint8_t>(s)) * d_w))));
  if (!std::isfinite(a_max)) {
    plan.why = "T(f32(S·D_w)) overflows";
    return plan;
  }
  plan.shift = a_max > 0.0 ? kVllmTopExp - std::ilogb(a_max) : 0;
  // The kernels' factor w_dec = D_w·2^(σ - kE4m3FieldExp) must stay a normal f32: where every block value is tiny
  // (a layer whose largest block scale is small against 1/D_w) the σ above would make it overflow. A smaller σ
  // moves every block value down by a power of two; the checks below still decide whether each step is exact.
  plan.shift = std::min(plan.shift, 127 + kE4m3FieldExp - std::ilogb(d_w));
  const float w_dec_shifted = std::ldexp(d_w, plan.shift);  // D_w·2^σ
  plan.w_dec = std::ldexp(d_w, plan.shift - kE4m3FieldExp);  // the kernels' scale enters as S·2^kE4m3FieldExp
  plan.unscale = std::ldexp(1.0f, -plan.shift);
  if (!std::isnormal(w_dec_shifted) || std::ldexp(w_dec_shifted, -plan.shift) != d_w || !std::isnormal(plan.w_dec) ||
      std::ldexp(plan.w_dec, kE4m3FieldExp - plan.shift) != d_w || !std::isnormal(plan.unscale)) {
    plan.why = "D_w·2^" + std::to_string(plan.shift) + " or 2^" + std::to_string(-plan.shift) + " is not a normal f32";
    return plan;
  }
  for (int s = 0; s < 256; ++s) {
    const uint8_t sb = static_cast<uint8_t>(s);
    if (!seen[s] || e4m3_is_nan(sb) || e4m3_decode(sb) == 0.0f) continue;  // zero scales give zeros either way
    const float sv = e4m3_decode(sb);
    const float f = sv * d_w;  // f32(S·D_w), as the reference
    // The kernels' block values, as they compute them: f32 products, T roundings, T fmas that must be exact.
    const float fa = sv * w_dec_shifted;  // = f32(S·2^kE4m3FieldExp · w_dec): one rounding of the same product
    const double a = round_to(t, fa), b2 = round_to(t, fa * 3.0f);
    const double y = b2 - 2.0 * a, c = 3.0 * a - b2;
    bool ok = static_cast<double>(fa) == std::ldexp(static_cast<double>(f), plan.shift) && exact_in(t, y) &&
              exact_in(t, c);
    for (int code = 1; code < 8 && ok; ++code) {  // magnitudes 0.5 .. 6 (code 0 gives 0)
      // v: the code's value; e: v without its top mantissa bit, the power of two at or below v (0.5 for 0.5).
      // g = fma(v, Y, e·C) must be w_dq · 2^σ, each step exact.
      const double v = kE2M1Values[code];
      const double e = (code >> 1) ? std::ldexp(1.0, (code >> 1) - 1) : 0.5;
      const double z = e * c, g = v * y + z;
      const double ref = round_to(t, kE2M1Values[code] * f);  // T(f32(e2m1 · f32(S·D_w)))
      ok = exact_in(t, z) && exact_in(t, g) && g == std::ldexp(ref, plan.shift);
    }
    if (!ok) {
      plan.why = "block scale " + scale_hex(s) + ": w_dq = T(e2m1·" + std::to_string(f) +
                 ") is not a power of two times T(f) or T(1.5f) in range";
      return plan;
    }
  }
  plan.ok = true;
  return plan;
}

}  // namespace nvfp4::cuda
