// Native W4A4 on Blackwell through cuBLASLt's block-scaled FP4 GEMM (cublaslt_linear.h).
//
// Computes (SPEC §5, W4A4 native): y = T( T(alpha · Σ_k (e2m1(qx)·sx)·(e2m1(qw)·S_w)) + bias ),
// alpha = f32(D_x · D_w).
// Operands (fp4_layout.h has the layout rules and their host-side model):
//   A = weight codes, (round_up(N,128), Kp/2) e2m1x2 row-major, Kp = round_up(K, 64), zero padded;
//       block scales swizzled 128x4 (format/swizzle.h), uploaded once at load.
//   B = activation codes, (m, Kp/2) e2m1x2 and swizzled scales, written per call by
//       nvfp4::cuda::quantize_activations(..., ScaleLayout::Swizzled128x4) into a per-device workspace.
//   D = y, (m, N) row-major in T = bf16 or fp16 (cuBLASLt column-major (N x m), ld N), or a padded staging
//       buffer when N or y's alignment does not suit cuBLASLt.
// cuBLASLt settings: CUDA_R_4F_E2M1 for A and B, A/B_SCALE_MODE = VEC16_UE4M3 set explicitly (left unset,
// cuBLASLt reads the scale pointer as one fp32 scalar and silently computes something else), TRANSA = T,
// TRANSB = N, CUBLAS_COMPUTE_32F with CUDA_R_32F scale type, alpha and beta read from device memory
// (CUBLASLT_POINTER_MODE_DEVICE; no host sync). Bias is added by our own kernel after the GEMM output is
// rounded to T: cuBLASLt's BIAS epilogue would add it before that rounding, which is not SPEC §5's
// y = T(T(acc) + bias).
#include "backends/cublaslt/cublaslt_internal.h"
#include "backends/cublaslt/cublaslt_linear.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cublaslt/fp4_layout.h"
#include "backends/cuda/cuda_linear.h"
#include "backends/cuda/cuda_util.cuh"
#include "backends/cuda/device_buffer.cuh"
#include "backends/cuda/device/capability.h"
#include "backends/cuda/device/device_info.h"
#include "common/error.h"
#include "format/numerics.h"

namespace nvfp4::cublaslt {

namespace {

// ---- error checks ---------------------------------------------------------------------------------------
void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(std::string("cublaslt: ") + what + ": " + cudaGetErrorString(e));
}
void check_lt(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    fail(std::string("cublaslt: ") + what + ": " + cublasLtGetStatusName(s) + " (" + cublasLtGetStatusString(s) +
         ")");
}
#define LT_CUDA(expr) check_cuda((expr), #expr)
#define LT_CHECK(expr) check_lt((expr), #expr)

using cuda::DeviceGuard;
using DeviceBuffer = cuda::DeviceBuffer<uint8_t>;

constexpr size_t kWorkspaceBytes = size_t(32) << 20;  // cuBLASLt workspace (split-K etc.), per device
constexpr size_t kAlign = 256;

size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// Per-stream buffers: the cuBLASLt workspace and the activation workspace (grown on demand). Work on one
// stream is ordered, so the layers of a device share one set per stream; two streams never share one.
struct StreamBuffers {
  DeviceBuffer workspace;
  DeviceBuffer scratch;
  // Returns scratch of at least `bytes`. Growing frees the old buffer (cudaFree waits for the device).
  uint8_t* scratch_at_least(size_t bytes) {
    if (scratch.bytes < bytes) scratch.alloc(align_up(bytes + bytes / 4));
    return scratch.u8();
  }
};

// Per-device state shared by every layer on the device: the cuBLASLt handle and the buffers of each stream.
// The mutex serializes the host side of run() (plan cache, buffer growth).
struct DeviceContext {
  std::mutex mu;
  cublasLtHandle_t handle = nullptr;
  std::map<cudaStream_t, std::unique_ptr<StreamBuffers>> streams;
  StreamBuffers& buffers(cudaStream_t s) {  // caller holds mu and has the device current
    auto& b = streams[s];
    if (!b) {
      b = std::make_unique<StreamBuffers>();
      b->workspace.alloc(kWorkspaceBytes);
    }
    return *b;
  }
};

DeviceContext& context(int device) {
  // Lives for the whole process (never destroyed: layers may be destroyed after static destructors run).
  static std::mutex mu;
  static std::map<int, DeviceContext*>* all = new std::map<int, DeviceContext*>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = all->find(device);
  if (it != all->end()) return *it->second;
  auto* c = new DeviceContext();
  DeviceGuard g(device);
  LT_CHECK(cublasLtCreate(&c->handle));
  (*all)[device] = c;
  return *c;
}

// ---- finishing kernel: y = T(T(acc) + bias), also the copy out of a padded staging buffer -------------
// src: (m, ld) T, already T(acc) (cuBLASLt rounds its fp32 result once to T); y: (m, n) T; bias: (n,) f32
// values of T or null. src may equal y (ld == n) for the in-place bias add.
template <typename T>
__global__ void finish_kernel(const T* src, int64_t ld, T* y, int64_t m, int64_t n, const float* bias) {
  const int64_t i = blockIdx.y;
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < n; j += int64_t(gridDim.x) * blockDim.x) {
    const T v = src[i * ld + j];
    y[i * n + j] = bias ? cuda::detail::Act<T>::one(__fadd_rn(cuda::detail::Act<T>::back(v), bias[j])) : v;
  }
}

