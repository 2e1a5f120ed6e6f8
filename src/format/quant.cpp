#include "format/quant.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "common/error.h"
#include "common/parallel.h"
#include "format/numerics.h"

namespace nvfp4 {

namespace {

// The ratio 1/6 as vLLM's kernel writes it: f32(1/6) = 0x3E2AAAAB.
constexpr float kOneSixth = 0.16666667163372039794921875f;

float clamp_abs(float x, float m) { return x > m ? m : (x < -m ? -m : x); }

void check_cols(int64_t cols, const char* what) {
  if (cols % kGroupSize != 0)
    fail(std::string(what) + ": K = " + std::to_string(cols) + " is not a multiple of 16");
}

}  // namespace

float linear_output_factor(const LinearWeights& w, Semantics s) {
  switch (s) {
    case Semantics::W4A16:
      return w.weight.global.dec;
    case Semantics::W4A4:
      return w.input_global.dec * w.weight.global.dec;
    case Semantics::W4A4_VLLM:
      break;
  }
  return 1.0f;
}

namespace {

// concat_linear_outputs (block 0) and interleave_linear_outputs (block > 0): the parts' rows in rounds, round r
// taking rows [r·b, (r+1)·b) of each part in turn (b = block, or the part's whole row count in one round).
bool fuse_linear_outputs(std::vector<LinearWeights>* parts, int64_t block, LinearWeights* out, std::string* why) {
  auto no = [&](const std::string& r) {
    if (why) *why = r;
    return false;
  };
  if (parts->empty()) return no("no linears to fuse");
  const LinearWeights& a = parts->front();
  auto same_scale = [](const GlobalScale& x, const GlobalScale& y) { return x.enc == y.enc && x.dec == y.dec; };
  int64_t rows = 0;
  for (const LinearWeights& p : *parts) {
    if (p.in_features() != a.in_features())
      return no(p.name + " has " + std::to_string(p.in_features()) + " inputs, " + a.name + " " +
                std::to_string(a.in_features()));
    if (block > 0 && p.out_features() != a.out_features())
      return no(p.name + " has " + std::to_string(p.out_features()) + " outputs, " + a.name + " " +
                std::to_string(a.out_features()));
    if (!same_scale(p.weight.global, a.weight.global))
      return no(p.name + " and " + a.name + " have different weight global scales");
    if (p.has_input_scale != a.has_input_scale ||
        (a.has_input_scale && !same_scale(p.input_global, a.input_global)))
      return no(p.name + " and " + a.name + " have different input global scales");
    if (p.bias.empty() != a.bias.empty()) return no(p.name + " and " + a.name + " differ in having a bias");
    rows += p.out_features();
  }
  if (block > 0 && a.out_features() % block != 0)
    return no(std::to_string(a.out_features()) + " outputs are not a multiple of " + std::to_string(block));
  const int64_t k = a.in_features(), rounds = block > 0 ? a.out_features() / block : 1;
  const int64_t code_row = k / 2, scale_row = k / 16;
  LinearWeights f;
  f.weight.rows = rows;
  f.weight.cols = k;
  f.weight.global = a.weight.global;
  f.has_input_scale = a.has_input_scale;
  f.input_global = a.input_global;
  f.weight.codes.reserve(static_cast<size_t>(rows * code_row));
  f.weight.scales.reserve(static_cast<size_t>(rows * scale_row));
  for (const LinearWeights& p : *parts) f.name += (f.name.empty() ? "" : "+") + p.name;
  for (int64_t r = 0; r < rounds; ++r)
    for (const LinearWeights& p : *parts) {
      const int64_t b = block > 0 ? block : p.out_features(), r0 = r * b;
      auto append = [&](std::vector<uint8_t>& to, const std::vector<uint8_t>& from, int64_t per_row) {
        to.insert(to.end(), from.begin() + r0 * per_row, from.begin() + (r0 + b) * per_row);
      };
      append(f.weight.codes, p.weight.codes, code_row);
      append(f.weight.scales, p.weight.scales, scale_row);
      if (!p.bias.empty()) f.bias.insert(f.bias.end(), p.bias.begin() + r0, p.bias.begin() + r0 + b);
    }
  for (LinearWeights& p : *parts) {
    std::vector<uint8_t>().swap(p.weight.codes);
    std::vector<uint8_t>().swap(p.weight.scales);
  }
  *out = std::move(f);
  return true;
}

}  // namespace

bool concat_linear_outputs(std::vector<LinearWeights>* parts, LinearWeights* out, std::string* why) {
  return fuse_linear_outputs(parts, 0, out, why);
}

bool interleave_linear_outputs(std::vector<LinearWeights>* parts, int64_t block, LinearWeights* out,
                               std::string* why) {
  if (block <= 0) {
    if (why) *why = "interleave block of " + std::to_string(block) + " rows";
    return false;
  }
  return fuse_linear_outputs(parts, block, out, why);
}

const char* semantics_name(Semantics s) {
  switch (s) {
    case Semantics::W4A16: return "w4a16";
    case Semantics::W4A4: return "w4a4";
    case Semantics::W4A4_VLLM: return "w4a4-vllm";
  }
  return "?";
}

bool semantics_from_name(const std::string& s, Semantics* out) {
  for (Semantics v : {Semantics::W4A16, Semantics::W4A4, Semantics::W4A4_VLLM})
    if (s == semantics_name(v)) {
      *out = v;
      return true;
    }
  return false;
}

GlobalScale GlobalScale::from_enc(float enc) { return GlobalScale{enc, 1.0f / enc}; }
GlobalScale GlobalScale::from_dec(float dec) { return GlobalScale{1.0f / dec, dec}; }

void Nvfp4Matrix::resize(int64_t r, int64_t c) {
  rows = r;
  cols = c;
  codes.assign(static_cast<size_t>(r * (c / 2)), 0);
  scales.assign(static_cast<size_t>(r * (c / kGroupSize)), 0);
}

float abs_max(const float* w, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(w[i]));
  return m;
}

