// The CUDA runtime error check of the CUDA executors: throws nvfp4::Error "cuda: <what>: <CUDA's message>".
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "common/error.h"

namespace nvfp4::cuda::detail {

inline void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(std::string("cuda: ") + what + ": " + cudaGetErrorString(e));
}
#define NVFP4_CUDA_CHECK(expr) ::nvfp4::cuda::detail::check_cuda((expr), #expr)

}  // namespace nvfp4::cuda::detail
