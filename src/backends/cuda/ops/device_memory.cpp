#include "backends/cuda/ops/device_memory.h"

#include <cuda_runtime_api.h>

#include <string>

#include "common/error.h"

namespace nvfp4::cuda_ops {

namespace {
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(std::string(what) + ": " + cudaGetErrorString(e));
}
}  // namespace

void* device_alloc(size_t bytes, int device) {
  check(cudaSetDevice(device < 0 ? 0 : device), "cudaSetDevice");
  void* p = nullptr;
  check(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc for model activations");
  return p;
}

void device_free(void* p) noexcept {
  if (p) cudaFree(p);
}

void copy_to_device(void* dst, const void* src, size_t bytes) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "copy of activations to the device");
}

void copy_to_host(void* dst, const void* src, size_t bytes) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "copy of activations from the device");
}

}  // namespace nvfp4::cuda_ops
