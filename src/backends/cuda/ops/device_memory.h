// Device memory, stream and graph helpers for the model runner (plain C++, no CUDA headers): buffers for the
// activations that cross between the CPU decoder and on-device quantized linears, and the stream and CUDA
// graph of `--ops cuda`. Only built with CUDA (NVFP4_HAVE_CUDA).
#pragma once
#include <cstddef>
#include <functional>
#include <memory>

namespace nvfp4::cuda_ops {

// cudaMalloc on `device` (makes it current). Throws nvfp4::Error with the CUDA error string.
void* device_alloc(size_t bytes, int device);
// cudaFree; null is allowed. Never throws.
void device_free(void* p) noexcept;
// Sets `bytes` bytes at p to zero (synchronous w.r.t. the host).
void device_zero(void* p, size_t bytes);
// Host -> device copy of `bytes`, ordered on the legacy default stream (synchronous w.r.t. the host).
void copy_to_device(void* dst, const void* src, size_t bytes);
// Device -> host copy; waits for the work queued before it on the default stream. Throws on a CUDA error
// (including one left by an earlier asynchronous launch).
void copy_to_host(void* dst, const void* src, size_t bytes);
// The same, ordered on `stream` (a cudaStream_t): the host -> device copy returns once `src` may be reused
// (pageable memory is staged), the device -> host copy once the stream's work up to it is done.
void copy_to_device(void* dst, const void* src, size_t bytes, void* stream);
void copy_to_host(void* dst, const void* src, size_t bytes, void* stream);

// A stream of `device` that does not synchronize with the legacy default stream (cudaStreamNonBlocking).
class Stream {
 public:
  static std::unique_ptr<Stream> create(int device);  // throws nvfp4::Error
  virtual ~Stream() = default;
  virtual void* get() const = 0;  // the cudaStream_t
};

// What `body` enqueues on `stream`, captured into a CUDA graph once and replayed by launch(). capture throws
// nvfp4::Error naming the CUDA error when the work cannot be captured (the stream is left usable, nothing is
// enqueued), and rethrows what body throws.
class StepGraph {
 public:
  static std::unique_ptr<StepGraph> capture(void* stream, const std::function<void()>& body);
  virtual ~StepGraph() = default;
  virtual void launch(void* stream) const = 0;  // throws nvfp4::Error
};

}  // namespace nvfp4::cuda_ops
