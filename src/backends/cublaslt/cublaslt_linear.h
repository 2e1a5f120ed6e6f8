// Native W4A4 on Blackwell (sm_100/103/110/120/121) through cuBLASLt's block-scaled FP4 GEMM.
// Plain C++: never includes CUDA headers. Only compiled in a CUDA build (NVFP4_HAVE_CUDA).
//
// Computes SPEC §5 "W4A4 native": y = T( T(alpha · Σ_k (e2m1(qx)·sx)·(e2m1(qw)·S_w)) + bias ),
// alpha = f32(D_x · D_w), activations quantized per call with nvfp4::cuda::quantize_activations (SPEC §4).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "common/dtype.h"
#include "format/quant.h"

namespace nvfp4::cublaslt {

// True when device `device` can run the native FP4 GEMM with this binary: compute capability >= 10.0,
// CUDA runtime and cuBLASLt >= 12.8, and this binary carries code for the device (our activation quantizer
// must run there). *why (may be null) says why not, e.g.
// "cublaslt needs compute capability >= 10.0; this device is NVIDIA H200 (9.0)".
bool native_fp4_available(int device, std::string* why);

class CublasLtLinear {  // one layer, prepared once at load
 public:
  // Pads N and K, swizzles the weight block scales to the 128x4 layout, uploads, and builds the matmul
  // descriptors. w must have an input scale (W4A4 checkpoint). act: BF16 or F16. Throws nvfp4::Error,
  // including when native FP4 is not available on `device` (message as native_fp4_available's).
  static std::unique_ptr<CublasLtLinear> create(const LinearWeights& w, DType act, int device);
  virtual ~CublasLtLinear() = default;
  // x: device (m, K) T row-major, 16-byte aligned; y: device (m, N) T row-major; stream: cudaStream_t or
  // nullptr. The first call with a larger m on a stream grows that stream's workspace (cudaMalloc) and asks
  // cuBLASLt for a plan: make it before capturing a CUDA graph.
  // Asynchronous (alpha is read from device memory; no host sync). m == 0 is a no-op.
  // Workspaces are per (device, stream), so layers may run on several streams; calls are serialized on the
  // host by a per-device mutex.
  virtual void run(const void* x, int64_t m, void* y, void* stream) const = 0;
  virtual int64_t out_features() const = 0;
  virtual int64_t in_features() const = 0;
};

}  // namespace nvfp4::cublaslt
