// The CPU executor in all three semantics (SPEC §5) against the f64 reference, with the error bound derived
// in docs/TESTING.md ("CPU linear"), bias present and absent, bf16 and fp16, NaN-poisoned outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backends/cpu/linear.h"
#include "common/error.h"
#include "format/numerics.h"
#include "format/quant.h"

namespace nvfp4 {
namespace {

constexpr double kU = 1.0 / (1 << 24);  // f32 unit roundoff

// Spacing of T's values at magnitude a (T = BF16: 8 significant bits, F16: 11; F16 subnormals: 2^-24).
double ulp(DType t, double a) {
  const int p = t == DType::F16 ? 11 : 8;
  const double min_normal = t == DType::F16 ? std::ldexp(1.0, -14) : std::ldexp(1.0, -126);
  if (a < min_normal) return std::ldexp(1.0, t == DType::F16 ? -24 : -133);
  return std::ldexp(1.0, std::ilogb(a) - p + 1);
}

double gamma(int64_t n) { return n * kU / (1 - n * kU); }

struct Case {
  LinearWeights w;
  std::vector<uint16_t> x;
  int64_t m;
};

Case make_case(int64_t m, int64_t n, int64_t k, DType act, bool bias, uint32_t seed, bool cancel = false) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  Case c;
  c.m = m;
  std::vector<float> w(static_cast<size_t>(n * k));
  for (auto& v : w) v = round_to(act, 0.05f * d(rng));
  c.w.name = "test.linear";
  c.w.weight = ct_quantize(w.data(), n, k, act, ct_global_enc(abs_max(w.data(), n * k), act));
  std::vector<float> xf(static_cast<size_t>(m * k));
  for (int64_t i = 0; i < m * k; ++i) {
    xf[i] = round_to(act, 3.0f * d(rng));
    if (cancel && (i % 2 == 1)) xf[i] = -xf[i - 1] * (1.0f + 0.01f * d(rng));  // near-cancelling pairs
    xf[i] = round_to(act, xf[i]);
  }
  c.w.has_input_scale = true;
  c.w.input_global = GlobalScale::from_enc(ct_global_enc(abs_max(xf.data(), m * k), act));
  if (bias) {
    c.w.bias.resize(static_cast<size_t>(n));
    for (auto& b : c.w.bias) b = round_to(act, 0.5f * d(rng));
  }
  c.x.resize(xf.size());
  for (size_t i = 0; i < xf.size(); ++i) c.x[i] = to_bits16(act, xf[i]);
  return c;
}

// Σ|x_k·w_k| and the factor applied after the sum, per output, for the bound.
void abs_sums(const Case& c, Semantics s, DType act, std::vector<double>* sum_abs) {
  // Reuse the reference on |x| and |w|: build a copy with absolute values.
  Case a = c;
  for (auto& v : a.x) v = to_bits16(act, std::fabs(from_bits16(act, v)));
  for (auto& b : a.w.weight.codes) b = static_cast<uint8_t>(b & 0x77);  // clear both sign bits
  sum_abs->resize(static_cast<size_t>(c.m * c.w.weight.rows));
  cpu_linear_reference_f64(a.w, s, act, a.x.data(), c.m, sum_abs->data());
}

// |y - (ref + bias)| <= |post|·γ(k/8 + 4)·Σ|p| + ½ulp(T(v)) + ½ulp(y)  (docs/TESTING.md, "CPU linear").
double bound(DType act, double ref, double sum_abs, int64_t k, double y, bool bias) {
  const double e_acc = gamma(k / 8 + 4) * sum_abs + kU * std::fabs(ref);
  double b = e_acc + 0.5 * ulp(act, std::fabs(ref) + e_acc);
  if (bias) b += 0.5 * ulp(act, std::fabs(y) + b);
  return b;
}

void check(const Case& c, Semantics s, DType act) {
  const int64_t n = c.w.weight.rows, k = c.w.weight.cols;
  std::vector<double> ref(static_cast<size_t>(c.m * n)), sabs;
  cpu_linear_reference_f64(c.w, s, act, c.x.data(), c.m, ref.data());
  abs_sums(c, s, act, &sabs);
  double norm = 0;
  for (double r : ref) norm += r * r;
  ASSERT_GT(norm, 0.0) << "reference is trivial";
  const uint16_t nan_bits = act == DType::F16 ? 0x7E00 : 0x7FC0;
  std::vector<uint16_t> y(static_cast<size_t>(c.m * n), nan_bits);  // poisoned
  CpuLinear lin(c.w, s, act);
  lin.run(c.x.data(), c.m, y.data());
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const double yv = from_bits16(act, y[i * n + j]);
      ASSERT_TRUE(std::isfinite(yv)) << "output (" << i << "," << j << ") not written";
      const double want = ref[i * n + j] + (c.w.bias.empty() ? 0.0 : c.w.bias[j]);
      ASSERT_LE(std::fabs(yv - want), bound(act, ref[i * n + j], sabs[i * n + j], k, yv, !c.w.bias.empty()))
          << semantics_name(s) << " " << dtype_name(act) << " at (" << i << "," << j << ") y=" << yv
          << " ref=" << want;
    }
}