void launch_finish(DType act, const void* src, int64_t ld, void* y, int64_t m, int64_t n, const float* bias,
                   cudaStream_t stream) {
  const int threads = 256;
  const unsigned gx = static_cast<unsigned>(std::min<int64_t>((n + threads - 1) / threads, 64));
  for (int64_t i0 = 0; i0 < m; i0 += 65535) {  // gridDim.y limit
    const unsigned gy = static_cast<unsigned>(std::min<int64_t>(m - i0, 65535));
    if (act == DType::BF16)
      finish_kernel<__nv_bfloat16><<<dim3(gx, gy), threads, 0, stream>>>(
          static_cast<const __nv_bfloat16*>(src) + i0 * ld, ld, static_cast<__nv_bfloat16*>(y) + i0 * n, gy, n,
          bias);
    else
      finish_kernel<__half><<<dim3(gx, gy), threads, 0, stream>>>(static_cast<const __half*>(src) + i0 * ld, ld,
                                                                 static_cast<__half*>(y) + i0 * n, gy, n, bias);
  }
  LT_CUDA(cudaGetLastError());
}

// One cuBLASLt configuration for a token count: descriptors, layouts and the chosen algorithm.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  int64_t rows = 0, tokens = 0;  // GEMM m (output features, ld of D) and n (tokens)
  bool staged = false;           // D is the staging buffer, copied to y by the finishing kernel
  bool device_scalars = true;    // alpha/beta from device memory
  void destroy() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
    d = b = a = nullptr;
    desc = nullptr;
  }
};

