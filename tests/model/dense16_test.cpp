// dense_matmul with 16-bit weights (bf16, fp16), which it widens to f32 on use. The widening is exact, so:
//   1. every fp16 and bf16 code, at every lane of the 16-wide loads and in the scalar tail, comes out as
//      format/numerics' from_bits16 value (NaN as NaN), and
//   2. on random data the result is bit-identical to dense_matmul over an F32 weight holding the widened
//      values (the path an f16 model's dense linears took when they were stored as f32), and
//   3. for bf16, f16 and f32 weights the result has the bits of a scalar model of the documented order (16 lanes by
//      K, the pairwise lane sum, the scalar tail), over token counts and row counts that reach every tile of the
//      portable code and of the AVX2 intrinsics;
// each on every instruction-set path this CPU has (common/cpu_isa.h: the portable code, and the AVX2 intrinsics
// where the cap stops at AVX2).
// No tolerance: any difference is a bug.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <random>
#include <vector>

#include "common/error.h"
#include "format/numerics.h"
#include "cpu_isa_paths.h"
#include "model/cpu_ops.h"
#include "model/dot_order.h"

using nvfp4::CpuIsa;
using nvfp4::DType;
using nvfp4::model::DenseWeight;
using nvfp4::model::testing::model_dot;
using nvfp4::testing::for_each_cpu_isa;

namespace {

// acc (m, n) for a 16-bit weight w (n, k) of dtype t, into a buffer poisoned with `poison`.
std::vector<float> run16(const std::vector<uint16_t>& w, DType t, int64_t n, int64_t k, const std::vector<float>& x,
                         int64_t m, float poison) {
  DenseWeight d;
  d.n = n;
  d.k = k;
  d.dtype = t;
  d.bits = w.data();
  std::vector<float> acc(static_cast<size_t>(m * n), poison);
  nvfp4::model::dense_matmul(x.data(), m, d, acc.data());
  return acc;
}

std::vector<float> run32(const std::vector<float>& w, int64_t n, int64_t k, const std::vector<float>& x, int64_t m,
                         float poison) {
  DenseWeight d;
  d.n = n;
  d.k = k;
  d.dtype = DType::F32;
  d.f32 = w.data();
  std::vector<float> acc(static_cast<size_t>(m * n), poison);
  nvfp4::model::dense_matmul(x.data(), m, d, acc.data());
  return acc;
}



// Row c of the weight holds code c at column c % k and +0 elsewhere; x is all ones, so output (i, c) is
// code c widened (+ zeros: -0 may come out as +0, so values are compared, not bits). k = 17 puts codes in
// all 16 lanes of the vector loads and in the scalar tail; m = 5 runs the 4-token block and a single token.
void check_every_code(DType t) {
  const int64_t n = 65536, k = 17, m = 5;
  std::vector<uint16_t> w(static_cast<size_t>(n * k), 0);
  for (int64_t c = 0; c < n; ++c) w[static_cast<size_t>(c * k + c % k)] = static_cast<uint16_t>(c);
  const std::vector<float> x(static_cast<size_t>(m * k), 1.0f);
  const std::vector<float> acc = run16(w, t, n, k, x, m, -12345.0f);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t c = 0; c < n; ++c) {
      const float want = nvfp4::from_bits16(t, static_cast<uint16_t>(c));
      const float got = acc[static_cast<size_t>(i * n + c)];
      if (std::isnan(want))
        ASSERT_TRUE(std::isnan(got)) << nvfp4::dtype_name(t) << " code " << c << " token " << i << " "
                                     << nvfp4::cpu_isa_name(nvfp4::cpu_isa());
      else
        ASSERT_EQ(got, want) << nvfp4::dtype_name(t) << " code " << c << " token " << i << " "
                             << nvfp4::cpu_isa_name(nvfp4::cpu_isa());
    }
  }
}

