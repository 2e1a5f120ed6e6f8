// Canonical in-memory NVFP4 tensors and the quantization recipes of SPEC §3 and §4.
// Global scales carry both directions: `enc` is the divisor form (compressed-tensors: 2688/amax) and
// `dec` the multiplier form (ModelOpt: amax/2688); X ≈ e2m1 · e4m3 · dec. Checkpoint readers set them once
// with GlobalScale::from_enc / from_dec, keeping the stored value exactly and deriving the other as f32(1/x).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "format/numerics.h"

namespace nvfp4 {

constexpr int kGroupSize = 16;              // values per E4M3 block scale
constexpr float kFp4TimesFp8Max = 2688.0f;  // 6 · 448

struct GlobalScale {
  float enc = 1.0f;  // divisor form (2688 / amax)
  float dec = 1.0f;  // multiplier form (amax / 2688)
  static GlobalScale from_enc(float enc);  // dec = f32(1/enc)
  static GlobalScale from_dec(float dec);  // enc = f32(1/dec)
};

// An NVFP4 matrix [rows, cols] (weights: rows = N out features, cols = K in features).
struct Nvfp4Matrix {
  int64_t rows = 0;
  int64_t cols = 0;                // multiple of 16
  std::vector<uint8_t> codes;      // (rows, cols/2) e2m1x2, element 2j in the low nibble
  std::vector<uint8_t> scales;     // (rows, cols/16) e4m3, linear
  GlobalScale global;              // X ≈ e2m1 · e4m3 · global.dec
  void resize(int64_t r, int64_t c);
};

// What a quantized linear computes (SPEC §5).
enum class Semantics : uint8_t {
  W4A16,     // FP4 weights, bf16/fp16 activations (weight-only)
  W4A4,      // activations quantized to NVFP4 at run time; native (Blackwell) numerics
  W4A4_VLLM, // W4A4 with vLLM's emulation numerics (both operands dequantized and rounded to T first)
};
const char* semantics_name(Semantics s);           // "w4a16", "w4a4", "w4a4-vllm"
bool semantics_from_name(const std::string& s, Semantics* out);

// What a linear's kernel does with its outputs y = T(x·Wᵀ (+ bias)) (an executor that computes more than Store in
// the kernel says where, e.g. the cuda executor's decode kernel):
//   Store:         out (m, N) T, y itself;
//   Swiglu:        rows of gate and up interleaved in blocks of 8 (interleave_linear_outputs), out (m, N/2) T of
//                  T(T(silu(gate))·up) per feature (silu in f64), as the decoder's SwiGLU;
//   AddToResidual: out (m, N) f32 holding values of T (the decoder's residual stream) becomes T(out + y).
enum class Epilogue : uint8_t { Store, Swiglu, AddToResidual };

// One quantized linear layer in canonical form: y = x · Wᵀ (+ bias). Produced by io/, consumed by backends.
struct LinearWeights {
  std::string name;             // module name, e.g. "model.layers.0.self_attn.q_proj"
  Nvfp4Matrix weight;           // (N, K): N out features, K in features
  bool has_input_scale = false; // true for W4A4 checkpoints (input_global_scale / input_scale present)
  GlobalScale input_global;     // activation global scale; the quantizer uses input_global.enc
  std::vector<float> bias;      // (N,) values of the model dtype; empty when the layer has no bias
  int64_t out_features() const { return weight.rows; }
  int64_t in_features() const { return weight.cols; }
};

// The f32 factor every executor applies to a linear's accumulator before the output rounding (SPEC §5):
// D_w (w4a16), alpha = f32(D_x·D_w) (w4a4), 1 (w4a4-vllm, whose rounded operands carry the global scales).
float linear_output_factor(const LinearWeights& w, Semantics s);

// Linears that read the same input (q/k/v, gate/up) as one: *out gets parts[0]'s rows, then parts[1]'s, ...
// (name "a+b+c"), so that one kernel computes them all. Exact (every output the value its part gives, up to
// the executor's f32 summation order) only where the parts share every number an executor applies per layer:
// the weight global scale and the input global scale (and whether there is one); and either every part has a
// bias or none has; and the same in_features. Otherwise returns false with the reason in *why and leaves the
// parts unchanged; on success the parts' codes and scales are released (copied into *out).
bool concat_linear_outputs(std::vector<LinearWeights>* parts, LinearWeights* out, std::string* why);
// The same for parts of equal out_features n (a multiple of `block`), their rows alternating in blocks: *out's rows
// are parts[0]'s rows 0 .. block-1, parts[1]'s rows 0 .. block-1, ..., then each part's next block (gate/up with
// block 8: a 16-row tile holds 8 features' gate rows and then their up rows, so that one kernel can compute
// silu(gate)·up in its epilogue). Same conditions and failure behaviour as concat_linear_outputs, and also false
// where the parts' row counts differ or are not multiples of block.
bool interleave_linear_outputs(std::vector<LinearWeights>* parts, int64_t block, LinearWeights* out,
                               std::string* why);

// ---- compressed-tensors weight writer (SPEC §3), bit-exact with compressed-tensors -------------------
// max |w| over n values (exact).
float abs_max(const float* w, int64_t n);
// gs = T(T(1/max(amax, tiny_T)) · 2688) as compressed-tensors computes it (torch evaluates 2688 / tensor as
// reciprocal-then-multiply, each rounded to T); a non-finite result (amax == 0, fp16 overflow) gives 1.0.
float ct_global_enc(float amax, DType t);
// Quantizes w (rows, cols), whose values must be exactly representable in t, with divisor-form global scale
// gs_enc. cols % 16 == 0 (checked, throws nvfp4::Error). Output global = from_enc(gs_enc).
Nvfp4Matrix ct_quantize(const float* w, int64_t rows, int64_t cols, DType t, float gs_enc);

// ---- ModelOpt weight writer ---------------------------------------------------------------------------
// ModelOpt's per-tensor factor (weight_scale_2, input_scale): D = f32(amax / 2688), 1.0 when amax == 0.
float modelopt_global_dec(float amax);
// D = modelopt_global_dec(amax); S = e4m3(clamp(f32(amax_g / f32(6·D)))), zero blocks use 1.0;
// q = e2m1(clamp(f32(x / f32(S·D)))). Output global = from_dec(D). `amax` is max|w| of this tensor, or for a
// fused set (q/k/v, gate/up) the largest amax of the set: ModelOpt's export gives a fused set one
// weight_scale_2, and vLLM reads one per fused layer.
Nvfp4Matrix modelopt_quantize(const float* w, int64_t rows, int64_t cols, float amax);
// Same with amax = max|w| of this tensor.
Nvfp4Matrix modelopt_quantize(const float* w, int64_t rows, int64_t cols);

// ---- run-time activation quantizer (SPEC §4), bit-exact with vLLM's kernel and reference ---------------
// x: (m, k) values representable in the activation dtype; gs_enc: divisor-form input global scale.
// codes: (m, k/2) e2m1x2; scales: (m, k/16) e4m3, linear.
void quantize_activations(const float* x, int64_t m, int64_t k, float gs_enc, uint8_t* codes,
                          uint8_t* scales);
// The factor that takes a group's values to E2M1 (SPEC §4 step 3): f32(1 / f32(S·gs_dec)) for its scale byte s8,
// 0 for a zero scale; gs_dec = f32(1 / gs_enc).
inline float activation_scale_reciprocal(uint8_t s8, float gs_dec) {
  const float s = e4m3_decode(s8);
  return s == 0.0f ? 0.0f : 1.0f / (s * gs_dec);
}
// One group of 16 activations v as quantize_activations takes it: returns its scale byte (SPEC §4 step 2) and
// sets *os = activation_scale_reciprocal of it; each value then gets the code activation_code(v[j], *os). For
// callers that need the group's values rather than packed codes (the CPU executor's W4A4 activations).
uint8_t activation_group_scale(const float* v, float gs_enc, float gs_dec, float* os);
// E2M1 code of one value v of a group whose factor is os (SPEC §4 step 4; e2m1_encode clamps to ±6 itself).
inline uint8_t activation_code(float v, float os) { return e2m1_encode(v * os); }

// ---- dequantization ------------------------------------------------------------------------------------
// out (rows, cols) f32 = e2m1 · e4m3 · global.dec, the product formed as f32(f32(e2m1·S)·dec) (e2m1·S is exact).
void dequantize(const Nvfp4Matrix& m, float* out);
// Same, rounded to t (F32/F16/BF16) and stored as f32 values.
void dequantize_to(const Nvfp4Matrix& m, DType t, float* out);

}  // namespace nvfp4
