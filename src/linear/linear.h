// The quantized linear the model runner uses: y = x · Wᵀ (+ bias), executed by the executor that
// select_linear() chose (linear/select.h): backends/cpu CpuLinear, backends/cuda CudaLinear or
// backends/cublaslt CublasLtLinear. In a CPU-only build (no NVFP4_HAVE_CUDA) only the cpu executor exists and
// create() throws nvfp4::Error for the others.
#pragma once
#include <cstdint>
#include <memory>

#include "common/dtype.h"
#include "format/quant.h"
#include "linear/select.h"

namespace nvfp4 {

class QuantizedLinear {
 public:
  // Prepares the layer once (upload, repack, swizzle) for sel.executor on sel.device with sel.semantics.
  // act: BF16 or F16, the activation dtype T. Throws nvfp4::Error (shape, missing input scale for a W4A4
  // semantics, executor not compiled in / not usable).
  // The cpu executor keeps a copy of the weights; the rvalue overload moves them in instead (no copy).
  static std::unique_ptr<QuantizedLinear> create(const LinearWeights& w, const Selection& sel, DType act);
  static std::unique_ptr<QuantizedLinear> create(LinearWeights&& w, const Selection& sel, DType act);
  virtual ~QuantizedLinear() = default;

  const Selection& selection() const { return sel_; }
  // True: forward's x and y are device pointers on selection().device (cuda, cublaslt); false: host (cpu).
  bool on_device() const { return sel_.executor != Executor::Cpu; }
  DType act_dtype() const { return act_; }
  int64_t out_features() const { return n_; }  // N
  int64_t in_features() const { return k_; }   // K
  // Kept for every layer that has one (also under w4a16), so switching to emulation needs no re-read.
  bool has_input_scale() const { return has_input_scale_; }
  const GlobalScale& input_global() const { return input_global_; }

  // x: (m, K) T row-major, y: (m, N) T row-major (T = act_dtype(), bit patterns), host or device as
  // on_device() says; device x must be 16-byte aligned. Bias (if the layer has one) is included. stream:
  // cudaStream_t or nullptr (ignored on cpu). Device executors are asynchronous (no host sync); m == 0 is a
  // no-op. CUDA graphs: call once with the largest m on the stream before capturing (workspaces grow then).
  virtual void forward(const void* x, int64_t m, void* y, void* stream) const = 0;
  // Whether forward_epilogue computes epilogue e (format/quant.h: SwiGLU of a gate/up layer interleaved in blocks
  // of 8, or the addition to the residual stream) in the linear's own kernel for m rows (the cuda executor's
  // decode kernel); where not, the caller runs forward and the decoder's op. Store: always.
  virtual bool epilogue_in_kernel(Epilogue e, int64_t /*m*/) const { return e == Epilogue::Store; }
  virtual void forward_epilogue(Epilogue e, const void* x, int64_t m, void* out, void* stream) const;

 protected:
  QuantizedLinear(const Selection& sel, DType act, const LinearWeights& w)
      : sel_(sel), act_(act), n_(w.out_features()), k_(w.in_features()),
        has_input_scale_(w.has_input_scale), input_global_(w.input_global) {}

 private:
  Selection sel_;
  DType act_;
  int64_t n_, k_;
  bool has_input_scale_;
  GlobalScale input_global_;
};

}  // namespace nvfp4
