// The CPU executor in all three semantics (SPEC §5) against the f64 reference, with the error bound derived
// in docs/TESTING.md ("CPU linear"), bias present and absent, bf16 and fp16, NaN-poisoned outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/linear.h"
#include "cpu_isa_paths.h"
#include "common/error.h"
#include "common/parallel.h"
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

// The summation order CpuLinear promises (src/backends/cpu/linear.cpp, docs/TESTING.md "CPU linear"), restated
// as plain scalar loops one output at a time: 8 f32 lanes, lane j adds x[k]·w[k] for k ≡ j (mod 8) in increasing
// k from +0, then ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)), then ·post, then the output rule. This is the order of the
// row-at-a-time executor the blocked one replaced; any blocking that keeps it gives the same bits.
std::vector<uint16_t> ordered_oracle(const LinearWeights& w, Semantics s, DType act, const uint16_t* x, int64_t m) {
  const int64_t n = w.weight.rows, k = w.weight.cols, groups = k / kGroupSize;
  std::vector<float> xf(static_cast<size_t>(m * k));
  for (int64_t i = 0; i < m * k; ++i) xf[i] = from_bits16(act, x[i]);
  if (s != Semantics::W4A16) {
    std::vector<uint8_t> codes(static_cast<size_t>(m * k / 2)), scales(static_cast<size_t>(m * groups));
    quantize_activations(xf.data(), m, k, w.input_global.enc, codes.data(), scales.data());
    for (int64_t i = 0; i < m; ++i)
      for (int64_t c = 0; c < k; ++c) {
        const float sx = e4m3_decode(scales[i * groups + c / kGroupSize]);
        const float q = e2m1_decode(get_e2m1(codes.data() + i * (k / 2), c));
        xf[i * k + c] = s == Semantics::W4A4 ? q * sx : round_to(act, q * (sx / w.input_global.enc));
      }
  }
  const float post = linear_output_factor(w, s);
  std::vector<uint16_t> y(static_cast<size_t>(m * n));
  std::vector<float> wr(static_cast<size_t>(k));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      const float sc = e4m3_decode(w.weight.scales[r * groups + c / kGroupSize]);
      const float q = e2m1_decode(get_e2m1(w.weight.codes.data() + r * (k / 2), c));
      wr[c] = s == Semantics::W4A4_VLLM ? round_to(act, q * (sc * w.weight.global.dec)) : q * sc;
    }
    for (int64_t i = 0; i < m; ++i) {
      float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int64_t c = 0; c < k; ++c) l[c % 8] += xf[i * k + c] * wr[c];
      const float sum = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
      y[i * n + r] = linear_output(act, sum * post, w.bias.empty() ? nullptr : &w.bias[r]);
    }
  }
  return y;
}

// Shapes that are not multiples of the executor's blocks (8 rows, 2 tokens × 4 rows, 64 tokens, 512 K columns;
// with these small N the row block stays 8 even past 64 tokens, see ManyTokenRowBlocks below):
// partial row tiles, odd token counts, more than one token block (130 = 2·64 + 2, so later token blocks reuse
// the decoded weights), K with and without a partial last K block. Within the derived bound of the f64 reference
// AND bit-identical to the ordered oracle, in every semantics, both dtypes, with and without bias.
TEST(CpuLinear, BlockedPathKeepsTheSummationOrder) {
  // Every instruction set this CPU has (portable, AVX2, AVX-512F: the one-token path), each against the oracle.
  testing::for_each_cpu_isa([](CpuIsa isa) {
  uint32_t seed = 500;
  for (int64_t m : {1, 2, 7, 33, 130})
    for (auto [n, k] : {std::pair<int64_t, int64_t>{13, 16}, {37, 1040}, {9, 512}})
      for (DType act : {DType::BF16, DType::F16})
        for (Semantics s : {Semantics::W4A16, Semantics::W4A4, Semantics::W4A4_VLLM}) {
          const bool bias = (seed % 2) == 0;
          const Case c = make_case(m, n, k, act, bias, seed++);
          check(c, s, act);
          const std::vector<uint16_t> want = ordered_oracle(c.w, s, act, c.x.data(), m);
          std::vector<uint16_t> y(static_cast<size_t>(m * n), 0xFFFF);
          CpuLinear(c.w, s, act).run(c.x.data(), m, y.data());
          for (int64_t i = 0; i < m * n; ++i)
            ASSERT_EQ(y[i], want[i]) << cpu_isa_name(isa) << " " << semantics_name(s) << " " << dtype_name(act)
                                     << " M=" << m << " N=" << n << " K=" << k << " at (" << i / n << "," << i % n
                                     << ")";
        }
  });
}

