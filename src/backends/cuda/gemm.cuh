// Device side of the CUDA GEMM paths. Host code (cuda_linear.cu) fills GemmParams and calls the launchers.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "common/dtype.h"

namespace nvfp4::cuda::detail {

enum class Mode : int {
  W4A16 = 0,     // x is (m, K) T; weights e2m1·S exact
  W4A4 = 1,      // x is fragment-order codes (m, K/2) + linear scales (m, K/16); both operands exact
  W4A4_VLLM = 2, // same inputs; both operands rounded to T after an f32 scale product
};

struct GemmParams {
  const uint4* wq = nullptr;        // FragmentWeights::codes on device
  const uint16_t* ws = nullptr;     // FragmentWeights::scales on device (2 bytes per lane and chunk)
  const void* x = nullptr;          // W4A16: (m, K) T; W4A4*: codes (m, K/2)
  const uint8_t* xs = nullptr;      // W4A4*: scales (m, K/16)
  void* y = nullptr;                // (m, N) T
  const float* bias = nullptr;      // (N,) values of T, or null
  int64_t m = 0;
  int n = 0, k = 0;                 // logical N, K (K % 16 == 0)
  int n16 = 0, kc = 0;              // tiles of 16 rows, chunks of 64 K
  float out_scale = 1.0f;           // f32 factor applied to the accumulator before rounding to T
  float w_dec = 1.0f;               // vLLM flavour: D_w
  float x_gs = 1.0f;                // vLLM flavour: gs_x (activation scale = f32(sx / gs_x))
  int wk = 8;                       // warps of a block splitting K (1, 2, 4, 8); 8 / wk weight tiles per block
};

// Blocks of 8 warps per SM the fused kernel for token tiles of 8·nt and nw weight tiles per warp is
// compiled to fit (its register budget: 80 registers for one token tile and one weight tile, 128 otherwise);
// the host's grid rules count block slots with it.
constexpr int fused_blocks_per_sm(int nt, int nw) { return nt == 1 && nw == 1 ? 3 : 2; }

// Fused mixed-input GEMM, tokens in tiles of 8·nt (nt = 1, 2 or 4), nw = 1, 2 or 4 weight tiles per warp
// (nt = 4 uses at most 2).
void launch_fused_gemm(const GemmParams& p, DType act, Mode mode, int nt, int nw, cudaStream_t stream);

// Large-M helpers. Dequantize rows [n0, n0+rows) of the prepared weight to T, (rows, K) row-major:
//   exact modes: e2m1·S;  vLLM: T(e2m1 · f32(S·w_dec)).
void launch_dequant_weight(const GemmParams& p, DType act, bool vllm, int n0, int rows, void* out,
                           cudaStream_t stream);
// Dequantize linear-order activation codes (m, K/2) + scales (m, K/16) to T: exact e2m1·sx, or
// vLLM: T(e2m1 · f32(sx / gs)).
void launch_dequant_act(const uint8_t* codes, const uint8_t* scales, int64_t m, int k, DType act, bool vllm,
                        float gs, void* out, cudaStream_t stream);
// y (m, N) T: y = T(y + bias) in place.
void launch_add_bias(void* y, const float* bias, int64_t m, int n, DType act, cudaStream_t stream);

}  // namespace nvfp4::cuda::detail
