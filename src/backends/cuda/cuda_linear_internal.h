// Internals of the CUDA executor that the benchmark and tests use; not part of interface (b).
#pragma once
#include <cstdint>
#include <memory>

#include "backends/cuda/cuda_linear.h"
#include "backends/cuda/weight_layout.h"

namespace nvfp4::cuda {

// create() from an already prepared weight (w supplies shape, scalars and bias; its codes are not read).
std::unique_ptr<CudaLinear> create_prepared(const LinearWeights& w, const FragmentWeights& f, Semantics s,
                                            DType act, int device);

// Path selection override: M <= fused_max_m runs the fused kernel, larger M the dequantize + cuBLAS path.
// A negative value restores the default crossover.
void set_fused_max_m(CudaLinear& l, int64_t fused_max_m);

// Rows per dequantized weight tile of the large-M path (a multiple of 16; default: 64 MB per tile).
void set_weight_tile_rows(CudaLinear& l, int rows);

// Fused kernel choice for M <= 16: -1 default, 0 register-staged loads, 1 cp.async ring with the same grid,
// 2 cp.async ring with the grid chosen for whole waves (docs/PERF.md). The ring needs K % 64 == 0; other
// layers always use the register-staged kernel.
void set_fused_kernel(CudaLinear& l, int variant);

// Default crossover (largest M on the fused kernel) for a layer of this shape and semantics.
int64_t default_fused_max_m(Semantics s, int64_t n, int64_t k);

}  // namespace nvfp4::cuda