// Past 64 tokens the executor decodes up to 64 rows per block, halved until every thread has 4 blocks: with
// N = 200, one thread gives 64-row blocks (the last one 8 rows), two threads 16-row blocks. Same bits as the
// ordered oracle in both, every semantics and dtype, 65 and 130 tokens (one and two extra token blocks).
TEST(CpuLinear, ManyTokenRowBlocksKeepTheSummationOrder) {
  const int saved = num_threads();
  uint32_t seed = 900;
  for (int threads : {1, 2})
    for (int64_t m : {65, 130})
      for (DType act : {DType::BF16, DType::F16})
        for (Semantics s : {Semantics::W4A16, Semantics::W4A4, Semantics::W4A4_VLLM}) {
          const bool bias = (seed % 2) == 0;
          const Case c = make_case(m, 200, 1040, act, bias, seed++);
          const std::vector<uint16_t> want = ordered_oracle(c.w, s, act, c.x.data(), m);
          std::vector<uint16_t> y(static_cast<size_t>(m * 200), 0xFFFF);
          set_num_threads(threads);
          CpuLinear(c.w, s, act).run(c.x.data(), m, y.data());
          set_num_threads(saved);
          ASSERT_EQ(y, want) << semantics_name(s) << " " << dtype_name(act) << " M=" << m << " threads=" << threads;
        }
}

// Older files carry NaN (0x7F) block scales (SPEC §3). The executor must not crash; the row with the NaN scale
// is NaN for every token, the other rows are untouched, and all bits equal the ordered oracle's (the vectorised
// decode and T-rounding treat NaN as the scalar rule does).
TEST(CpuLinear, NanBlockScaleStaysInItsRow) {
  for (int m : {1, 3})  // the one-token path and the decoded tiles
    for (DType act : {DType::BF16, DType::F16})
      for (Semantics s : {Semantics::W4A16, Semantics::W4A4, Semantics::W4A4_VLLM}) {
        Case c = make_case(m, 11, 1040, act, true, 321);
        c.w.weight.scales[5 * (1040 / kGroupSize) + 40] = kE4M3NaN;  // row 5, group 40 (second K block)
        const std::vector<uint16_t> want = ordered_oracle(c.w, s, act, c.x.data(), m);
        std::vector<uint16_t> y(static_cast<size_t>(m * 11));
        CpuLinear(c.w, s, act).run(c.x.data(), m, y.data());
        EXPECT_EQ(y, want) << semantics_name(s) << " " << dtype_name(act) << " M=" << m;
        for (int i = 0; i < m; ++i)
          for (int j = 0; j < 11; ++j) EXPECT_EQ(std::isnan(from_bits16(act, y[i * 11 + j])), j == 5) << i << "," << j;
      }
}

// The vLLM flavour's per-weight rounding T(e2m1 · f32(S·D_w)) at its edges, on every instruction set against the
// ordered oracle: D_w's low 16 mantissa bits are 0x8001 (just past a bf16 tie), 0x8000 with an even and an odd
// kept half (ties to even), 0x7FFF (just below) and 0xFFFF (a carry into the exponent), so that scale byte 0x38
// (S = 1) with code 2 (1.0) lands on each pattern exactly and the other scales and codes on their multiples;
// D_w near the f32 maximum turns some products into infinities. Both activation types; one token and three (the
// register and the tile decode). The AVX kernels leave out the rounding's NaN test when no scale is NaN.
TEST(CpuLinear, VllmWeightRoundingAtItsEdgesOnEveryPath) {
  const uint32_t dec_bits[] = {0x3F808001u, 0x3F808000u, 0x3F818000u, 0x3F807FFFu, 0x3F80FFFFu, 0x7E808001u};
  const uint8_t scale_bytes[] = {0x38, 0x39, 0x3C, 0x30, 0x01, 0x7E, 0x48, 0x3F};
  testing::for_each_cpu_isa([&](CpuIsa isa) {
    for (uint32_t db : dec_bits)
      for (DType act : {DType::BF16, DType::F16})
        for (int64_t m : {1, 3}) {
          const int64_t n = 16, k = 64;
          Case c = make_case(m, n, k, act, false, 4242);
          std::mt19937 rng(db);
          for (auto& b : c.w.weight.codes) b = static_cast<uint8_t>(rng());
          for (size_t i = 0; i < c.w.weight.scales.size(); ++i) c.w.weight.scales[i] = scale_bytes[i % 8];
          c.w.weight.codes[0] = 0x22;  // row 0, columns 0 and 1: code 2 (1.0) with S = 1
          c.w.weight.global = GlobalScale::from_dec(f32_from_bits(db));
          const std::vector<uint16_t> want = ordered_oracle(c.w, Semantics::W4A4_VLLM, act, c.x.data(), m);
          std::vector<uint16_t> y(static_cast<size_t>(m * n), 0xFFFF);
          CpuLinear(c.w, Semantics::W4A4_VLLM, act).run(c.x.data(), m, y.data());
          ASSERT_EQ(y, want) << cpu_isa_name(isa) << " D_w bits 0x" << std::hex << db << std::dec << " "
                             << dtype_name(act) << " M=" << m;
        }
  });
}

