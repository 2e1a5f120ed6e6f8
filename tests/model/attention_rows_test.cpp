// The CPU attention's row products for several queries at once (dot_rows_multi_f32, axpy_rows_multi_f32: a
// prompt's consecutive tokens of one head share the cache rows they read) against the one-query functions,
// bit for bit: every result must be the same sequence of f32 operations. Head sizes with and without a scalar
// tail (n % 16), at, below and above the register budget of attention_tokens_per_pass, counts that grow by
// one per query (a prompt) or by more, and a first query with no rows; and rows of bf16 / fp16 bit patterns
// (a 16-bit model's KV cache) against f32 rows of the same values; each on every instruction-set path this CPU has
// (common/cpu_isa.h: the portable code, and the AVX2 intrinsics where the cap stops at AVX2), and each path against
// a scalar model of the documented order. No tolerance: any difference is a bug.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "format/numerics.h"
#include "cpu_isa_paths.h"
#include "model/dot_order.h"
#include "model/cpu_ops.h"

namespace nm = nvfp4::model;
using nvfp4::DType;
using nvfp4::CpuIsa;
using nvfp4::testing::for_each_cpu_isa;

namespace {

std::vector<float> rnd(size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(g);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// nq queries of n values with their weight vectors (count[a] each), and two sets of outputs: dot products
// (NaN until written) and weighted-sum accumulators (the same random start in both sets).
struct Queries {
  std::vector<std::vector<float>> q, w, dot[2], acc[2];
  const float* qp[4] = {};
  const float* wp[4] = {};
  float* dotp[2][4] = {};
  float* accp[2][4] = {};
  Queries(int nq, int64_t n, const int64_t* count, unsigned& seed) : q(4), w(4) {
    for (int k = 0; k < 2; ++k) {
      dot[k].resize(4);
      acc[k].resize(4);
    }
    for (int a = 0; a < nq; ++a) {
      q[a] = rnd(static_cast<size_t>(n), seed++);
      w[a] = rnd(static_cast<size_t>(count[a]), seed++);
      acc[0][a] = rnd(static_cast<size_t>(n), seed++);
      acc[1][a] = acc[0][a];
      qp[a] = q[a].data();
      wp[a] = w[a].data();
      for (int k = 0; k < 2; ++k) {
        dot[k][a].assign(static_cast<size_t>(count[a]), NAN);
        dotp[k][a] = dot[k][a].data();
        accp[k][a] = acc[k][a].data();
      }
    }
  }
  // Both sets equal bit for bit, query by query.
  void expect_same(int nq, const std::string& tag) const {
    for (int a = 0; a < nq; ++a) {
      EXPECT_TRUE(same_bits(dot[0][a], dot[1][a])) << tag << " query " << a << ": dot products differ";
      EXPECT_TRUE(same_bits(acc[0][a], acc[1][a])) << tag << " query " << a << ": weighted sums differ";
    }
  }
};

}  // namespace

TEST(AttentionRows, SeveralQueriesEqualOneAtATimeBitForBit) {
  for_each_cpu_isa([](CpuIsa isa) {
  unsigned seed = 1;
  for (int64_t n : {int64_t(16), int64_t(64), int64_t(72), int64_t(80), int64_t(128), int64_t(136), int64_t(200)}) {
    const int64_t ld = n + 8;  // rows further apart than their length, as a cache row's stride may be
    const int tq = nm::attention_tokens_per_pass(n);
    EXPECT_GE(tq, 1);
    EXPECT_LE(tq, 4);
    for (int nq = 1; nq <= 4; ++nq) {
      for (int64_t step : {int64_t(1), int64_t(5)}) {
        for (int64_t first : {int64_t(0), int64_t(37)}) {
          const std::string tag = std::string(nvfp4::cpu_isa_name(isa)) + " n " + std::to_string(n) + " nq " +
                                  std::to_string(nq) + " step " +
                                  std::to_string(step) + " first " + std::to_string(first);
          int64_t count[4];
          for (int a = 0; a < nq; ++a) count[a] = first + a * step;
          const int64_t rows_n = count[nq - 1];
          const auto rows = rnd(static_cast<size_t>((rows_n + 1) * ld), seed++);
          Queries qs(nq, n, count, seed);
          for (int a = 0; a < nq; ++a) {  // set 1: one query at a time
            nm::dot_rows_f32(qs.qp[a], rows.data(), ld, count[a], n, qs.dotp[1][a]);
            nm::axpy_rows_f32(qs.wp[a], rows.data(), ld, count[a], qs.accp[1][a], n);
          }
          nm::dot_rows_multi(qs.qp, nq, rows.data(), ld, count, n, qs.dotp[0]);
          nm::axpy_rows_multi(qs.wp, nq, rows.data(), ld, count, qs.accp[0], n);
          qs.expect_same(nq, tag);
        }
      }
    }
  }
  });
}

// A 16-bit model's cache holds T bit patterns: the row products over them must equal those over f32 rows
// holding the same values, bit for bit (the widening is exact), for bf16 and fp16, one to four queries.
TEST(AttentionRows, SixteenBitRowsEqualF32RowsOfTheSameValues) {
  for_each_cpu_isa([](CpuIsa isa) {
  unsigned seed = 100;
  for (DType t : {DType::BF16, DType::F16}) {
    for (int64_t n : {int64_t(64), int64_t(72), int64_t(128)}) {
      for (int nq = 1; nq <= 4; ++nq) {
        const std::string tag = std::string(nvfp4::cpu_isa_name(isa)) + (t == DType::BF16 ? " bf16" : " f16") + " n " +
                                std::to_string(n) +
                                " nq " + std::to_string(nq);
        const int64_t ld = n;
        int64_t count[4];
        for (int a = 0; a < nq; ++a) count[a] = 29 + a;
        const auto raw = rnd(static_cast<size_t>(count[nq - 1] * ld), seed++);
        std::vector<uint16_t> bits(raw.size());
        std::vector<float> vals(raw.size());
        for (size_t i = 0; i < raw.size(); ++i) {
          bits[i] = nvfp4::to_bits16(t, raw[i]);
          vals[i] = nvfp4::from_bits16(t, bits[i]);
        }
        Queries qs(nq, n, count, seed);
        nm::dot_rows_multi(qs.qp, nq, bits.data(), t, ld, count, n, qs.dotp[0]);
        nm::dot_rows_multi(qs.qp, nq, vals.data(), ld, count, n, qs.dotp[1]);
        nm::axpy_rows_multi(qs.wp, nq, bits.data(), t, ld, count, qs.accp[0], n);
        nm::axpy_rows_multi(qs.wp, nq, vals.data(), ld, count, qs.accp[1], n);
        qs.expect_same(nq, tag);
      }
    }
  }
  });
  const std::vector<uint16_t> rows(64, 0);
  const std::vector<float> q(64, 1.0f);
  std::vector<float> o(1);
  const float* qp[1] = {q.data()};
  float* op[1] = {o.data()};
  const int64_t one[1] = {1};
  EXPECT_THROW(nm::dot_rows_multi(qp, 1, rows.data(), DType::F32, 64, one, 64, op), std::exception);
}

// Every instruction-set path against the scalar model: dot products in the documented order, weighted sums element by element in
// row order; f32, bf16 and fp16 rows; 1-4 queries sharing rows; head sizes with and without a tail, and below one
// vector of 16.
TEST(AttentionRows, EveryKernelGivesTheScalarModelsBits) {
  for_each_cpu_isa([](CpuIsa isa) {
  unsigned seed = 300;
    for (DType t : {DType::F32, DType::BF16, DType::F16})
      for (int64_t n : {int64_t(8), int64_t(64), int64_t(100), int64_t(128), int64_t(200)})
        for (int nq = 1; nq <= 4; ++nq) {
          const std::string tag = std::string(nvfp4::cpu_isa_name(isa)) + " " + nvfp4::dtype_name(t) + " n " +
                                  std::to_string(n) + " nq " + std::to_string(nq);
          const int64_t ld = n + 3;
          int64_t count[4];
          for (int a = 0; a < nq; ++a) count[a] = 13 + 2 * a;
          const auto raw = rnd(static_cast<size_t>(count[nq - 1] * ld), seed++);
          std::vector<uint16_t> bits(raw.size());
          std::vector<float> vals(raw);
          if (t != DType::F32)
            for (size_t i = 0; i < raw.size(); ++i) {
              bits[i] = nvfp4::to_bits16(t, raw[i]);
              vals[i] = nvfp4::from_bits16(t, bits[i]);
            }
          Queries qs(nq, n, count, seed);
          if (t == DType::F32) {
            nm::dot_rows_multi(qs.qp, nq, vals.data(), ld, count, n, qs.dotp[0]);
            nm::axpy_rows_multi(qs.wp, nq, vals.data(), ld, count, qs.accp[0], n);
          } else {
            nm::dot_rows_multi(qs.qp, nq, bits.data(), t, ld, count, n, qs.dotp[0]);
            nm::axpy_rows_multi(qs.wp, nq, bits.data(), t, ld, count, qs.accp[0], n);
          }
          for (int a = 0; a < nq; ++a) {
            for (int64_t r = 0; r < count[a]; ++r) {
              const float want = nvfp4::model::testing::model_dot(qs.qp[a], &vals[static_cast<size_t>(r * ld)], n);
              ASSERT_EQ(nvfp4::f32_bits(qs.dot[0][a][static_cast<size_t>(r)]), nvfp4::f32_bits(want))
                  << tag << " query " << a << " row " << r;
            }
            std::vector<float> y = qs.acc[1][a];  // the same start as acc[0]
            for (int64_t j = 0; j < n; ++j)
              for (int64_t r = 0; r < count[a]; ++r)
                y[static_cast<size_t>(j)] = y[static_cast<size_t>(j)] + qs.w[a][static_cast<size_t>(r)] *
                                                                            vals[static_cast<size_t>(r * ld + j)];
            ASSERT_TRUE(same_bits(y, qs.acc[0][a])) << tag << " query " << a << ": weighted sums";
          }
        }
  });
}

TEST(AttentionRows, RefusesBadArguments) {
  const std::vector<float> rows(64 * 4, 1.0f), q(64, 1.0f);
  std::vector<float> o0(4), o1(4);
  const float* qp[2] = {q.data(), q.data()};
  float* op[2] = {o0.data(), o1.data()};
  const int64_t down[2] = {4, 3};
  EXPECT_THROW(nm::dot_rows_multi(qp, 2, rows.data(), 64, down, 64, op), std::exception);
  EXPECT_THROW(nm::dot_rows_multi(qp, 5, rows.data(), 64, down, 64, op), std::exception);
  EXPECT_THROW(nm::axpy_rows_multi(qp, 2, rows.data(), 64, down, op, 64), std::exception);
}