// Builds the matmul descriptor and the A/B/D layouts of p (p.rows, p.tokens, p.device_scalars set) for
// activations of type act and padded K kp. Host-only cuBLASLt calls (no device, no handle), so they are
// tested without a GPU. Returns "" or "<step>: <cuBLASLt status>" (p is then destroyed).
std::string make_descriptors(DType act, int64_t kp, const void* a_scale, Plan* p) {
  std::string err;
  auto done = [&](cublasStatus_t s, const char* what) {
    if (s == CUBLAS_STATUS_SUCCESS) return false;
    err = std::string(what) + ": " + cublasLtGetStatusName(s);
    p->destroy();
    return true;
  };
  if (done(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate")) return err;
  const int32_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
  // Set explicitly: left at the default (SCALAR_32F), cuBLASLt reads the scale pointers as one fp32 each.
  const int32_t scale_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3;
  const int32_t ptr_mode = p->device_scalars ? CUBLASLT_POINTER_MODE_DEVICE : CUBLASLT_POINTER_MODE_HOST;
  const void* b_scale = a_scale;  // replaced per call; the heuristic does not read it
  auto set = [&](cublasLtMatmulDescAttributes_t attr, const void* v, size_t n, const char* what) {
    return done(cublasLtMatmulDescSetAttribute(p->desc, attr, v, n), what);
  };
  if (set(CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof(op_t), "TRANSA") ||
      set(CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof(op_n), "TRANSB") ||
      set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &scale_mode, sizeof(scale_mode), "A_SCALE_MODE") ||
      set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &scale_mode, sizeof(scale_mode), "B_SCALE_MODE") ||
      set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof(a_scale), "A_SCALE_POINTER") ||
      set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof(b_scale), "B_SCALE_POINTER") ||
      set(CUBLASLT_MATMUL_DESC_POINTER_MODE, &ptr_mode, sizeof(ptr_mode), "POINTER_MODE"))
    return err;
  const cudaDataType_t out_t = act == DType::BF16 ? CUDA_R_16BF : CUDA_R_16F;
  if (done(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_4F_E2M1, kp, p->rows, kp), "layout A") ||
      done(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_4F_E2M1, kp, p->tokens, kp), "layout B") ||
      done(cublasLtMatrixLayoutCreate(&p->d, out_t, p->rows, p->tokens, p->rows), "layout D"))
    return err;
  return err;
}

// ---- the layer ----------------------------------------------------------------------------------------
class Impl final : public CublasLtLinear {
 public:
  Impl(const LinearWeights& w, DType act, int device, bool check_capability, bool plan_now)
      : name_(w.name), act_(act), device_(device), n_(w.out_features()), k_(w.in_features()) {
    NVFP4_CHECK(act == DType::BF16 || act == DType::F16,
                "cublaslt linear '" + name_ + "': activation dtype " + dtype_name(act) + ", expected BF16 or F16");
    NVFP4_CHECK(w.has_input_scale,
                "cublaslt linear '" + name_ + "': native W4A4 needs the input global scale, but the layer has none "
                "(W4A16 checkpoint)");
    NVFP4_CHECK(k_ > 0 && k_ % kGroupSize == 0 && n_ > 0,
                "cublaslt linear '" + name_ + "': shape (" + std::to_string(n_) + ", " + std::to_string(k_) +
                    "), expected N > 0 and K a positive multiple of 16");
    NVFP4_CHECK(w.input_global.enc > 0.0f && w.input_global.enc < 3.4e38f,
                "cublaslt linear '" + name_ + "': input global scale " + std::to_string(w.input_global.enc) +
                    " is not a finite positive number");
    if (check_capability) {
      std::string why;
      NVFP4_CHECK(native_fp4_available(device, &why), "cublaslt linear '" + name_ + "': " + why);
    }
    gs_enc_ = w.input_global.enc;
    alpha_ = native_alpha(w);
    kp_ = padded_k(k_);
    DeviceGuard g(device_);
    ctx_ = &context(device_);

    const Fp4Operand img = make_weight_operand(w.weight);
    rows_pad_ = img.rows_pad;
    w_codes_.upload(img.codes.data(), img.codes.size());
    w_scales_.upload(img.scales.data(), img.scales.size());
    const float consts[2] = {alpha_, 0.0f};  // alpha, beta for CUBLASLT_POINTER_MODE_DEVICE
    consts_.upload(consts, sizeof(consts));
    NVFP4_CHECK(w.bias.empty() || static_cast<int64_t>(w.bias.size()) == n_,
                "cublaslt linear '" + name_ + "': bias has " + std::to_string(w.bias.size()) + " values, expected " +
                    std::to_string(n_));
    cuda::upload_bias(w.bias, act, bias_);
    if (plan_now) {
      std::lock_guard<std::mutex> lock(ctx_->mu);
      plan(1, kAlign);  // fail at load, not at the first forward, when cuBLASLt has no algorithm
    }
  }