// Random finite codes of dtype t (all exponents, subnormals and zeros included) against the f32 path.
void check_bit_identical_to_f32(DType t, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int> code(0, 65535);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const int64_t k : {16, 87, 160}) {
    const int64_t n = 67;  // not a multiple of the 32-row parallel grain
    std::vector<uint16_t> w(static_cast<size_t>(n * k));
    std::vector<float> wf(w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      do {
        w[i] = static_cast<uint16_t>(code(g));
        wf[i] = nvfp4::from_bits16(t, w[i]);
        // bf16 spans the f32 range: keep magnitudes where products and sums of K terms stay finite
      } while (!std::isfinite(wf[i]) || std::fabs(wf[i]) > 1e30f);
    }
    for (const int64_t m : {1, 3, 4, 5, 9}) {
      std::vector<float> x(static_cast<size_t>(m * k));
      for (auto& v : x) v = nvfp4::round_to(t, u(g));
      const std::vector<float> a = run16(w, t, n, k, x, m, 12345.0f);
      const std::vector<float> b = run32(wf, n, k, x, m, -12345.0f);
      double norm2 = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(nvfp4::f32_bits(a[i]), nvfp4::f32_bits(b[i]))
            << nvfp4::dtype_name(t) << " k " << k << " m " << m << " out " << i << ": " << a[i] << " vs " << b[i];
        norm2 += static_cast<double>(b[i]) * b[i];
      }
      ASSERT_GT(norm2, 0.0) << "trivial reference";
    }
  }
}

// Random finite weights of dtype t (F32: random f32 values) against model_dot, for every kernel here. n = 67 and
// 70 leave 3 and 2 rows past the last group of 4 (the AVX2 kernel's one-row tiles), n = 32 ends on a full group;
// m = 1-3 take the four-row tiles, 4 and 8 the four-token tiles, 5, 6, 7 and 9 both.
void check_against_model(DType t, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int> code(0, 65535);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const int64_t k : {16, 17, 87, 160, 576}) {
    for (const int64_t n : {32, 67, 70}) {
      std::vector<uint16_t> w16(static_cast<size_t>(n * k));
      std::vector<float> wf(w16.size());
      for (size_t i = 0; i < wf.size(); ++i) {
        if (t == DType::F32) {
          wf[i] = u(g) * std::ldexp(1.0f, static_cast<int>(code(g) % 40) - 20);
          continue;
        }
        do {
          w16[i] = static_cast<uint16_t>(code(g));
          wf[i] = nvfp4::from_bits16(t, w16[i]);
        } while (!std::isfinite(wf[i]) || std::fabs(wf[i]) > 1e30f);
      }
      for (const int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9}) {
        std::vector<float> x(static_cast<size_t>(m * k));
        for (auto& v : x) v = u(g);
        const std::vector<float> a =
            t == DType::F32 ? run32(wf, n, k, x, m, 12345.0f) : run16(w16, t, n, k, x, m, 12345.0f);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t r = 0; r < n; ++r) {
            const float want = model_dot(&x[static_cast<size_t>(i * k)], &wf[static_cast<size_t>(r * k)], k);
            const float got = a[static_cast<size_t>(i * n + r)];
            ASSERT_EQ(nvfp4::f32_bits(got), nvfp4::f32_bits(want))
                << nvfp4::dtype_name(t) << " " << nvfp4::cpu_isa_name(nvfp4::cpu_isa()) << " k " << k << " n " << n
                << " m " << m << " token " << i << " row " << r << ": " << got << " vs " << want;
          }
      }
    }
  }
}

}  // namespace

TEST(Dense16, EveryF16CodeWidensExactly) {
  for_each_cpu_isa([](CpuIsa) { check_every_code(DType::F16); });
}
TEST(Dense16, EveryBf16CodeWidensExactly) {
  for_each_cpu_isa([](CpuIsa) { check_every_code(DType::BF16); });
}
TEST(Dense16, EveryKernelGivesTheDocumentedOrdersBits) {
  for_each_cpu_isa([](CpuIsa) {
    check_against_model(DType::BF16, 7);
    check_against_model(DType::F16, 8);
    check_against_model(DType::F32, 9);
  });
}
TEST(Dense16, F16BitIdenticalToF32Weights) {
  for_each_cpu_isa([](CpuIsa) { check_bit_identical_to_f32(DType::F16, 5); });
}
TEST(Dense16, Bf16BitIdenticalToF32Weights) {
  for_each_cpu_isa([](CpuIsa) { check_bit_identical_to_f32(DType::BF16, 6); });
}
