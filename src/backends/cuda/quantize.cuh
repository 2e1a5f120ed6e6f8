// Device side of the run-time activation quantizer (SPEC §4), shared by the public launcher and the fused
// W4A4 path (which asks for the kernel-private nibble order of weight_layout.h).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_linear.h"

namespace nvfp4::cuda::detail {

enum class CodeOrder { Linear, Fragment };

// x: (m, k) T; codes (m, k/2); scales: linear (m, k/16) or swizzled. gs_enc > 0 finite (checked by caller).
void launch_quantize(const void* x, DType act, int64_t m, int64_t k, float gs_enc, uint8_t* codes,
                     uint8_t* scales, ScaleLayout layout, CodeOrder order, cudaStream_t stream);

}  // namespace nvfp4::cuda::detail