  ~Impl() override {
    for (auto& kv : plans_) kv.second.destroy();
  }

  int64_t out_features() const override { return n_; }
  int64_t in_features() const override { return k_; }

  void run(const void* x, int64_t m, void* y, void* stream_v) const override {
    if (m <= 0) return;
    NVFP4_CHECK(x && y, "cublaslt linear '" + name_ + "': null input or output pointer");
    cudaStream_t stream = static_cast<cudaStream_t>(stream_v);
    DeviceGuard g(device_);
    std::lock_guard<std::mutex> lock(ctx_->mu);
    const Plan& p = plan(m, alignment_of(y));
    const Workspace ws = prepare(x, m, stream, p.staged ? staging_bytes(p) : 0);
    void* d = y;
    if (p.staged) d = ws.staging;
    const void* a_scale = w_scales_.p;
    const void* b_scale = ws.x_scales;
    LT_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof(a_scale)));
    LT_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof(b_scale)));
    const float* consts = reinterpret_cast<const float*>(consts_.p);
    const void* alpha = p.device_scalars ? static_cast<const void*>(consts) : static_cast<const void*>(&alpha_);
    const void* beta = p.device_scalars ? static_cast<const void*>(consts + 1) : static_cast<const void*>(&kZero);
    const DeviceBuffer& lt_ws = ctx_->buffers(stream).workspace;
    LT_CHECK(cublasLtMatmul(ctx_->handle, p.desc, alpha, w_codes_.p, p.a, ws.x_codes, p.b, beta, d, p.d, d, p.d,
                            &p.algo, lt_ws.p, lt_ws.bytes, stream));
    const float* bias = bias_.p;
    if (p.staged) {
      launch_finish(act_, d, p.rows, y, m, n_, bias, stream);
    } else if (bias) {
      launch_finish(act_, y, n_, y, m, n_, bias, stream);
    }
  }

  // ---- test hooks ----
  internal::OperandImages images(const void* x, int64_t m) const {
    DeviceGuard g(device_);
    std::lock_guard<std::mutex> lock(ctx_->mu);
    const Workspace ws = prepare(x, m, nullptr, 0);
    LT_CUDA(cudaDeviceSynchronize());
    internal::OperandImages o;
    o.rows_pad = round_up(m, kRowAlign);
    o.cols_pad = kp_;
    o.w_codes.resize(w_codes_.bytes);
    o.w_scales.resize(w_scales_.bytes);
    LT_CUDA(cudaMemcpy(o.w_codes.data(), w_codes_.p, w_codes_.bytes, cudaMemcpyDeviceToHost));
    LT_CUDA(cudaMemcpy(o.w_scales.data(), w_scales_.p, w_scales_.bytes, cudaMemcpyDeviceToHost));
    o.x_codes.resize(static_cast<size_t>(m * (kp_ / 2)));
    o.x_scales.resize(static_cast<size_t>(swizzled_bytes(m, k_ / kGroupSize)));
    LT_CUDA(cudaMemcpy(o.x_codes.data(), ws.x_codes, o.x_codes.size(), cudaMemcpyDeviceToHost));
    LT_CUDA(cudaMemcpy(o.x_scales.data(), ws.x_scales, o.x_scales.size(), cudaMemcpyDeviceToHost));
    return o;
  }
  void plan_only(int64_t m) const {
    DeviceGuard g(device_);
    std::lock_guard<std::mutex> lock(ctx_->mu);
    plan(m, kAlign);
  }

 private:
  static constexpr float kZero = 0.0f;

  struct Workspace {
    uint8_t* x_codes = nullptr;   // (round_up(m,128), Kp/2)
    uint8_t* x_scales = nullptr;  // swizzled_bytes(m, K/16)
    void* staging = nullptr;      // (plan tokens, plan rows) T, for staged plans
  };

  static size_t alignment_of(const void* p) {
    const uintptr_t v = reinterpret_cast<uintptr_t>(p);
    size_t a = kAlign;
    while (a > 1 && v % a) a /= 2;
    return a;
  }

  // Bytes of the staging output of a staged plan: D is (tokens, rows) in T.
  static size_t staging_bytes(const Plan& p) { return static_cast<size_t>(p.tokens * p.rows) * 2; }

  // Quantizes x into the padded activation image (per-device workspace), which also holds `stage` bytes of
  // staging output. Caller holds ctx_->mu.
  Workspace prepare(const void* x, int64_t m, cudaStream_t stream, size_t stage) const {
    const int64_t mp = round_up(m, kRowAlign);
    const size_t codes_bytes = align_up(static_cast<size_t>(mp * (kp_ / 2)));
    const size_t scales_bytes = align_up(static_cast<size_t>(swizzled_bytes(m, k_ / kGroupSize)));
    const size_t tight_bytes = kp_ != k_ ? align_up(static_cast<size_t>(m * (k_ / 2))) : 0;
    const size_t stage_bytes = align_up(stage);
    uint8_t* base = ctx_->buffers(stream).scratch_at_least(codes_bytes + scales_bytes + tight_bytes + stage_bytes);
    Workspace ws;
    ws.x_codes = base;
    ws.x_scales = base + codes_bytes;
    uint8_t* tight = base + codes_bytes + scales_bytes;
    ws.staging = tight + tight_bytes;
    if (kp_ == k_) {
      cuda::quantize_activations(x, act_, m, k_, gs_enc_, ws.x_codes, ws.x_scales, cuda::ScaleLayout::Swizzled128x4,
                                 stream);
    } else {
      // K is not a multiple of 64: quantize into a tight (m, K/2) buffer, then lay the rows out at the padded
      // stride Kp/2 with zero codes in the padding (whose scales the quantizer wrote as 0).
      cuda::quantize_activations(x, act_, m, k_, gs_enc_, tight, ws.x_scales, cuda::ScaleLayout::Swizzled128x4,
                                 stream);
      LT_CUDA(cudaMemcpy2DAsync(ws.x_codes, kp_ / 2, tight, k_ / 2, k_ / 2, m, cudaMemcpyDeviceToDevice, stream));
      LT_CUDA(cudaMemset2DAsync(ws.x_codes + k_ / 2, kp_ / 2, 0, (kp_ - k_) / 2, m, stream));
    }
    return ws;
  }

  // Builds one configuration and asks the heuristic for an algorithm; false when cuBLASLt has none.
  bool try_plan(int64_t rows, int64_t tokens, bool staged, bool device_scalars, size_t d_align, Plan* out,
                std::string* status) const {
    Plan p;
    p.rows = rows;
    p.tokens = tokens;
    p.staged = staged;
    p.device_scalars = device_scalars;
    *status = make_descriptors(act_, kp_, w_scales_.p, &p);
    if (!status->empty()) return false;
    auto done = [&](cublasStatus_t s, const char* what) {
      if (s == CUBLAS_STATUS_SUCCESS) return false;
      *status = std::string(what) + ": " + cublasLtGetStatusName(s);
      p.destroy();
      return true;
    };
    cublasLtMatmulPreference_t pref = nullptr;
    if (done(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate")) return false;
    const uint64_t ws_bytes = kWorkspaceBytes;  // every stream's cuBLASLt workspace has this size
    const uint32_t c_align = static_cast<uint32_t>(d_align);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &c_align, sizeof(c_align));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &c_align, sizeof(c_align));
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    const cublasStatus_t s =
        cublasLtMatmulAlgoGetHeuristic(ctx_->handle, p.desc, p.a, p.b, p.d, p.d, pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS || found == 0) {
      *status = s != CUBLAS_STATUS_SUCCESS ? std::string("heuristic: ") + cublasLtGetStatusName(s)
                                           : std::string("heuristic: no algorithm");
      p.destroy();
      return false;
    }
    p.algo = res.algo;
    *out = p;
    return true;
  }

  // The plan for m tokens and an output pointer aligned to y_align bytes (cached). Caller holds ctx_->mu.
  const Plan& plan(int64_t m, size_t y_align) const {
    const bool direct_ok = y_align >= 16 && n_ % 8 == 0;
    const auto key = std::make_pair(m, direct_ok);
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second;
    if (plans_.size() >= 512) {  // many distinct prompt lengths: start over rather than grow without bound
      for (auto& kv : plans_) kv.second.destroy();
      plans_.clear();
    }
    struct Try {
      int64_t rows, tokens;
      bool staged, device_scalars;
      size_t align;
    };
    std::vector<Try> tries;
    if (direct_ok) {
      tries.push_back({n_, m, false, true, y_align});
      tries.push_back({n_, m, false, false, y_align});
    }
    // Staged: N and m rounded up to 16, then to the 128 of the scale tiles (the operand images and the
    // activation workspace already have that many rows, so no plan reads outside them).
    for (int64_t a : {int64_t(16), kRowAlign})
      for (bool dev : {true, false}) tries.push_back({round_up(n_, a), round_up(m, a), true, dev, kAlign});
    std::string tried;
    for (const Try& t : tries) {
      Plan p;
      std::string status;
      if (try_plan(t.rows, t.tokens, t.staged, t.device_scalars, t.align, &p, &status))
        return plans_.emplace(key, p).first->second;
      tried += std::string(tried.empty() ? "" : "; ") + "D " + std::to_string(t.rows) + "x" +
               std::to_string(t.tokens) + (t.staged ? " staged" : " direct") +
               (t.device_scalars ? ", device alpha" : ", host alpha") + " -> " + status;
    }
    const DeviceInfo dev = query_device(device_);
    fail("cublaslt linear '" + name_ + "': cuBLASLt " + cublaslt_version_string(static_cast<int64_t>(cublasLtGetVersion())) +
         " has no FP4 block-scaled GEMM algorithm for N=" + std::to_string(n_) + ", K=" + std::to_string(k_) +
         " (padded " + std::to_string(kp_) + "), m=" + std::to_string(m) + " on " + dev.describe() + " (tried: " +
         tried + ")");
  }

  std::string name_;
  DType act_;
  int device_;
  int64_t n_, k_, kp_ = 0, rows_pad_ = 0;
  float gs_enc_ = 1.0f, alpha_ = 1.0f;
  DeviceContext* ctx_ = nullptr;
  DeviceBuffer w_codes_, w_scales_, consts_;
  cuda::DeviceBuffer<float> bias_;  // (N,) f32 values of T, or none
  mutable std::map<std::pair<int64_t, bool>, Plan> plans_;
};

}  // namespace

