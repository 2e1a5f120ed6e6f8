#include "backends/cuda/ops/device_memory.h"

#include <cuda_runtime_api.h>

#include <string>

#include "common/error.h"

namespace nvfp4::cuda_ops {

namespace {
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(std::string(what) + ": " + cudaGetErrorString(e));
}
cudaStream_t st(void* s) { return static_cast<cudaStream_t>(s); }
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

void device_zero(void* p, size_t bytes) {
  check(cudaMemset(p, 0, bytes), "cudaMemset");
  check(cudaDeviceSynchronize(), "cudaMemset");
}

void copy_to_device(void* dst, const void* src, size_t bytes) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "copy of activations to the device");
}

void copy_to_host(void* dst, const void* src, size_t bytes) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "copy of activations from the device");
}

void copy_to_device(void* dst, const void* src, size_t bytes, void* stream) {
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, st(stream)), "copy of activations to the device");
}

void copy_to_host(void* dst, const void* src, size_t bytes, void* stream) {
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, st(stream)), "copy of activations from the device");
  check(cudaStreamSynchronize(st(stream)), "copy of activations from the device");
}

namespace {

class CudaStream final : public Stream {
 public:
  explicit CudaStream(int device) {
    check(cudaSetDevice(device < 0 ? 0 : device), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~CudaStream() override { cudaStreamDestroy(s_); }
  void* get() const override { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

class CudaStepGraph final : public StepGraph {
 public:
  explicit CudaStepGraph(cudaGraphExec_t e) : exec_(e) {}
  ~CudaStepGraph() override { cudaGraphExecDestroy(exec_); }
  void launch(void* stream) const override { check(cudaGraphLaunch(exec_, st(stream)), "CUDA graph launch"); }

 private:
  cudaGraphExec_t exec_;
};

}  // namespace

std::unique_ptr<Stream> Stream::create(int device) { return std::make_unique<CudaStream>(device); }

std::unique_ptr<StepGraph> StepGraph::capture(void* stream, const std::function<void()>& body) {
  // Thread-local mode: other threads' CUDA calls (a second model, a cuBLAS handle elsewhere) neither break
  // this capture nor are refused by it.
  check(cudaStreamBeginCapture(st(stream), cudaStreamCaptureModeThreadLocal), "CUDA graph capture");
  cudaGraph_t g = nullptr;
  try {
    body();
  } catch (...) {
    cudaStreamEndCapture(st(stream), &g);  // ends the (invalidated) capture; the stream is usable again
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
    throw;
  }
  const cudaError_t e = cudaStreamEndCapture(st(stream), &g);
  if (e != cudaSuccess || !g) {
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
    fail(std::string("CUDA graph capture: ") + cudaGetErrorString(e));
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t ie = cudaGraphInstantiate(&exec, g, 0);
  cudaGraphDestroy(g);
  if (ie != cudaSuccess) {
    cudaGetLastError();
    fail(std::string("CUDA graph instantiation: ") + cudaGetErrorString(ie));
  }
  return std::make_unique<CudaStepGraph>(exec);
}

}  // namespace nvfp4::cuda_ops