float ct_global_enc(float amax, DType t) {
  // compressed-tensors evaluates 448 · 6 / amax on a tensor of the model dtype T, with amax first clamped to
  // T's smallest normal. torch computes scalar / tensor as tensor.reciprocal() * scalar, each step rounded to
  // T: gs = T(T(1/amax) · 2688). A result that is not finite (amax == 0, fp16 overflow) becomes 1.0.
  const float tiny = t == DType::F16 ? 6.103515625e-05f : 1.17549435e-38f;  // 2^-14 or 2^-126
  if (std::isnan(amax)) return 1.0f;
  const float a = std::max(amax, tiny);
  const float gs = round_to(t, round_to(t, 1.0f / a) * kFp4TimesFp8Max);
  if (!std::isfinite(gs)) return 1.0f;
  return gs;
}

namespace {

// The loop both weight writers share: per group of 16, `block(x)` returns the group's e4m3 scale code and the
// divisor t; codes are e2m1(clamp(f32(x / t), ±6)), an exact ±0 written as +0. Parallel over rows.
template <class Block>
void quantize_weight_groups(const float* w, Nvfp4Matrix& q, const Block& block) {
  const int64_t cols = q.cols, groups = cols / kGroupSize;
  parallel_for(static_cast<size_t>(q.rows), 16, [&](size_t r0, size_t r1) {
    for (int64_t r = static_cast<int64_t>(r0); r < static_cast<int64_t>(r1); ++r) {
      uint8_t* codes = q.codes.data() + r * (cols / 2);
      for (int64_t g = 0; g < groups; ++g) {
        const float* x = w + r * cols + g * kGroupSize;
        const auto [s, tdiv] = block(x);
        q.scales[static_cast<size_t>(r * groups + g)] = s;
        for (int j = 0; j < kGroupSize; j += 2) {
          const uint8_t lo = e2m1_encode_unsigned_zero(clamp_abs(x[j] / tdiv, kE2M1Max));
          const uint8_t hi = e2m1_encode_unsigned_zero(clamp_abs(x[j + 1] / tdiv, kE2M1Max));
          codes[(g * kGroupSize + j) / 2] = pack_e2m1x2(lo, hi);
        }
      }
    }
  });
}

}  // namespace

