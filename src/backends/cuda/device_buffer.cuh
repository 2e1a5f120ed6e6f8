// Host-side pieces shared by the CUDA and cuBLASLt executors: an owning device allocation (cudaMalloc on the
// current device), the bias upload, and the guard that makes a layer's device current for a scope.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "common/dtype.h"
#include "format/numerics.h"

namespace nvfp4::cuda {

template <typename P = uint8_t>
struct DeviceBuffer {
  P* p = nullptr;
  size_t bytes = 0;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (p) cudaFree(p);
  }
  // Frees what was held, then allocates n bytes (none for n == 0). Throws nvfp4::Error.
  void alloc(size_t n) {
    if (p) cudaFree(p);
    p = nullptr;
    bytes = 0;
    if (n == 0) return;
    void* q = nullptr;
    detail::check_cuda(cudaMalloc(&q, n), "cudaMalloc");
    p = static_cast<P*>(q);
    bytes = n;
  }
  // alloc(n), then copies n bytes from the host.
  void upload(const void* src, size_t n) {
    alloc(n);
    if (n) detail::check_cuda(cudaMemcpy(p, src, n, cudaMemcpyHostToDevice), "cudaMemcpy (upload)");
  }
  uint8_t* u8() const { return reinterpret_cast<uint8_t*>(p); }

};

// A layer's bias on the device, as the output kernels read it: (N,) f32, each value rounded to the activation
// type `act` (BF16 or F16) first, for y = T(T(acc) + T(bias)) of SPEC §5. bias: host (N,) f32, may be
// empty: then nothing is allocated and dst.p stays null. Allocates on the current device. Throws nvfp4::Error.
inline void upload_bias(const std::vector<float>& bias, DType act, DeviceBuffer<float>& dst) {
  if (bias.empty()) return;
  std::vector<float> b(bias.size());
  for (size_t i = 0; i < b.size(); ++i) b[i] = round_to(act, bias[i]);
  dst.upload(b.data(), b.size() * sizeof(float));
}

// Makes `device` current for a scope and restores the previous device at its end. Throws nvfp4::Error when
// the device cannot be made current.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    detail::check_cuda(cudaGetDevice(&prev_), "cudaGetDevice");
    if (prev_ != device) detail::check_cuda(cudaSetDevice(device), "cudaSetDevice");
    changed_ = prev_ != device;
  }
  ~DeviceGuard() {
    if (changed_) cudaSetDevice(prev_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = 0;
  bool changed_ = false;
};

}  // namespace nvfp4::cuda
