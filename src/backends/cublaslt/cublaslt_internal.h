// Test hooks of the cuBLASLt executor (plain C++). They let a GPU without native FP4 exercise everything up
// to the GEMM itself: the uploaded weight image, the per-call activation quantization into the padded
// workspace, and the heuristic query (which must fail there with the executor's error message).
// Not for library users: create() is the only supported way to build a layer.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/cublaslt/cublaslt_linear.h"

namespace nvfp4::cublaslt::internal {

struct OperandImages {
  int64_t rows_pad = 0, cols_pad = 0;  // of the activation image
  std::vector<uint8_t> w_codes, w_scales;  // the weight image as uploaded (fp4_layout.h: Fp4Operand)
  std::vector<uint8_t> x_codes, x_scales;  // the activation image after quantization: (m, Kp/2) codes (only the
                                           // m rows), swizzled_bytes(m, K/16) scales
};

// Builds a layer without the capability check and, when plan_now is false, without asking cuBLASLt for an
// algorithm (so it works on any CUDA device this binary has code for).
std::unique_ptr<CublasLtLinear> create_unchecked(const LinearWeights& w, DType act, int device, bool plan_now);
// Runs only the per-call activation preparation of `layer` for x (device, (m, K) T) and downloads both
// operand images. Synchronizes the device.
OperandImages prepare_for_test(const CublasLtLinear& layer, const void* x, int64_t m);
// Asks cuBLASLt for the plan used at m tokens; throws the executor's nvfp4::Error when there is none.
void plan_for_test(const CublasLtLinear& layer, int64_t m);
// Builds (and frees) the matmul descriptor and layouts the executor uses for a (rows x K) weight and `tokens`
// activations: host-only cuBLASLt calls, no GPU needed. Returns "" or "<step>: <cuBLASLt status>".
std::string check_descriptors(DType act, int64_t k, int64_t rows, int64_t tokens, bool device_scalars);

}  // namespace nvfp4::cublaslt::internal