Nvfp4Matrix ct_quantize(const float* w, int64_t rows, int64_t cols, DType t, float gs_enc) {
  check_cols(cols, "ct_quantize");
  Nvfp4Matrix q;
  q.resize(rows, cols);
  q.global = GlobalScale::from_enc(gs_enc);
  quantize_weight_groups(w, q, [&](const float* x) {
    const float per_group = round_to(t, abs_max(x, kGroupSize) / kE2M1Max);  // amax_g / 6 in T
    uint8_t s = e4m3_encode(clamp_abs(gs_enc * per_group, kE4M3Max));
    if ((s & 0x7F) == 0) s = 0x20;  // a zero scale becomes 0.125
    return std::pair<uint8_t, float>(s, e4m3_decode(s) / gs_enc);
  });
  return q;
}

float modelopt_global_dec(float amax) { return amax > 0.0f ? amax / kFp4TimesFp8Max : 1.0f; }

Nvfp4Matrix modelopt_quantize(const float* w, int64_t rows, int64_t cols) {
  return modelopt_quantize(w, rows, cols, abs_max(w, rows * cols));
}

Nvfp4Matrix modelopt_quantize(const float* w, int64_t rows, int64_t cols, float amax) {
  check_cols(cols, "modelopt_quantize");
  const float dec = modelopt_global_dec(amax);
  Nvfp4Matrix q;
  q.resize(rows, cols);
  q.global = GlobalScale::from_dec(dec);
  const float six_dec = 6.0f * dec;
  quantize_weight_groups(w, q, [&](const float* x) {
    float s_f = abs_max(x, kGroupSize) / six_dec;
    if (s_f == 0.0f) s_f = 1.0f;  // ModelOpt: zero blocks get scale 1.0
    const uint8_t s = e4m3_encode(clamp_abs(s_f, kE4M3Max));
    return std::pair<uint8_t, float>(s, e4m3_decode(s) * dec);
  });
  return q;
}

uint8_t activation_group_scale(const float* v, float gs_enc, float gs_dec, float* os) {
  const float vmax = abs_max(v, kGroupSize);
  const float prod = gs_enc * (vmax * kOneSixth);
  const uint8_t s8 = e4m3_encode(clamp_abs(prod, kE4M3Max));
  *os = activation_scale_reciprocal(s8, gs_dec);
  return s8;
}

void quantize_activations(const float* x, int64_t m, int64_t k, float gs_enc, uint8_t* codes,
                          uint8_t* scales) {
  check_cols(k, "quantize_activations");
  const int64_t groups = k / kGroupSize;
  const float gs_dec = 1.0f / gs_enc;
  for (int64_t r = 0; r < m; ++r) {
    const float* row = x + r * k;
    uint8_t* crow = codes + r * (k / 2);
    for (int64_t g = 0; g < groups; ++g) {
      const float* v = row + g * kGroupSize;
      float os;
      scales[r * groups + g] = activation_group_scale(v, gs_enc, gs_dec, &os);
      for (int j = 0; j < kGroupSize; j += 2)
        crow[(g * kGroupSize + j) / 2] = pack_e2m1x2(activation_code(v[j], os), activation_code(v[j + 1], os));
    }
  }
}

void dequantize(const Nvfp4Matrix& m, float* out) {
  const int64_t groups = m.cols / kGroupSize;
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t c = 0; c < m.cols; ++c) {
      const float s = e4m3_decode(m.scales[static_cast<size_t>(r * groups + c / kGroupSize)]);
      const float v = e2m1_decode(get_e2m1(m.codes.data() + r * (m.cols / 2), c)) * s;  // exact
      out[r * m.cols + c] = v * m.global.dec;
    }
}

void dequantize_to(const Nvfp4Matrix& m, DType t, float* out) {
  dequantize(m, out);
  const int64_t n = m.rows * m.cols;
  for (int64_t i = 0; i < n; ++i) out[i] = round_to(t, out[i]);
}

}  // namespace nvfp4