TEST(CpuLinear, AllSemanticsWithinDerivedBound) {
  uint32_t seed = 1;
  for (DType act : {DType::BF16, DType::F16})
    for (Semantics s : {Semantics::W4A16, Semantics::W4A4, Semantics::W4A4_VLLM})
      for (bool bias : {false, true})
        for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 16}, {3, 5, 48}, {17, 33, 256},
                               {2, 64, 1024}})
          check(make_case(m, n, k, act, bias, seed++), s, act);
}

TEST(CpuLinear, BiasIsAddedAfterRoundingTheProduct) {
  // y = T(T(acc) + bias): with bias, every output equals linear_output of the unbiased output plus the bias.
  Case c = make_case(4, 16, 64, DType::BF16, true, 99);
  Case nb = c;
  nb.w.bias.clear();
  for (Semantics s : {Semantics::W4A16, Semantics::W4A4, Semantics::W4A4_VLLM}) {
    std::vector<uint16_t> y(64), y0(64);
    CpuLinear(c.w, s, DType::BF16).run(c.x.data(), 4, y.data());
    CpuLinear(nb.w, s, DType::BF16).run(nb.x.data(), 4, y0.data());
    int differs = 0;
    for (int i = 0; i < 64; ++i) {
      const float want = round_to(DType::BF16, bf16_to_f32(y0[i]) + c.w.bias[i % 16]);
      ASSERT_EQ(bf16_to_f32(y[i]), want) << semantics_name(s) << " " << i;
      differs += y[i] != y0[i];
    }
    EXPECT_GT(differs, 32) << "bias had no effect";
  }
}

TEST(CpuLinear, VllmFlavourProvablyDiffersFromNative) {
  // Where the two references are further apart than the sum of both error bounds, no executor within bounds
  // can return the same value for both: the flavours are different functions, not rounding noise.
  int provable = 0;
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    Case c = make_case(4, 32, 2048, DType::BF16, false, 1000 + seed, /*cancel=*/true);
    std::vector<double> rn(128), rv(128), an, av;
    cpu_linear_reference_f64(c.w, Semantics::W4A4, DType::BF16, c.x.data(), 4, rn.data());
    cpu_linear_reference_f64(c.w, Semantics::W4A4_VLLM, DType::BF16, c.x.data(), 4, rv.data());
    abs_sums(c, Semantics::W4A4, DType::BF16, &an);
    abs_sums(c, Semantics::W4A4_VLLM, DType::BF16, &av);
    std::vector<uint16_t> yn(128), yv(128);
    CpuLinear(c.w, Semantics::W4A4, DType::BF16).run(c.x.data(), 4, yn.data());
    CpuLinear(c.w, Semantics::W4A4_VLLM, DType::BF16).run(c.x.data(), 4, yv.data());
    for (int i = 0; i < 128; ++i) {
      const double bn = bound(DType::BF16, rn[i], an[i], 2048, bf16_to_f32(yn[i]), false);
      const double bv = bound(DType::BF16, rv[i], av[i], 2048, bf16_to_f32(yv[i]), false);
      if (std::fabs(rn[i] - rv[i]) > bn + bv) {
        ++provable;
        EXPECT_NE(yn[i], yv[i]);
      }
    }
  }
  EXPECT_GT(provable, 0) << "no output where the flavours provably differ";
}

TEST(CpuLinear, RejectsBadLayers) {
  Case c = make_case(1, 4, 32, DType::BF16, false, 5);
  LinearWeights w16 = c.w;
  w16.has_input_scale = false;
  EXPECT_THROW(CpuLinear(w16, Semantics::W4A4, DType::BF16), Error);
  EXPECT_NO_THROW(CpuLinear(w16, Semantics::W4A16, DType::BF16));
  EXPECT_THROW(CpuLinear(c.w, Semantics::W4A16, DType::F32), Error);
  LinearWeights bad = c.w;
  bad.bias.assign(3, 0.0f);
  EXPECT_THROW(CpuLinear(bad, Semantics::W4A16, DType::BF16), Error);
}

}  // namespace
}  // namespace nvfp4
