// Device side of the run-time activation quantizer (SPEC §4): the public launcher's, and the W4A4 GEMM paths'
// quantize-dequantize.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_linear.h"

namespace nvfp4::cuda::detail {

// x: (m, k) T; codes (m, k/2); scales: linear (m, k/16) or swizzled. gs_enc > 0 finite (checked by caller).
void launch_quantize(const void* x, DType act, int64_t m, int64_t k, float gs_enc, uint8_t* codes,
                     uint8_t* scales, ScaleLayout layout, cudaStream_t stream);

// x: (m, k) T, 16-byte aligned; out: (m, k) T, 16-byte aligned. Quantizes x as launch_quantize does and
// writes the dequantized values: e2m1 · sx (exact in T; w4a4), or T(e2m1 · f32(sx / gs_enc)) when vllm.
// programmatic (sm_90+, m <= kQuadMaxRows): launched after the previous kernel in the stream has let it.
constexpr int64_t kQuadMaxRows = 32;
// Blocks of 256 threads of that decode-size (m <= kQuadMaxRows) kernel: four lanes per group of 16.
constexpr int64_t quantize_dequant_quad_blocks(int64_t m, int64_t k) { return (m * (k / 16) * 4 + 255) / 256; }
void launch_quantize_dequant(const void* x, DType act, int64_t m, int64_t k, float gs_enc, bool vllm, void* out,
                             bool programmatic, cudaStream_t stream);

// tab: kGroupFactors float2 of device memory; gets the group factors (os, sc; quantize_dev.cuh's group_factors) of
// every scale byte a group can get, for input global scale gs_enc (> 0 finite) and the flavour (vllm): the table a
// W4A4 layer makes at load.
constexpr int kGroupFactors = 128;
void launch_group_factor_table(float gs_enc, bool vllm, float2* tab, cudaStream_t stream);

}  // namespace nvfp4::cuda::detail
