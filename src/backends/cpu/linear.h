// CPU executor for a quantized linear, all three semantics of SPEC §5, with bias.
//   y (M, N) = x (M, K) · Wᵀ (+ bias), x and y in the activation dtype T (BF16 or F16, bit patterns).
// Two entry points: `CpuLinear`, the fast path (threads over blocks of weight rows; each block decoded once per
// call into a per-thread f32 tile and reused by all M tokens; f32 accumulation), and `cpu_linear_reference_f64`,
// straightforward loops accumulating in f64 (the test oracle; it returns the unrounded sums so tests can bound
// the error of any executor).
// CpuLinear's summation order per output is fixed and independent of block sizes, thread count and SIMD: 8 f32
// lanes, lane j summing x[k]·w[k] for k ≡ j (mod 8) in increasing k, then ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)).
// Its results are therefore reproducible bit for bit (recorded perplexities depend on it).
#pragma once
#include <cstdint>
#include <vector>

#include "common/cpu_isa.h"
#include "common/dtype.h"
#include "format/quant.h"

namespace nvfp4 {

// CpuLinear uses the instruction sets of common/cpu_isa.h (AVX-512F for one token, AVX2 + F16C otherwise; portable
// C++ anywhere), all with the same bits.

// Fast CPU path. Construct once per layer (prepare: decodes the block scales to f32 once); run() many times.
class CpuLinear {
 public:
  // act: BF16 or F16. Throws nvfp4::Error if the semantics needs an input scale the layer lacks.
  CpuLinear(const LinearWeights& w, Semantics s, DType act);
  // x: (m, K) T bits, row-major; y: (m, N) T bits, row-major. Thread-parallel over N. Any m >= 0; the cost per
  // token falls with m (the weights are decoded once per call).
  void run(const uint16_t* x, int64_t m, uint16_t* y) const;
  Semantics semantics() const { return sem_; }
  DType act_dtype() const { return act_; }

 private:
  const LinearWeights& w_;
  Semantics sem_;
  DType act_;
  std::vector<float> wscale_;  // (N, K/16) f32 block scale for this semantics (S, or T(S·D_w) parts)
  bool nan_free_scales_ = true;  // no entry of wscale_ is NaN (the vLLM flavour's rounding can skip its NaN test)
};

// Reference: the value before the final rounding to T, in f64, for each (m, n):
//   w4a16:     D_w · Σ x·(e2m1·S)                      (y = T(acc) then + bias)
//   w4a4:      alpha · Σ (e2m1·sx)·(e2m1·S)
//   w4a4-vllm: Σ x_dq · w_dq
// `acc` gets (m, N) doubles. Bias is not included (see cpu_linear_finish).
void cpu_linear_reference_f64(const LinearWeights& w, Semantics s, DType act, const uint16_t* x, int64_t m,
                              double* acc);

// Final step shared by every executor's reference check, as T bits: round_linear_output (format/numerics.h).
uint16_t linear_output(DType act, float acc, const float* bias_n);

}  // namespace nvfp4
