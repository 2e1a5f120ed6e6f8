// CPU executor: the reference for every semantics (f64) and a fast path (threads over N, weights decoded
// once per output row per call, f32 accumulation in 8 independent lanes so the compiler vectorises it).
#include "backends/cpu/linear.h"

#include <array>
#include <cmath>
#include <string>

#include "common/error.h"
#include "common/parallel.h"
#include "format/numerics.h"

namespace nvfp4 {

namespace {

void validate(const LinearWeights& w, Semantics s, DType act) {
  const std::string& name = w.name.empty() ? std::string("linear") : w.name;
  if (act != DType::BF16 && act != DType::F16)
    fail(name + ": activation dtype " + dtype_name(act) + " is not supported, expected BF16 or F16");
  if (w.weight.cols % kGroupSize != 0)
    fail(name + ": K = " + std::to_string(w.weight.cols) + " is not a multiple of 16");
  if (w.weight.codes.size() != static_cast<size_t>(w.weight.rows * (w.weight.cols / 2)) ||
      w.weight.scales.size() != static_cast<size_t>(w.weight.rows * (w.weight.cols / kGroupSize)))
    fail(name + ": weight codes/scales do not match shape [" + std::to_string(w.weight.rows) + ", " +
         std::to_string(w.weight.cols) + "]");
  if (!w.bias.empty() && static_cast<int64_t>(w.bias.size()) != w.weight.rows)
    fail(name + ": bias has " + std::to_string(w.bias.size()) + " values, expected " +
         std::to_string(w.weight.rows));
  if (s != Semantics::W4A16 && !w.has_input_scale)
    fail(name + ": " + semantics_name(s) + " needs an input global scale; this layer is weight-only (W4A16)");
}

// Pairs of E2M1 values for every byte (low nibble first): one table load decodes two weights.
struct PairTable {
  std::array<std::array<float, 2>, 256> v;
  PairTable() {
    for (int b = 0; b < 256; ++b) v[b] = {e2m1_decode(static_cast<uint8_t>(b & 0xF)), e2m1_decode(static_cast<uint8_t>(b >> 4))};
  }
};
const PairTable& pairs() {
  static const PairTable t;
  return t;
}

// Dot product of two f32 rows of length k (k % 16 == 0), 8 lanes of f32 partial sums.
__attribute__((target_clones("avx2", "default"))) float dot(const float* a, const float* b, int64_t k) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i < k; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// Activations converted to f32 in the form each semantics multiplies: x itself (w4a16), e2m1·sx (w4a4),
// T(e2m1·f32(sx/gs_x)) (w4a4-vllm). (m, k) row-major.
std::vector<float> prepare_activations(const LinearWeights& w, Semantics s, DType act, const uint16_t* x,
                                       int64_t m) {
  const int64_t k = w.weight.cols;
  std::vector<float> xf(static_cast<size_t>(m * k));
  for (int64_t i = 0; i < m * k; ++i) xf[i] = from_bits16(act, x[i]);
  if (s == Semantics::W4A16) return xf;
  std::vector<uint8_t> codes(static_cast<size_t>(m * k / 2)), scales(static_cast<size_t>(m * k / kGroupSize));
  quantize_activations(xf.data(), m, k, w.input_global.enc, codes.data(), scales.data());
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < k; ++c) {
      const float sx = e4m3_decode(scales[r * (k / kGroupSize) + c / kGroupSize]);
      const float q = e2m1_decode(get_e2m1(codes.data() + r * (k / 2), c));
      xf[r * k + c] = s == Semantics::W4A4 ? q * sx : round_to(act, q * (sx / w.input_global.enc));
    }
  return xf;
}

}  // namespace

uint16_t linear_output(DType act, float acc, const float* bias_n) {
  return to_bits16(act, round_linear_output(act, acc, bias_n));
}

CpuLinear::CpuLinear(const LinearWeights& w, Semantics s, DType act) : w_(w), sem_(s), act_(act) {
  validate(w, s, act);
  const size_t n = w.weight.scales.size();
  wscale_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const float sc = e4m3_decode(w.weight.scales[i]);
    wscale_[i] = s == Semantics::W4A4_VLLM ? sc * w.weight.global.dec : sc;  // vLLM: f32(S·D_w)
  }
}

void CpuLinear::run(const uint16_t* x, int64_t m, uint16_t* y) const {
  const int64_t n = w_.weight.rows, k = w_.weight.cols, groups = k / kGroupSize;
  const std::vector<float> xf = prepare_activations(w_, sem_, act_, x, m);
  // Factor applied to the f32 sum before rounding to T.
  float post = 1.0f;
  if (sem_ == Semantics::W4A16) post = w_.weight.global.dec;
  if (sem_ == Semantics::W4A4) post = w_.input_global.dec * w_.weight.global.dec;  // alpha = f32(D_x·D_w)
  const auto& lut = pairs().v;
  parallel_for(static_cast<size_t>(n), 8, [&](size_t n0, size_t n1) {
    std::vector<float> wrow(static_cast<size_t>(k));
    for (int64_t r = static_cast<int64_t>(n0); r < static_cast<int64_t>(n1); ++r) {
      const uint8_t* codes = w_.weight.codes.data() + r * (k / 2);
      const float* sc = wscale_.data() + r * groups;
      for (int64_t g = 0; g < groups; ++g) {
        const float s = sc[g];
        for (int j = 0; j < 8; ++j) {
          const auto& p = lut[codes[g * 8 + j]];
          float* o = wrow.data() + g * kGroupSize + 2 * j;
          o[0] = p[0] * s;
          o[1] = p[1] * s;
        }
      }
      if (sem_ == Semantics::W4A4_VLLM)  // w_dq = T(e2m1 · f32(S·D_w))
        for (int64_t c = 0; c < k; ++c) wrow[c] = round_to(act_, wrow[c]);
      const float* bias = w_.bias.empty() ? nullptr : &w_.bias[r];
      for (int64_t i = 0; i < m; ++i) {
        const float acc = dot(xf.data() + i * k, wrow.data(), k);
        y[i * n + r] = linear_output(act_, acc * post, bias);
      }
    }
  });
}

void cpu_linear_reference_f64(const LinearWeights& w, Semantics s, DType act, const uint16_t* x, int64_t m,
                              double* acc) {
  validate(w, s, act);
  const int64_t n = w.weight.rows, k = w.weight.cols, groups = k / kGroupSize;
  const std::vector<float> xf = prepare_activations(w, s, act, x, m);
  double post = 1.0;
  if (s == Semantics::W4A16) post = w.weight.global.dec;
  if (s == Semantics::W4A4) post = static_cast<float>(w.input_global.dec * w.weight.global.dec);
  std::vector<double> wrow(static_cast<size_t>(k));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      const float sc = e4m3_decode(w.weight.scales[r * groups + c / kGroupSize]);
      const float q = e2m1_decode(get_e2m1(w.weight.codes.data() + r * (k / 2), c));
      wrow[c] = s == Semantics::W4A4_VLLM ? round_to(act, q * (sc * w.weight.global.dec)) : q * sc;
    }
    for (int64_t i = 0; i < m; ++i) {
      double sum = 0.0;
      for (int64_t c = 0; c < k; ++c) sum += static_cast<double>(xf[i * k + c]) * wrow[c];
      acc[i * n + r] = sum * post;
    }
  }
}

}  // namespace nvfp4