bool native_fp4_available(int device, std::string* why) {
  const Capability c = native_fp4_capability(query_device(device), query_build());
  if (why) *why = c.ok ? std::string() : c.full;
  return c.ok;
}

std::unique_ptr<CublasLtLinear> CublasLtLinear::create(const LinearWeights& w, DType act, int device) {
  return std::make_unique<Impl>(w, act, device, /*check_capability=*/true, /*plan_now=*/true);
}

namespace internal {

std::unique_ptr<CublasLtLinear> create_unchecked(const LinearWeights& w, DType act, int device, bool plan_now) {
  return std::make_unique<Impl>(w, act, device, /*check_capability=*/false, plan_now);
}

OperandImages prepare_for_test(const CublasLtLinear& layer, const void* x, int64_t m) {
  return dynamic_cast<const Impl&>(layer).images(x, m);
}

void plan_for_test(const CublasLtLinear& layer, int64_t m) { dynamic_cast<const Impl&>(layer).plan_only(m); }

std::string check_descriptors(DType act, int64_t k, int64_t rows, int64_t tokens, bool device_scalars) {
  Plan p;
  p.rows = rows;
  p.tokens = tokens;
  p.device_scalars = device_scalars;
  static const uint8_t dummy[16] = {};
  const std::string err = make_descriptors(act, padded_k(k), dummy, &p);
  p.destroy();
  return err;
}

}  // namespace internal

}  // namespace nvfp4::cublaslt
