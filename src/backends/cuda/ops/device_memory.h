// Device memory helpers for the model runner (plain C++, no CUDA headers): buffers for the activations that
// cross between the CPU decoder and on-device quantized linears. Only built with CUDA (NVFP4_HAVE_CUDA).
#pragma once
#include <cstddef>

namespace nvfp4::cuda_ops {

// cudaMalloc on `device` (makes it current). Throws nvfp4::Error with the CUDA error string.
void* device_alloc(size_t bytes, int device);
// cudaFree; null is allowed. Never throws.
void device_free(void* p) noexcept;
// Host -> device copy of `bytes`, ordered on the legacy default stream (synchronous w.r.t. the host).
void copy_to_device(void* dst, const void* src, size_t bytes);
// Device -> host copy; waits for the work queued before it on the default stream. Throws on a CUDA error
// (including one left by an earlier asynchronous launch).
void copy_to_host(void* dst, const void* src, size_t bytes);

}  // namespace nvfp4::cuda_ops
