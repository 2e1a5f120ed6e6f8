// CUDA executor for NVFP4 linears on sm_80 / sm_90 (and the activation quantizer on every CUDA arch).
// Plain C++: this header never includes CUDA headers, so every layer can include it. A build without CUDA
// does not compile backends/cuda at all; callers check kernels_available() before create().
//
// Numerics are SPEC §4 (quantizer, bit-exact with format/quant.h's quantize_activations) and SPEC §5
// (w4a16, w4a4, w4a4-vllm, bias added as y = T(T(acc) + bias)). Accumulation is fp32.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "common/dtype.h"
#include "format/quant.h"

namespace nvfp4::cuda {

// True when a CUDA device is usable and this binary has kernels for it; *why (may be null) says why not.
bool kernels_available(int device, std::string* why);

enum class ScaleLayout { Linear, Swizzled128x4 };

// Run-time activation quantizer (SPEC §4).
//   x:      device, (m, k) row-major, `act` = BF16 or F16 bit patterns; k % 16 == 0.
//   gs_enc: divisor-form input global scale (LinearWeights::input_global.enc).
//   codes:  device, (m, k/2) e2m1x2, element 2j in the low nibble.
//   scales: device, (m, k/16) e4m3 linear, or swizzled_bytes(m, k/16) bytes for Swizzled128x4 (padding
//           written 0).
//   stream: cudaStream_t or nullptr (default stream). Asynchronous. Throws nvfp4::Error on bad arguments.
void quantize_activations(const void* x, DType act, int64_t m, int64_t k, float gs_enc, uint8_t* codes,
                          uint8_t* scales, ScaleLayout layout, void* stream);

class CudaLinear {  // one layer, prepared once at load
 public:
  // Uploads + prepares the weight (repacking etc.) on `device`. act: BF16 or F16. Throws nvfp4::Error
  // (bad shape, K % 16 != 0, W4A4 semantics without an input scale, no usable device).
  static std::unique_ptr<CudaLinear> create(const LinearWeights& w, Semantics s, DType act, int device);
  virtual ~CudaLinear() = default;
  // x: device (m, K) T, 16-byte aligned; y: device (m, N) T; stream: cudaStream_t or nullptr. Async, no
  // host sync; m == 0 is a no-op. Workspaces are stream-ordered (cudaMallocAsync), so calls from several
  // threads/streams are safe. CUDA graphs: the first call with M above the fused-kernel crossover on a
  // given stream allocates that stream's cuBLAS workspace and must happen before capturing.
  virtual void run(const void* x, int64_t m, void* y, void* stream) const = 0;
  // The same with epilogue e (format/quant.h) computed in the decode kernel: only where epilogue_in_kernel(e, m)
  // (Store always; the others where the decode kernel runs M with one token tile, M <= 8, in the exact and
  // power-of-two weight modes; for Swiglu N % 16 == 0); throws elsewhere.
  virtual bool epilogue_in_kernel(Epilogue e, int64_t m) const = 0;
  virtual void run_epilogue(Epilogue e, const void* x, int64_t m, void* out, void* stream) const = 0;
  virtual Semantics semantics() const = 0;
  virtual int64_t out_features() const = 0;
  virtual int64_t in_features() const = 0;
};

}  // namespace nvfp4::cuda