// The thread count changes only which thread computes a row block, never the bits.
TEST(CpuLinear, ThreadCountDoesNotChangeTheBits) {
  const Case c = make_case(33, 70, 1040, DType::BF16, true, 77);
  const int saved = num_threads();
  std::vector<uint16_t> y1(33 * 70), y3(33 * 70);
  set_num_threads(1);
  CpuLinear(c.w, Semantics::W4A4, DType::BF16).run(c.x.data(), 33, y1.data());
  set_num_threads(3);
  CpuLinear(c.w, Semantics::W4A4, DType::BF16).run(c.x.data(), 33, y3.data());
  set_num_threads(saved);
  EXPECT_EQ(y1, y3);
}

// A fusion of linears (concat_linear_outputs, interleave_linear_outputs) that must refuse `parts`: false, a reason
// containing `want`, and the parts left as they were.
template <class Fuse>
void expect_fusion_refused(std::vector<LinearWeights> parts, const std::string& want, Fuse fuse) {
  const std::vector<LinearWeights> before = parts;
  LinearWeights f;
  std::string why;
  EXPECT_FALSE(fuse(&parts, &f, &why)) << want;
  EXPECT_NE(why.find(want), std::string::npos) << why;
  for (size_t i = 0; i < parts.size(); ++i) {
    EXPECT_EQ(parts[i].weight.codes, before[i].weight.codes);
    EXPECT_EQ(parts[i].weight.scales, before[i].weight.scales);
  }
}

// The parts of a fused set (out features ns, biases, seeds seed0, seed0 + 1, ...): they share their global scales
// (the quantizer gives a fused set one) and their input (the same tensor), and are named p0, p1, ...
std::vector<Case> fusable_parts(int64_t m, const std::vector<int64_t>& ns, int64_t k, DType act, uint32_t seed0) {
  std::vector<Case> cs;
  for (size_t i = 0; i < ns.size(); ++i)
    cs.push_back(make_case(m, ns[i], k, act, true, seed0 + static_cast<uint32_t>(i)));
  for (Case& c : cs) {
    c.w.weight.global = cs[0].w.weight.global;
    c.w.input_global = cs[0].w.input_global;
    c.x = cs[0].x;
    c.w.name = "p" + std::to_string(&c - cs.data());
  }
  return cs;
}

