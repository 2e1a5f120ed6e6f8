// The CPU attention's row products for several queries at once (dot_rows_multi_f32, axpy_rows_multi_f32: a
// prompt's consecutive tokens of one head share the cache rows they read) against the one-query functions,
// bit for bit: every result must be the same sequence of f32 operations. Head sizes with and without a scalar
// tail (n % 16), at, below and above the register budget of attention_tokens_per_pass, counts that grow by
// one per query (a prompt) or by more, and a first query with no rows; and rows of bf16 / fp16 bit patterns
// (a 16-bit model's KV cache) against f32 rows of the same values. No tolerance: any difference is a bug.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "format/numerics.h"
#include "model/cpu_ops.h"

namespace nm = nvfp4::model;
using nvfp4::DType;

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

}  // namespace

TEST(AttentionRows, SeveralQueriesEqualOneAtATimeBitForBit) {
  unsigned seed = 1;
  for (int64_t n : {int64_t(16), int64_t(64), int64_t(72), int64_t(80), int64_t(128), int64_t(136), int64_t(200)}) {
    const int64_t ld = n + 8;  // rows further apart than their length, as a cache row's stride may be
    const int tq = nm::attention_tokens_per_pass(n);
    EXPECT_GE(tq, 1);
    EXPECT_LE(tq, 4);
    for (int nq = 1; nq <= 4; ++nq) {
      for (int64_t step : {int64_t(1), int64_t(5)}) {
        for (int64_t first : {int64_t(0), int64_t(37)}) {
          const std::string tag = "n " + std::to_string(n) + " nq " + std::to_string(nq) + " step " +
                                  std::to_string(step) + " first " + std::to_string(first);
          int64_t count[4];
          for (int a = 0; a < nq; ++a) count[a] = first + a * step;
          const int64_t rows_n = count[nq - 1];
          const auto rows = rnd(static_cast<size_t>((rows_n + 1) * ld), seed++);
          std::vector<std::vector<float>> q(4), w(4), out(4), ref(4), y(4), yref(4);
          const float* qp[4];
          const float* wp[4];
          float* op[4];
          float* yp[4];
          for (int a = 0; a < nq; ++a) {
            q[a] = rnd(static_cast<size_t>(n), seed++);
            w[a] = rnd(static_cast<size_t>(count[a]), seed++);
            out[a].assign(static_cast<size_t>(count[a]), NAN);
            ref[a].assign(static_cast<size_t>(count[a]), NAN);
            y[a] = rnd(static_cast<size_t>(n), seed++);
            yref[a] = y[a];
            qp[a] = q[a].data();
            wp[a] = w[a].data();
            op[a] = out[a].data();
            yp[a] = y[a].data();
            nm::dot_rows_f32(q[a].data(), rows.data(), ld, count[a], n, ref[a].data());
            nm::axpy_rows_f32(w[a].data(), rows.data(), ld, count[a], yref[a].data(), n);
          }
          nm::dot_rows_multi(qp, nq, rows.data(), ld, count, n, op);
          nm::axpy_rows_multi(wp, nq, rows.data(), ld, count, yp, n);
          for (int a = 0; a < nq; ++a) {
            EXPECT_TRUE(same_bits(out[a], ref[a])) << tag << " query " << a << ": dot products differ";
            EXPECT_TRUE(same_bits(y[a], yref[a])) << tag << " query " << a << ": weighted sums differ";
          }
        }
      }
    }
  }
}

// A 16-bit model's cache holds T bit patterns: the row products over them must equal those over f32 rows
// holding the same values, bit for bit (the widening is exact), for bf16 and fp16, one to four queries.
TEST(AttentionRows, SixteenBitRowsEqualF32RowsOfTheSameValues) {
  unsigned seed = 100;
  for (DType t : {DType::BF16, DType::F16}) {
    for (int64_t n : {int64_t(64), int64_t(72), int64_t(128)}) {
      for (int nq = 1; nq <= 4; ++nq) {
        const std::string tag = std::string(t == DType::BF16 ? "bf16" : "f16") + " n " + std::to_string(n) +
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
        std::vector<std::vector<float>> q(4), w(4), o16(4), o32(4), y16(4), y32(4);
        const float* qp[4];
        const float* wp[4];
        float *p16[4], *p32[4], *py16[4], *py32[4];
        for (int a = 0; a < nq; ++a) {
          q[a] = rnd(static_cast<size_t>(n), seed++);
          w[a] = rnd(static_cast<size_t>(count[a]), seed++);
          o16[a].assign(static_cast<size_t>(count[a]), NAN);
          o32[a].assign(static_cast<size_t>(count[a]), NAN);
          y16[a] = rnd(static_cast<size_t>(n), seed++);
          y32[a] = y16[a];
          qp[a] = q[a].data();
          wp[a] = w[a].data();
          p16[a] = o16[a].data();
          p32[a] = o32[a].data();
          py16[a] = y16[a].data();
          py32[a] = y32[a].data();
        }
        nm::dot_rows_multi(qp, nq, bits.data(), t, ld, count, n, p16);
        nm::dot_rows_multi(qp, nq, vals.data(), ld, count, n, p32);
        nm::axpy_rows_multi(wp, nq, bits.data(), t, ld, count, py16, n);
        nm::axpy_rows_multi(wp, nq, vals.data(), ld, count, py32, n);
        for (int a = 0; a < nq; ++a) {
          EXPECT_TRUE(same_bits(o16[a], o32[a])) << tag << " query " << a << ": dot products differ";
          EXPECT_TRUE(same_bits(y16[a], y32[a])) << tag << " query " << a << ": weighted sums differ";
        }
      }
    }
  }
  const std::vector<uint16_t> rows(64, 0);
  const std::vector<float> q(64, 1.0f);
  std::vector<float> o(1);
  const float* qp[1] = {q.data()};
  float* op[1] = {o.data()};
  const int64_t one[1] = {1};
  EXPECT_THROW(nm::dot_rows_multi(qp, 1, rows.data(), DType::F32, 64, one, 64, op), std::exception);
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
