// QuantizedLinear: the executor chosen by select_linear(), behind one interface (linear.h).
#include "linear/linear.h"

#include <string>
#include <utility>

#include "backends/cpu/linear.h"
#include "common/error.h"

#ifdef NVFP4_HAVE_CUDA
#include "backends/cublaslt/cublaslt_linear.h"
#include "backends/cuda/cuda_linear.h"
#endif

namespace nvfp4 {

namespace {

void check_common(const LinearWeights& w, const Selection& sel, DType act) {
  if (act != DType::BF16 && act != DType::F16)
    throw Error("linear '" + w.name + "': activation dtype " + dtype_name(act) + ", expected BF16 or F16");
  if (sel.semantics != Semantics::W4A16 && !w.has_input_scale)
    throw Error("linear '" + w.name + "': semantics " + semantics_name(sel.semantics) +
                " needs an input global scale, but the layer has none (W4A16 checkpoint)");
  if (sel.executor == Executor::Cublaslt && sel.semantics != Semantics::W4A4)
    throw Error("linear '" + w.name + "': the cublaslt executor computes w4a4 only, not " +
                semantics_name(sel.semantics));
}

// cpu: owns the weights (CpuLinear keeps a reference to them).
class CpuQuantizedLinear final : public QuantizedLinear {
 public:
  CpuQuantizedLinear(LinearWeights w, const Selection& sel, DType act)
      : QuantizedLinear(sel, act, w), w_(std::move(w)), impl_(w_, sel.semantics, act) {}
  void forward(const void* x, int64_t m, void* y, void*) const override {
    if (m <= 0) return;
    impl_.run(static_cast<const uint16_t*>(x), m, static_cast<uint16_t*>(y));
  }

 private:
  LinearWeights w_;  // declared before impl_: constructed first, outlives it
  CpuLinear impl_;
};

#ifdef NVFP4_HAVE_CUDA
class CudaQuantizedLinear final : public QuantizedLinear {
 public:
  CudaQuantizedLinear(const LinearWeights& w, const Selection& sel, DType act)
      : QuantizedLinear(sel, act, w), impl_(cuda::CudaLinear::create(w, sel.semantics, act, sel.device)) {}
  void forward(const void* x, int64_t m, void* y, void* stream) const override {
    if (m <= 0) return;
    impl_->run(x, m, y, stream);
  }
  bool epilogue_in_kernel(Epilogue e, int64_t m) const override { return impl_->epilogue_in_kernel(e, m); }
  void forward_epilogue(Epilogue e, const void* x, int64_t m, void* out, void* stream) const override {
    if (m <= 0) return;
    impl_->run_epilogue(e, x, m, out, stream);
  }

 private:
  std::unique_ptr<cuda::CudaLinear> impl_;
};

class CublasLtQuantizedLinear final : public QuantizedLinear {
 public:
  CublasLtQuantizedLinear(const LinearWeights& w, const Selection& sel, DType act)
      : QuantizedLinear(sel, act, w), impl_(cublaslt::CublasLtLinear::create(w, act, sel.device)) {}
  void forward(const void* x, int64_t m, void* y, void* stream) const override {
    if (m <= 0) return;
    impl_->run(x, m, y, stream);
  }

 private:
  std::unique_ptr<cublaslt::CublasLtLinear> impl_;
};
#endif

template <class W>
std::unique_ptr<QuantizedLinear> make(W&& w, const Selection& sel, DType act) {
  check_common(w, sel, act);
  switch (sel.executor) {
    case Executor::Cpu:
      return std::make_unique<CpuQuantizedLinear>(std::forward<W>(w), sel, act);
    case Executor::Cuda:
#ifdef NVFP4_HAVE_CUDA
      return std::make_unique<CudaQuantizedLinear>(w, sel, act);
#else
      break;
#endif
    case Executor::Cublaslt:
#ifdef NVFP4_HAVE_CUDA
      return std::make_unique<CublasLtQuantizedLinear>(w, sel, act);
#else
      break;
#endif
  }
  throw Error("linear '" + w.name + "': executor " + executor_name(sel.executor) +
              " is not available: this binary was built without CUDA");
}

}  // namespace

void QuantizedLinear::forward_epilogue(Epilogue e, const void* x, int64_t m, void* out, void* stream) const {
  if (e == Epilogue::Store) return forward(x, m, out, stream);
  throw Error("linear: executor " + std::string(executor_name(sel_.executor)) + " computes no " +
              (e == Epilogue::Swiglu ? "SwiGLU" : "residual addition") + " in its kernel (M = " + std::to_string(m) +
              ")");
}

std::unique_ptr<QuantizedLinear> QuantizedLinear::create(const LinearWeights& w, const Selection& sel, DType act) {
  return make(w, sel, act);
}

std::unique_ptr<QuantizedLinear> QuantizedLinear::create(LinearWeights&& w, const Selection& sel, DType act) {
  return make(std::move(w), sel, act);
}

}  // namespace nvfp4