// Linears fused along their outputs (q/k/v: concat_linear_outputs) give each part's outputs bit for
// bit (the executor sums every output in the same order whatever N is), in every semantics; parts that do
// not share their scales, bias presence or input count are refused, named, and left as they were.
TEST(ConcatLinearOutputs, FusedLayerGivesEachPartsOutputsBitForBit) {
  for (Semantics s : {Semantics::W4A16, Semantics::W4A4, Semantics::W4A4_VLLM}) {
    const DType act = DType::BF16;
    const int64_t m = 3, k = 1040;
    const std::vector<Case> cs = fusable_parts(m, {24, 8, 8}, k, act, 600);
    std::vector<LinearWeights> parts;
    for (const Case& c : cs) parts.push_back(c.w);
    LinearWeights f;
    std::string why;
    ASSERT_TRUE(concat_linear_outputs(&parts, &f, &why)) << why;
    EXPECT_EQ(f.name, "p0+p1+p2");
    ASSERT_EQ(f.out_features(), 40);
    ASSERT_EQ(f.in_features(), k);
    std::vector<uint16_t> y(static_cast<size_t>(m * 40), 0xFFFF);
    CpuLinear(f, s, act).run(cs[0].x.data(), m, y.data());
    int64_t col = 0;
    for (const Case& c : cs) {
      const int64_t n = c.w.out_features();
      std::vector<uint16_t> yp(static_cast<size_t>(m * n), 0xFFFF);
      CpuLinear(c.w, s, act).run(c.x.data(), m, yp.data());
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j)
          ASSERT_EQ(y[static_cast<size_t>(i * 40 + col + j)], yp[static_cast<size_t>(i * n + j)])
              << semantics_name(s) << " " << c.w.name << " (" << i << "," << j << ")";
      col += n;
    }
  }
  // Refusals: each leaves the parts as they were.
  auto refused = [](std::vector<LinearWeights> parts, const std::string& want) {
    expect_fusion_refused(std::move(parts), want, concat_linear_outputs);
  };
  Case a = make_case(1, 16, 64, DType::BF16, false, 700), b = make_case(1, 16, 64, DType::BF16, false, 701);
  b.w.input_global = a.w.input_global;
  a.w.name = "a";
  b.w.name = "b";
  LinearWeights b2 = b.w;
  b2.weight.global = GlobalScale::from_enc(a.w.weight.global.enc * 2);
  refused({a.w, b2}, "different weight global scales");
  b2 = b.w;
  b2.weight.global = a.w.weight.global;
  b2.input_global = GlobalScale::from_enc(a.w.input_global.enc * 2);
  refused({a.w, b2}, "different input global scales");
  b2.input_global = a.w.input_global;
  b2.has_input_scale = false;
  refused({a.w, b2}, "different input global scales");
  b2.has_input_scale = true;
  b2.bias.assign(16, 0.5f);
  refused({a.w, b2}, "differ in having a bias");
  Case c = make_case(1, 16, 80, DType::BF16, false, 702);
  c.w.weight.global = a.w.weight.global;
  c.w.input_global = a.w.input_global;
  c.w.name = "c";
  refused({a.w, c.w}, "c has 80 inputs, a 64");
}

// Parts interleaved in blocks of rows (gate/up: interleave_linear_outputs) give each part's outputs bit for bit at
// their interleaved columns, bias included, in every semantics; unequal row counts, counts that are not multiples
// of the block and what concat_linear_outputs refuses are refused, named, and leave the parts as they were.
TEST(InterleaveLinearOutputs, FusedLayerGivesEachPartsOutputsAtItsColumns) {
  for (Semantics s : {Semantics::W4A16, Semantics::W4A4, Semantics::W4A4_VLLM}) {
    const DType act = DType::BF16;
    const int64_t m = 3, k = 1040, n = 24, block = 8;
    const std::vector<Case> cs = fusable_parts(m, {n, n}, k, act, 650);
    std::vector<LinearWeights> parts;
    for (const Case& c : cs) parts.push_back(c.w);
    LinearWeights f;
    std::string why;
    ASSERT_TRUE(interleave_linear_outputs(&parts, block, &f, &why)) << why;
    EXPECT_EQ(f.name, "p0+p1");
    ASSERT_EQ(f.out_features(), 2 * n);
    std::vector<uint16_t> y(static_cast<size_t>(m * 2 * n), 0xFFFF);
    CpuLinear(f, s, act).run(cs[0].x.data(), m, y.data());
    for (int p = 0; p < 2; ++p) {
      std::vector<uint16_t> yp(static_cast<size_t>(m * n), 0xFFFF);
      CpuLinear(cs[static_cast<size_t>(p)].w, s, act).run(cs[0].x.data(), m, yp.data());
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          const int64_t col = j / block * 2 * block + p * block + j % block;
          ASSERT_EQ(y[static_cast<size_t>(i * 2 * n + col)], yp[static_cast<size_t>(i * n + j)])
              << semantics_name(s) << " part " << p << " (" << i << "," << j << ")";
        }
    }
  }
  auto refused = [](std::vector<LinearWeights> parts, int64_t block, const std::string& want) {
    expect_fusion_refused(std::move(parts), want, [block](std::vector<LinearWeights>* ps, LinearWeights* f,
                                                          std::string* why) {
      return interleave_linear_outputs(ps, block, f, why);
    });
  };
  Case a = make_case(1, 16, 64, DType::BF16, false, 710), b = make_case(1, 24, 64, DType::BF16, false, 711);
  b.w.input_global = a.w.input_global;
  b.w.weight.global = a.w.weight.global;
  a.w.name = "a";
  b.w.name = "b";
  refused({a.w, b.w}, 8, "b has 24 outputs, a 16");
  refused({a.w, a.w}, 32, "16 outputs are not a multiple of 32");
  refused({a.w, a.w}, 0, "interleave block of 0 rows");
  LinearWeights a2 = a.w;
  a2.weight.global = GlobalScale::from_enc(a.w.weight.global.enc * 2);
  refused({a.w, a2}, 8, "different weight global scales");
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
