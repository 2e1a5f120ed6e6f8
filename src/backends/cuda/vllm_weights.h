// The vLLM flavour's weight values w_dq = T(e2m1 · f32(S·D_w)) (SPEC §5) without a rounding per weight.
// Plain C++, decided once per layer at load.
//
// A code's magnitude v is P or 1.5·P with P a power of two (0.5 ... 4), so v·f = P·f or P·(1.5f), and
// scaling by a power of two commutes with rounding while nothing leaves the normal range of f32 and T:
// T(f32(v·f)) = P·a or P·b, a = T(f), b = T(f32(1.5f)). The kernels (mma_frag.cuh's scale_regs, deq_reg) get
// per block a' = T(f32(S·D_w·2^σ)) = a·2^σ and b2 = T(f32(3·f32(S·D_w·2^σ))) = 2b·2^σ, form Y = b2 - 2a' and
// C = 3a' - b2 (exact: b2 - 2a' is a multiple of an ulp of a' below 2a', 3a' - b2 a few ulps) and per weight,
// with v the code's value in T (sign included) and E = v without its top mantissa bit (the power of two at or
// below |v|, 0.5 for 0.5, sign kept):
//   g = fma(v, Y, E·C) = v·Y + E·C:  v = P: P·(Y + C) = P·a';  v = 1.5P: P·(1.5Y + C) = P·b2/2,
// that is w_dq·2^σ, every step exact when its result is a value of T; the GEMM's f32 factor 2^-σ undoes σ.
// Per weight this costs the exact mode's two operations and three more. The plan checks all of it for every
// block scale the layer holds, by the same operations on the host: where any step would round, or the identity
// fails (a T subnormal or an overflow in w_dq, as fp16 layers with tiny scales have), the layer keeps the
// per-weight f32 rounding.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/dtype.h"

namespace nvfp4::cuda {

struct VllmPow2Plan {
  bool ok = false;
  int shift = 0;        // σ
  float w_dec = 1.0f;   // D_w · 2^(σ + 120): the kernels' f32(S·2^-120 · w_dec) is f32(S·D_w)·2^σ
  float unscale = 1.0f; // 2^-σ: the GEMM's output factor
  std::string why;      // when !ok: the first block scale that does not fit, and why
};

// t: the activation type (BF16 or F16); d_w: f32(1/gs_w); scales: the layer's e4m3 block scales (NaN-free).
VllmPow2Plan vllm_pow2_plan(DType t, float d_w, const uint8_t* scales, size_t n);

}  // namespace nvfp4::cuda
