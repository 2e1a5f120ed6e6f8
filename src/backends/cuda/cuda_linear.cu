// CudaLinear: one NVFP4 linear prepared on a CUDA device (weights in the fragment order of
// weight_layout.h, uploaded once) and the dispatch between the fused kernel (small M) and the large-M path
// (weight tiles dequantized into a bounded workspace, then cuBLAS with f32 compute).
#include "backends/cuda/cuda_util.cuh"
#include <cublas_v2.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_linear.h"
#include "backends/cuda/device_buffer.cuh"
#include "backends/cuda/cuda_linear_internal.h"
#include "backends/cuda/dequant_bits.h"
#include "backends/cuda/device/capability.h"
#include "backends/cuda/device/device_info.h"
#include "backends/cuda/gemm.cuh"
#include "backends/cuda/quantize.cuh"
#include "backends/cuda/vllm_weights.h"
#include "backends/cuda/weight_layout.h"
#include "format/numerics.h"

namespace nvfp4::cuda {

using detail::ceil_div;
using detail::check_cuda;

// The rule is capability.h's (the one linear/select dispatches by), asked about this device and this binary.
bool kernels_available(int device, std::string* why) {
  const Capability c = cuda_kernels_capability(query_device(device), query_build());
  if (why) *why = c.ok ? std::string() : c.full;
  return c.ok;
}

namespace {

std::atomic<bool> g_programmatic{true};
bool programmatic_launch_enabled() { return g_programmatic.load(std::memory_order_relaxed); }

constexpr int64_t kWeightChunkBytes = 64ll << 20;  // bound of the dequantized weight tile workspace
// W4A4 at M = 1: the most shared memory a block of the decode kernel takes for quantizing the row itself (its
// warps' K ranges of dequantized values; 32 KB: 3 blocks per SM with the kernels' own 4-16 KB).
constexpr int64_t kRowQuantMaxSmem = 32 << 10;
// ... and the most activation values its blocks quantize per SM (every block quantizes the whole row, split over
// its K ranges): measured (docs/PERF.md, change 64) faster than the quantizer kernel before the GEMM at 7.9k
// (4096x4096, 0.6-0.8 µs of 6.5-8.1) and 11.9k (6144x4096, 0.3-0.5 µs), slower at 13.9k (28672x4096, 0.5-0.9
// µs of 21.7) and above (4096x14336 27.8k, 10240x8192 19.9k, 57344x8192 55.6k: 0.7-6.1 µs); ~1 µs per 10k.
constexpr int64_t kRowQuantMaxValuesPerSm = 12288;


template <typename P>
using DevBuf = DeviceBuffer<P>;

// Transient device memory, stream-ordered (cudaMallocAsync from the device's pool: capturable in CUDA
// graphs, reused without synchronisation, safe for layers running on different streams).
struct StreamBuf {
  void* p = nullptr;
  cudaStream_t stream;
  StreamBuf(size_t bytes, cudaStream_t s) : stream(s) { check_cuda(cudaMallocAsync(&p, bytes, s), "cudaMallocAsync"); }
  ~StreamBuf() {
    if (p) cudaFreeAsync(p, stream);
  }
  StreamBuf(const StreamBuf&) = delete;
  StreamBuf& operator=(const StreamBuf&) = delete;
  uint8_t* get() const { return static_cast<uint8_t*>(p); }
};

// Keep freed stream-ordered memory cached in the device's pool (the workspaces come back every call).
void keep_pool_memory(int device) {
  static std::mutex mu;
  static std::vector<int> done;
  std::lock_guard<std::mutex> lock(mu);
  if (std::find(done.begin(), done.end(), device) != done.end()) return;
  cudaMemPool_t pool;
  check_cuda(cudaDeviceGetDefaultMemPool(&pool, device), "cudaDeviceGetDefaultMemPool");
  uint64_t keep = 2ull << 30;
  check_cuda(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), "cudaMemPoolSetAttribute");
  done.push_back(device);
}

// A device buffer per (device, stream) for the whole process, of one kind (Tag), allocated at its first use
// on that stream; null while the stream is being captured into a CUDA graph and the buffer does not exist yet
// (cudaMalloc cannot be captured). Calls on one stream are ordered, so the layers using a kind share it; `mu`
// is for callers whose use spans several kernels (another thread on the same stream must not enqueue its
// own use in between).
struct PerStreamBuffer {
  void* p = nullptr;
  std::mutex mu;
};
template <typename Tag>
PerStreamBuffer* per_stream_buffer(int device, cudaStream_t stream, size_t bytes, const char* what,
                                   bool zero = false) {
  static std::mutex mu;
  static std::map<std::pair<int, cudaStream_t>, PerStreamBuffer> spaces;  // nodes never move
  std::lock_guard<std::mutex> lock(mu);
  PerStreamBuffer& b = spaces[{device, stream}];
  if (!b.p) {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    check_cuda(cudaStreamIsCapturing(stream, &st), "cudaStreamIsCapturing");
    if (st != cudaStreamCaptureStatusNone) return nullptr;
    check_cuda(cudaMalloc(&b.p, bytes), what);
    if (zero) check_cuda(cudaMemsetAsync(b.p, 0, bytes, stream), what);  // before any kernel of the stream uses it
  }
  return &b;
}

// cuBLAS workspace (as PyTorch has one per stream): no two GEMMs use it at once (BlasHandle::mu is held
// while a call enqueues its GEMMs). Allocated at the first large-M call on a stream, which therefore must not
// be inside a CUDA graph capture.
constexpr size_t kBlasWorkspaceBytes = 32u << 20;
struct BlasWorkspaceTag {};
void* blas_workspace(int device, cudaStream_t stream) {
  PerStreamBuffer* b =
      per_stream_buffer<BlasWorkspaceTag>(device, stream, kBlasWorkspaceBytes, "cudaMalloc (cuBLAS workspace)");
  NVFP4_CHECK(b, "cuda linear: first large-M call on a stream while capturing a CUDA graph; run one call on "
                 "that stream before capturing");
  return b->p;
}

// W4A4 decode sizes (M <= 32): the dequantized activations go to a buffer per (device, stream) instead of a
// stream-ordered allocation, whose graph node would stand between the previous kernel and the quantizer and
// keep the quantizer from being launched programmatically. The quantizer waits for the kernel before it (the
// previous layer's GEMM may still be reading the buffer) before writing; a call holds the buffer's mutex
// from its quantizer's launch to its GEMM's, so that a call from another thread on the same stream cannot
// write the buffer in between. Null: those calls allocate as before.
constexpr size_t kDecodeActBytes = 4u << 20;  // 32 rows of K <= 65536
struct DecodeActTag {};
PerStreamBuffer* decode_act_buffer(int device, cudaStream_t stream) {
  return per_stream_buffer<DecodeActTag>(device, stream, kDecodeActBytes, "cudaMalloc (decode activation buffer)");
}

// The decode kernel's tail split (decode_grid, rule 13): per (device, stream), kSplitCounters counters (zero
// between calls: each group's last part resets its own) and then the parts' slots. Null while capturing before the
// stream's first call that splits: such a call runs its grid unsplit.
constexpr size_t kSplitCounters = 4096, kSplitBytes = 4u << 20;
// Whether grid g splits (decode_grid) and its groups' counters and slots fit the workspace.
bool split_fits(const DecodeGrid& g) {
  if (g.split_parts < 2) return false;
  const int64_t groups = g.split_rows * (detail::decode_block_warps(g.wk) / g.wk);  // tile groups of those rows
  const size_t slot_bytes =
      static_cast<size_t>(groups) * g.split_parts * detail::split_slot_floats(g.nw, g.nt) * sizeof(float);
  return static_cast<size_t>(groups) <= kSplitCounters && kSplitCounters * sizeof(unsigned) + slot_bytes <= kSplitBytes;
}
struct SplitTag {};
PerStreamBuffer* split_buffer(int device, cudaStream_t stream) {
  return per_stream_buffer<SplitTag>(device, stream, kSplitBytes, "cudaMalloc (decode split workspace)", true);
}

// cuBLAS handle, one per device for the whole process (a model has hundreds of layers; each handle holds
// device memory and library state). Created with the math mode once; the stream and the workspace are set
// per call by whoever holds `mu`, which stays held for the whole GEMM loop so that calls from several
// threads never interleave one's set-stream with another's GEMMs. Never destroyed: layers may outlive
// static destructors.
struct BlasHandle {
  std::mutex mu;
  cublasHandle_t handle = nullptr;
};
// Caller has `device` current (cublasCreate binds the handle to it). `who` names the caller in errors.
BlasHandle& blas_handle(int device, const std::string& who) {
  static std::mutex mu;
  static auto* handles = new std::map<int, BlasHandle*>();
  std::lock_guard<std::mutex> lock(mu);
  BlasHandle*& b = (*handles)[device];
  if (!b) {
    cublasHandle_t h = nullptr;
    cublasStatus_t st = cublasCreate(&h);
    NVFP4_CHECK(st == CUBLAS_STATUS_SUCCESS, who + ": cublasCreate failed on device " + std::to_string(device) +
                                                 " (status " + std::to_string(static_cast<int>(st)) + ")");
    // Split-K partial sums must stay in f32: by default cuBLAS may reduce them in the 16-bit output type,
    // which breaks the f32-accumulation bound of docs/TESTING.md.
    st = cublasSetMathMode(h, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                                       CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
    if (st != CUBLAS_STATUS_SUCCESS) {
      cublasDestroy(h);
      fail(who + ": cublasSetMathMode failed (status " + std::to_string(static_cast<int>(st)) + ")");
    }
    b = new BlasHandle;
    b->handle = h;
  }
  return *b;
}

class CudaLinearImpl final : public CudaLinear {
 public:
  CudaLinearImpl(const LinearWeights& w, const FragmentWeights* prepared, Semantics s, DType act, int device)
      : sem_(s), act_(act), device_(device) {
    NVFP4_CHECK(act == DType::BF16 || act == DType::F16,
                "cuda linear '" + w.name + "': activation dtype " + dtype_name(act) + ", expected BF16 or F16");
    NVFP4_CHECK(s == Semantics::W4A16 || w.has_input_scale,
                "cuda linear '" + w.name + "': semantics " + semantics_name(s) +
                    " needs an input global scale, and the layer has none");
    NVFP4_CHECK(w.weight.rows > 0 && w.weight.rows < (1 << 30) && w.weight.cols > 0 && w.weight.cols < (1 << 30),
                "cuda linear '" + w.name + "': bad weight shape (" + std::to_string(w.weight.rows) + ", " +
                    std::to_string(w.weight.cols) + ")");
    NVFP4_CHECK(w.bias.empty() || static_cast<int64_t>(w.bias.size()) == w.weight.rows,
                "cuda linear '" + w.name + "': bias has " + std::to_string(w.bias.size()) + " values, expected " +
                    std::to_string(w.weight.rows));
    if (s != Semantics::W4A16)
      NVFP4_CHECK(w.input_global.enc > 0.0f && std::isfinite(w.input_global.enc),
                  "cuda linear '" + w.name + "': input global scale " + std::to_string(w.input_global.enc) +
                      " is not finite positive");
    std::string why;
    NVFP4_CHECK(kernels_available(device, &why), "cuda linear '" + w.name + "': " + why);
    const DeviceGuard guard(device);

    FragmentWeights own;
    if (!prepared) own = make_fragment_weights(w.weight, act);
    const FragmentWeights& f = prepared ? *prepared : own;
    NVFP4_CHECK(f.n == w.weight.rows && f.k == w.weight.cols, "cuda linear '" + w.name + "': prepared weight shape mismatch");
    NVFP4_CHECK(f.act == act, "cuda linear '" + w.name + "': prepared weight laid out for " + dtype_name(f.act) +
                                  " activations, the layer runs " + dtype_name(act));
    // The kernels build exact scale registers with integer operations, which read a NaN scale as a number.
    const auto nan_scales = std::count_if(f.scales.begin(), f.scales.end(), [](uint8_t b) { return (b & 0x7F) == 0x7F; });
    NVFP4_CHECK(nan_scales == 0, "cuda linear '" + w.name + "': weight_scale holds " + std::to_string(nan_scales) +
                                     " NaN values (e4m3 0x7F/0xFF)");
    n_ = f.n;
    k_ = f.k;
    n16_ = f.n16;
    kc_ = f.kc;
    wq_.upload(f.codes.data(), f.codes.size());
    ws_.upload(f.scales.data(), f.scales.size());
    upload_bias(w.bias, act, bias_);
    w_dec_ = w.weight.global.dec;
    x_enc_ = w.input_global.enc;
    out_factor_ = linear_output_factor(w, s);
    if (s == Semantics::W4A4_VLLM) vllm_ = vllm_pow2_plan(act, w_dec_, f.scales.data(), f.scales.size());
    if (s != Semantics::W4A16) {  // the decode kernel's own quantization reads them (launch_group_factor_table)
      x_factors_.alloc(detail::kGroupFactors * sizeof(float2));
      detail::launch_group_factor_table(x_enc_, s == Semantics::W4A4_VLLM, x_factors_.p, nullptr);
      check_cuda(cudaStreamSynchronize(nullptr), "group factor table");
    }
    check_cuda(cudaGetLastError(), "upload");
    blas_ = &blas_handle(device, "cuda linear '" + w.name + "'");

    set_tile_rows(0);
    check_cuda(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
    check_cuda(cudaDeviceGetAttribute(&smem_per_sm_, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device),
               "cudaDeviceGetAttribute");
    int mem_khz = 0, bus_bits = 0;
    check_cuda(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, device), "cudaDeviceGetAttribute");
    check_cuda(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device), "cudaDeviceGetAttribute");
    default_rule_ = default_grid_rule(2.0 * mem_khz * 1e3 * bus_bits / 8.0 / std::max(sms_, 1));
    wgmma_ = detail::wgmma_available(device);
    programmatic_ = programmatic_launch_supported(device);
    set_fused_max_m(-1);
    set_wgmma_from(0);
    keep_pool_memory(device);
  }
  void set_tile_rows(int rows) {
    NVFP4_CHECK(rows >= 0 && rows % 16 == 0, "cuda linear: weight tile rows " + std::to_string(rows) +
                                                 " must be a positive multiple of 16 (0: the default)");
    if (rows == 0) rows = static_cast<int>(std::max<int64_t>(128, kWeightChunkBytes / (2 * k_) / 128 * 128));
    chunk_rows_ = static_cast<int>(std::min<int64_t>(rows, n16_ * 16));
  }
  void set_grid_rule(int r) { grid_rule_ = r; }
  void set_wgmma_from(int64_t m) {
    wgmma_from_ = m > 0 ? std::max<int64_t>(m, 17) : default_wgmma_from(sem_, n_, k_, sms_);
  }
  void set_raw_x(int mode) { raw_x_ = mode < 0 ? -1 : mode > 0 ? 1 : 0; }
  // The grid rule in force (set_fused_grid_rule's, or the default).
  int grid_rule() const { return grid_rule_ < 0 ? default_rule_ : grid_rule_; }
  // The decode kernel's grid rule: rules 9 and 12 differ from 7 and 11 only in the wgmma kernel's grids.
  int decode_rule() const { return grid_rule() == 9 ? 7 : grid_rule() == 12 ? 11 : grid_rule(); }

  // Whether a call of m rows runs the decode kernel (fused, and not the wgmma kernel).
  bool decode_at(int64_t m) const { return m > 0 && uses_fused(m) && !wgmma_at(m); }
  // The decode kernel's grid for m rows under the rule in force, in the layer's weight mode.
  DecodeGrid decode_grid_at(int64_t m) const { return decode_grid_for(m, weight_mode()); }
  // ... in weight mode `mode`: the forced grid where one is set (set_forced_decode_grid), else the rule's.
  DecodeGrid decode_grid_for(int64_t m, detail::Mode mode) const {
    if (forced_grid_.nw > 0) return forced_decode_grid(m, n16_, kc_, sms_, forced_grid_, k_ % 64 != 0);
    return decode_grid(m, n16_, kc_, sms_, decode_rule(), mode, k_ % 64 != 0);
  }
  void set_forced_grid(const ForcedDecodeGrid& g) { forced_grid_ = g; }
  void set_own_quant(int on) { own_quant_ = on; }
  // W4A4 at M = 1: whether the decode kernel quantizes the row itself (GemmParams::x_gs) instead of a quantizer
  // kernel before it (row_quant_pays).
  bool row_quant(int64_t m) const {
    if (m != 1 || own_quant_ == 0) return false;
    return row_quant_pays(decode_grid_at(m), kc_, sms_);
  }
  // W4A4: whether the wgmma kernel's activation permutation quantizes them (set_own_quant).
  bool wgmma_quant(int64_t m) const { return wgmma_at(m) && own_quant_ != 0; }
  bool own_quant(int64_t m) const { return row_quant(m) || wgmma_quant(m); }

  // rb0 counts blocks of the rows a call takes: here it must lie inside the layer in the smallest blocks (128
  // rows; checked as a split whatever s is), and each call checks it again with its own block height.
  void set_splits(int s, int rb0) {
    NVFP4_CHECK(detail::wgmma_split_inside(2, rb0, 128, n_),
                "cuda linear: first split block " + std::to_string(rb0) + " outside the " + std::to_string(n_) + " rows");
    forced_splits_ = std::max(0, s);
    forced_split_rb0_ = rb0;
  }
  // m < 0: the default crossovers; else every M up to m on the fused kernels and none above.
  void set_fused_max_m(int64_t m) {
    fused_max_m_ = m < 0 ? default_fused_max_m(sem_, n_, k_, wgmma_) : m;
    full_round_max_m_ = m < 0 ? default_full_round_max_m(sem_, n_, k_, wgmma_) : 0;
  }
  bool uses_fused(int64_t m) const {
    return fused_kernel_at(m, fused_max_m_, full_round_max_m_, n_, n16_, kc_, sms_);
  }
  const VllmPow2Plan& vllm_plan() const { return vllm_; }
  int64_t fused_max_m() const { return fused_max_m_; }
  Semantics semantics() const override { return sem_; }
  int64_t out_features() const override { return n_; }
  int64_t in_features() const override { return k_; }

  void run(const void* x, int64_t m, void* y, void* stream_v) const override {
    run_impl(x, m, y, stream_v, Epilogue::Store);
  }
  bool epilogue_in_kernel(Epilogue e, int64_t m) const override {
    if (e == Epilogue::Store) return true;
    if (!decode_at(m) || (e == Epilogue::Swiglu && n_ % 16 != 0)) return false;
    return detail::has_epilogue_form(decode_grid_at(m).nt, static_cast<int>(weight_mode()));
  }
  void run_epilogue(Epilogue e, const void* x, int64_t m, void* out, void* stream_v) const override {
    NVFP4_CHECK(epilogue_in_kernel(e, m), "cuda linear: no " +
                                              std::string(e == Epilogue::Swiglu ? "SwiGLU" : "residual") +
                                              " epilogue for M = " + std::to_string(m) + " and N = " +
                                              std::to_string(n_) +
                                              " (the decode kernel's at M <= 8; SwiGLU: N a multiple of 16)");
    run_impl(x, m, out, stream_v, e);
  }

 private:
  // The calls of M >= wgmma_from_ (default_wgmma_from) that the fused path runs on the wgmma kernel (grid rules 3
  // and up, sm_90a).
  bool wgmma_at(int64_t m) const { return m >= wgmma_from_ && grid_rule() >= 3 && wgmma_; }

  void run_impl(const void* x, int64_t m, void* y, void* stream_v, Epilogue e) const {
    NVFP4_CHECK(m >= 0, "cuda linear: negative M " + std::to_string(m));
    if (m == 0) return;
    NVFP4_CHECK(m < (1ll << 31), "cuda linear: M " + std::to_string(m) + " too large");
    NVFP4_CHECK(x && y, "cuda linear: null x or y");
    NVFP4_CHECK(reinterpret_cast<uintptr_t>(x) % 16 == 0,
                "cuda linear: x must be 16-byte aligned (rows of K = " + std::to_string(k_) + " values)");
    cudaStream_t stream = static_cast<cudaStream_t>(stream_v);
    const DeviceGuard guard(device_);
    std::lock_guard<std::mutex> lock(mu_);
    detail::GemmParams p = params(m, y);
    p.swiglu = e == Epilogue::Swiglu;
    if (e == Epilogue::AddToResidual) {
      p.residual = static_cast<float*>(y);
      p.y = nullptr;
    }
    const bool large = !uses_fused(m);
    if (sem_ == Semantics::W4A16) {
      if (large) return run_large(static_cast<const uint8_t*>(x), m, y, stream);
      p.x = x;
      p.out_scale = out_factor_ * weight_unscale();
      return fused(p, detail::Mode::Exact, false, stream);
    }
    // W4A4: the activations are quantized and written back dequantized (exact e2m1·sx, or vLLM's
    // T(e2m1·f32(sx/gs_x))), so both paths multiply T operands equal to the ones the semantics defines.
    const bool vllm = sem_ == Semantics::W4A4_VLLM;
    if (!large && wgmma_quant(m)) {  // the wgmma kernel's permutation quantizes them on the way
      p.x = x;
      p.out_scale = out_factor_ * weight_unscale();
      return wgmma(p, weight_mode(), grid_rule(), x_enc_, stream);
    }
    if (!large && row_quant(m)) {
      p.x = x;
      p.x_gs = x_enc_;
      p.x_factors = x_factors_.p;
      p.out_scale = out_factor_ * weight_unscale();
      return fused(p, weight_mode(), false, stream);
    }
    const size_t deq_bytes = static_cast<size_t>(m * k_ * 2);
    PerStreamBuffer* shared = !large && m <= detail::kQuadMaxRows && deq_bytes <= kDecodeActBytes
                                  ? decode_act_buffer(device_, stream)
                                  : nullptr;
    std::unique_lock<std::mutex> shared_lock;  // held until this call's GEMM is enqueued
    if (shared) shared_lock = std::unique_lock<std::mutex>(shared->mu);
    std::optional<StreamBuf> own;
    if (!shared) own.emplace(deq_bytes, stream);
    void* deq = shared ? shared->p : own->get();
    // Launched programmatically where its grid is small (<= 32 blocks): measured faster at M = 1 on every layer
    // (4-28 blocks: 4096x4096 w4a4 6.9 -> 6.4 µs), slower at M = 16 on the small ones (64-224 blocks: 6144x4096
    // 9.0 -> 10.0; docs/PERF.md, change 49).
    const bool programmatic_quantizer =
        shared && p.programmatic && detail::quantize_dequant_quad_blocks(m, k_) <= 32;
    detail::launch_quantize_dequant(x, act_, m, k_, x_enc_, vllm, deq, programmatic_quantizer, stream);
    if (large) return run_large(static_cast<const uint8_t*>(deq), m, y, stream);
    p.x = deq;
    p.out_scale = out_factor_ * weight_unscale();
    fused(p, weight_mode(), true, stream);
  }

  detail::GemmParams params(int64_t m, void* y) const {
    detail::GemmParams p;
    p.wq = reinterpret_cast<const uint4*>(wq_.p);
    p.ws = reinterpret_cast<const uint16_t*>(ws_.p);
    p.y = y;
    p.bias = bias_.p;
    p.m = m;
    p.n = static_cast<int>(n_);
    p.k = static_cast<int>(k_);
    p.n16 = static_cast<int>(n16_);
    p.kc = static_cast<int>(kc_);
    p.w_dec = weight_mode() == detail::Mode::VllmPow2 ? vllm_.w_dec : w_dec_;
    // The fused kernels may start (and stream their first weights) while the previous kernel in the stream
    // (the W4A4 quantizer, the kernel that wrote x, or the previous layer) still runs.
    p.programmatic = programmatic_ && programmatic_launch_enabled();
    return p;
  }

  // after_quantizer: the previous kernel is this call's (short) W4A4 activation quantizer.
  void fused(detail::GemmParams& p, detail::Mode mode, bool after_quantizer, cudaStream_t stream) const {
    const int rule = grid_rule();
    if (wgmma_at(p.m)) return wgmma(p, mode, rule, 0.0f, stream);
    const DecodeGrid g = decode_grid_for(p.m, mode);
    p.wk = g.wk;
    // Programmatic launch only for grids of >= 80% of a wave, or behind the quantizer: the blocks scheduled
    // early take the slots that free up first, so a shorter grid behind a full one ends up unevenly spread
    // over the SMs (256 blocks on 396 slots, 4096x4096 at M = 1 behind another layer: 6.2 -> 6.8 µs; change 19),
    // while grids of 81-85% gained from it (10240x8192 at M = 1, 28672x4096 at M = 1 and 16: 0.4-0.6 µs; change
    // 38; docs/PERF.md). A grid of 90-100% of 2 blocks per SM on a kernel that fits 3 asks for unused shared
    // memory that leaves room for only 2 per SM, which spreads it evenly with the early launch kept (change 35).
    int64_t slots = g.slots;
    if (smem_per_sm_ > 0 && g.slots == 3ll * sms_ && g.blocks <= 2ll * sms_ && 10 * g.blocks >= 9 * 2ll * sms_) {
      p.dyn_smem = (smem_per_sm_ / 3 + 1023) / 1024 * 1024;  // 3 blocks need more than the SM has
      slots = 2ll * sms_;
    }
    if (!after_quantizer && 5 * g.blocks < 4 * slots) p.programmatic = false;
    if (split_fits(g)) {  // the tail split
      PerStreamBuffer* b = split_buffer(device_, stream);
      if (b) {
        p.split_parts = g.split_parts;
        p.split_rows = static_cast<int>(g.split_rows);
        p.split_from = static_cast<int>(g.blocks - g.split_rows * g.split_parts);
        p.split_count = static_cast<unsigned*>(b->p);
        p.split_slots = reinterpret_cast<float*>(static_cast<unsigned*>(b->p) + kSplitCounters);
      }
    }
    if (p.x_gs > 0.0f)  // the decode kernel quantizes the row itself: its warps' K ranges in shared memory
      p.dyn_smem = std::max<int>(p.dyn_smem, static_cast<int>(detail::row_quant_smem_bytes(kc_, g.wk)));
    // the vLLM flavour's four-tile 16-token kernels: their warps' activation rings
    p.dyn_smem = std::max(p.dyn_smem, detail::act_ring_bytes(g.nt, g.nw, static_cast<int>(mode), g.wk));
    detail::launch_fused_gemm(p, act_, mode, g.nt, g.nw, g.light, stream);
  }

  // M >= wgmma_from_ (rule 3, sm_90a): the activations permuted into the wgmma kernel's K order and token tiles, then
  // that kernel; blocks of 256, 192 or 128 rows (wgmma_grid; rule 9 forces 128, 12 192, rules 4 and 5 256) and a K
  // split (wgmma_split: over every row block, or over those of a last partial round only) where wgmma_time_us estimates
  // them faster (W4A16: wgmma_call_us, which credits the grids that need no permutation kernel). Grids that
  // wgmma_raw_x_pays names permute the activations in the wgmma kernel instead (no permutation kernel;
  // set_wgmma_raw_x overrides). x_gs > 0 (W4A4): x is the raw input, which the permutation
  // kernel quantizes (global scale x_gs, the factors of x_factors_) as it permutes it.
  void wgmma(detail::GemmParams& p, detail::Mode mode, int rule, float x_gs, cudaStream_t stream) const {
    const int forced_rows = rule == 9 ? 128 : rule == 12 ? 192 : rule == 4 || rule == 5 ? 256 : 0;
    // W4A4 (x_gs > 0) always takes the permutation kernel, which quantizes as it permutes: the same in the kernel's
    // permuter made the permuter the bottleneck (docs/PERF.md, change 119).
    const bool own = !(x_gs > 0.0f) && raw_x_ != 0;  // may the kernel permute its own activations
    WgmmaGrid grid = forced_rows ? WgmmaGrid{forced_rows, wgmma_split(p.m, n_, n16_, kc_, sms_, forced_rows, own)}
                                 : wgmma_grid(p.m, n_, n16_, kc_, sms_, own);
    if (forced_splits_ > 0)
      grid.split = WgmmaSplit{static_cast<int>(std::min<int64_t>(forced_splits_, kc_)), forced_split_rb0_};
    const int rows = grid.rows;
    const WgmmaSplit sp = grid.split;
    p.wgmma_rows = rows;
    NVFP4_CHECK(detail::wgmma_split_inside(sp.splits, sp.split_rb0, rows, n_),
                "cuda linear: first split block " + std::to_string(sp.split_rb0) + " of " + std::to_string(rows) +
                    " rows outside the " + std::to_string(n_) + " rows");
    p.splits = sp.splits;
    p.split_rb0 = sp.splits > 1 ? sp.split_rb0 : 0;
    const int kt = wgmma_tile_tokens(p.m);
    p.wgmma_raw_x = detail::wgmma_raw_x_fits(rows, kt) && own &&
                    (raw_x_ >= 0 ? raw_x_ == 1 : wgmma_raw_x_pays(p.m, n16_, sms_, rows, sp));
    std::optional<StreamBuf> xp;  // the permuted activations, where the kernel does not permute them itself
    if (!p.wgmma_raw_x) {
      xp.emplace(static_cast<size_t>(detail::wgmma_x_bytes(p.m, static_cast<int>(kc_), kt)), stream);
      detail::launch_permute_activations(p.x, act_, p.m, static_cast<int>(k_), static_cast<int>(kc_), kt, x_gs,
                                         x_gs > 0.0f ? x_factors_.p : nullptr, xp->get(), p.programmatic, stream);
      p.x = xp->get();
    }
    std::unique_ptr<StreamBuf> part;
    if (p.splits > 1) {
      const int64_t cols = n_ - static_cast<int64_t>(p.split_rb0) * rows;  // the split blocks' columns
      part = std::make_unique<StreamBuf>(static_cast<size_t>(p.splits * p.m * cols * 4), stream);
      p.partial = reinterpret_cast<float*>(part->get());
    }
    detail::launch_wgmma_gemm(p, act_, mode, kt, wgmma_consumers(p.m, rule, rows), stream);
  }

  // How the kernels dequantize this layer's weights, and the power of two that undoes what they carry
  // (exact: e2m1·S·2^-c, undone by 2^c; vLLM per weight: T(e2m1·f32(S·D_w)) itself; vLLM power-of-two form:
  // those times 2^τ).
  detail::Mode weight_mode() const {
    if (sem_ != Semantics::W4A4_VLLM) return detail::Mode::Exact;
    return vllm_.ok ? detail::Mode::VllmPow2 : detail::Mode::Vllm;
  }
  float weight_unscale() const {
    const detail::Mode mode = weight_mode();
    return mode == detail::Mode::Exact ? product_unshift(act_) : mode == detail::Mode::VllmPow2 ? vllm_.unscale : 1.0f;
  }

  // y = T(out_factor_ · x_T · W_Tᵀ) through cuBLAS (f32 compute), weight tiles of chunk_rows_ rows dequantized
  // to T as weight_mode() says (the GEMM's factor out_factor_·weight_unscale(), a power of two), then the bias.
  // Weight tiles of chunk_rows_ rows are dequantized one after the other into one stream-ordered buffer,
  // each followed by its cuBLAS GEMM. (Dequantizing the next tile on a second stream was measured to give
  // nothing: the GEMM occupies every SM.)
  void run_large(const uint8_t* xt, int64_t m, void* y, cudaStream_t stream) const {
    detail::GemmParams p = params(m, y);
    StreamBuf wb(static_cast<size_t>(chunk_rows_) * k_ * 2, stream);
    uint8_t* wbuf = wb.get();
    std::lock_guard<std::mutex> lock(blas_->mu);  // until the last GEMM of this call is enqueued
    cublasStatus_t st = cublasSetStream(blas_->handle, stream);
    // After cublasSetStream: it resets the handle to cuBLAS's default workspace.
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasSetWorkspace(blas_->handle, blas_workspace(device_, stream), kBlasWorkspaceBytes);
    NVFP4_CHECK(st == CUBLAS_STATUS_SUCCESS, "cuda linear: setting the cuBLAS stream and workspace failed (status " +
                                                 std::to_string(static_cast<int>(st)) + ")");
    const cudaDataType_t dt = act_ == DType::BF16 ? CUDA_R_16BF : CUDA_R_16F;
    const float beta = 0.0f;
    const float alpha = out_factor_ * weight_unscale();
    for (int64_t n0 = 0; n0 < n_; n0 += chunk_rows_) {
      const int rows = static_cast<int>(std::min<int64_t>(chunk_rows_, n16_ * 16 - n0));
      detail::launch_dequant_weight(p, act_, weight_mode(), static_cast<int>(n0), rows, wbuf, stream);
      const int nn = static_cast<int>(std::min<int64_t>(rows, n_ - n0));
      uint8_t* yc = static_cast<uint8_t*>(y) + n0 * 2;
      st = cublasGemmEx(blas_->handle, CUBLAS_OP_T, CUBLAS_OP_N, nn, static_cast<int>(m), static_cast<int>(k_),
                        &alpha, wbuf, dt, static_cast<int>(k_), xt, dt, static_cast<int>(k_), &beta, yc, dt,
                        static_cast<int>(n_), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      NVFP4_CHECK(st == CUBLAS_STATUS_SUCCESS, "cuda linear: cublasGemmEx failed (status " +
                                                   std::to_string(static_cast<int>(st)) + ")");
    }
    if (bias_.p) detail::launch_add_bias(y, bias_.p, m, static_cast<int>(n_), act_, stream);
  }

  Semantics sem_;
  DType act_;
  int device_;
  int64_t n_ = 0, k_ = 0, n16_ = 0, kc_ = 0;
  int chunk_rows_ = 128;
  int64_t fused_max_m_ = 64, full_round_max_m_ = 0;
  float w_dec_ = 1.0f, x_enc_ = 1.0f;
  float out_factor_ = 1.0f;  // linear_output_factor (D_w, f32(D_x·D_w) or 1)
  VllmPow2Plan vllm_;        // w4a4-vllm: the power-of-two form's plan (vllm_weights.h)
  DevBuf<uint8_t> wq_, ws_;
  DevBuf<float> bias_;
  DevBuf<float2> x_factors_;  // W4A4: launch_group_factor_table's table for x_enc_ and the flavour
  BlasHandle* blas_ = nullptr;  // shared by every layer on device_

  int sms_ = 132;
  int smem_per_sm_ = 0;
  int grid_rule_ = -1;
  int default_rule_ = default_grid_rule(0);  // the device's, set by the constructor
  int own_quant_ = -1;  // W4A4, the GEMM quantizing x itself: -1 default (row_quant, wgmma), 0 never
  int forced_splits_ = 0;  // wgmma kernel's K split, 0 = wgmma_split's
  int64_t wgmma_from_ = 33;  // the smallest M on the wgmma kernel (default_wgmma_from, or set_wgmma_from's)
  int raw_x_ = -1;           // wgmma kernel permuting its activations itself: -1 wgmma_raw_x_pays, 0 never, 1
                             // wherever it has that form (set_wgmma_raw_x)
  ForcedDecodeGrid forced_grid_;  // nw = 0: the grid rule's
  int forced_split_rb0_ = 0;  // and its first split row block
  bool wgmma_ = false;  // the device runs the sm_90a wgmma kernel
  bool programmatic_ = false;  // programmatic_launch_supported on the layer's device
  mutable std::mutex mu_;
};

}  // namespace

std::unique_ptr<CudaLinear> CudaLinear::create(const LinearWeights& w, Semantics s, DType act, int device) {
  return std::make_unique<CudaLinearImpl>(w, nullptr, s, act, device);
}

std::unique_ptr<CudaLinear> create_prepared(const LinearWeights& w, const FragmentWeights& f, Semantics s,
                                            DType act, int device) {
  return std::make_unique<CudaLinearImpl>(w, &f, s, act, device);
}

void set_fused_max_m(CudaLinear& l, int64_t fused_max_m) {
  dynamic_cast<CudaLinearImpl&>(l).set_fused_max_m(fused_max_m);
}

void set_fused_grid_rule(CudaLinear& l, int rule) { dynamic_cast<CudaLinearImpl&>(l).set_grid_rule(rule); }
void set_own_quant(CudaLinear& l, bool on) { dynamic_cast<CudaLinearImpl&>(l).set_own_quant(on ? -1 : 0); }
int tail_split_parts(const CudaLinear& l, int64_t m) {
  const auto& c = dynamic_cast<const CudaLinearImpl&>(l);
  if (!c.decode_at(m)) return 1;
  const DecodeGrid g = c.decode_grid_at(m);
  return split_fits(g) ? g.split_parts : 1;
}

void set_forced_decode_grid(CudaLinear& l, const ForcedDecodeGrid& g) {
  NVFP4_CHECK(g.nw == 0 || g.nw == 1 || g.nw == 2 || g.nw == 4,
              "cuda linear: forced decode grid with " + std::to_string(g.nw) + " tiles per warp, expected 1, 2 or 4");
  dynamic_cast<CudaLinearImpl&>(l).set_forced_grid(g);
}

std::string decode_grid_name(const CudaLinear& l, int64_t m) {
  const auto& c = dynamic_cast<const CudaLinearImpl&>(l);
  if (!c.decode_at(m)) return "-";
  const DecodeGrid g = c.decode_grid_at(m);
  std::string s = "nt" + std::to_string(g.nt) + " nw" + std::to_string(g.nw) + " wk" + std::to_string(g.wk);
  if (g.light) s += " light";
  if (split_fits(g)) s += " split" + std::to_string(g.split_parts) + "x" + std::to_string(g.split_rows);
  return s;
}

bool own_quant_active(const CudaLinear& l, int64_t m) {
  const auto& c = dynamic_cast<const CudaLinearImpl&>(l);
  return c.semantics() != Semantics::W4A16 && m <= c.fused_max_m() && c.own_quant(m);
}

void set_wgmma_splits(CudaLinear& l, int splits, int split_rb0) {
  dynamic_cast<CudaLinearImpl&>(l).set_splits(splits, split_rb0);
}

void set_wgmma_from(CudaLinear& l, int64_t m) { dynamic_cast<CudaLinearImpl&>(l).set_wgmma_from(m); }
void set_wgmma_raw_x(CudaLinear& l, int mode) { dynamic_cast<CudaLinearImpl&>(l).set_raw_x(mode); }

void set_weight_tile_rows(CudaLinear& l, int rows) { dynamic_cast<CudaLinearImpl&>(l).set_tile_rows(rows); }

// Largest M on the fused kernel; above it, dequantized weight tiles + cuBLAS (docs/PERF.md, crossover).
namespace {
// Layer size classes of the crossovers (weights N·K): small below 48 Mi (4096x4096, 6144x4096), mid-size below
// 200 Mi, large above.
constexpr int64_t kSmallLayerWeights = 48ll << 20, kMidLayerWeights = 200ll << 20;
}  // namespace

int64_t default_fused_max_m(Semantics s, int64_t n, int64_t k, bool wgmma) {
  const int64_t nk = n * k;
  // Hopper: the wgmma kernel (from default_wgmma_from's M: 33, or 17 or 65) reads the weights once per 64-128
  // tokens and never writes a dequantized copy; it wins up to M = 512 on small layers (since its epilogue goes
  // through shared memory, change 71: at 384 and 512 0.84-0.93x the dequantize + cuBLAS path's time, 6144x4096 at
  // 512 0.99-1.00x; at 768-2048 0.96-1.13x), 1536 on mid-size ones (2048 within 5% either way) and at least 2048 on
  // large ones (0.84-0.94 there, not measured above); the vLLM flavour's per-weight f32 rounding made it lose
  // from M = 384 on small layers, 512 on mid-size and (since change 47's faster dequantization) 768 on large ones
  // (docs/PERF.md, changes 28 and 52); its power-of-two form (change 55) speeds up both paths and its scan to
  // M = 192 agrees on the small layers (the dequantize + cuBLAS path ahead at 192), so the flavour keeps these
  // crossovers.
  if (wgmma && s != Semantics::W4A4_VLLM) return nk < kSmallLayerWeights ? 512 : nk < kMidLayerWeights ? 1536 : 2048;
  if (wgmma) return nk < kSmallLayerWeights ? 128 : nk < kMidLayerWeights ? 384 : 512;
  // Elsewhere the decode kernel with 32-token tiles: the exact-weight kernel (w4a16, and w4a4 on its
  // dequantized activations) wins up to M = 64 on small layers and up to 96-128 on large ones; the vLLM
  // flavour loses earlier on N = 4096 layers.
  if (s != Semantics::W4A4_VLLM) return nk < kSmallLayerWeights ? 64 : nk < kMidLayerWeights ? 96 : 128;
  return n < 6144 ? 32 : 64;
}

double decode_nt4_grid_us(const DecodeGrid& g, int64_t kc) {
  // Fitted to the eight layers of docs/PERF.md, change 124 (H100, w4a16, M = 17-32, nt4 nw1 wk8: 1-2 waves of
  // 4-16 chunks per warp): within 0.5 µs on seven, 1.3 µs under on 3072x3072. At M = 33-64 (two token tile rows,
  // twice the blocks) it was within -0.2 / +1.7 µs of ten layers' times (H200, change 126).
  const double waves = static_cast<double>(ceil_div(g.blocks, std::max<int64_t>(g.slots, 1)));
  return waves * (kDecodeWaveUs + kDecodeChunkUs * static_cast<double>(ceil_div(kc, int64_t{g.wk})));
}

int64_t default_wgmma_from(Semantics s, int64_t n, int64_t k, int sms) {
  // At M = 17-32 (bench_gemm --m 17,24,32 --xover none, with and without --wgmma-from 17, H100, every semantics) the
  // wgmma kernel's one 64-token tile took 0.55-0.97x the time of the decode kernel's 32-token tiles on every bench
  // layer of 24 Mi weights and more (6144x4096 0.74-0.80x, 8192x28672 0.55-0.65x; docs/PERF.md, change 110).
  if (n * k >= kWgmmaFrom17MinWeights) return 17;
  // Below, the two estimates, where the decode grid is the one the decode estimate was fitted to (token tiles of 32,
  // one 16-row tile per warp, K split 8 ways, no tail split); elsewhere the kernel of before (the decode kernel to
  // M = 32, the wgmma kernel above). Over M = 17-32 and over M = 33-64 each kernel's grid is the same (the wgmma
  // kernel's one 64-token tile; the decode kernel's one or two token tile rows), so one estimate at M = 32 and one
  // at 64 decide: the wgmma kernel from 17 where it is estimated faster at 32 (docs/PERF.md, change 125), else the
  // decode kernel up to 64 where it is estimated faster there too and its warps are short (change 126), else the
  // wgmma kernel from 33.
  const int64_t n16 = ceil_div(n, int64_t{16}), kc = ceil_div(k, int64_t{64});
  const bool own = s == Semantics::W4A16;
  auto fitted = [](const DecodeGrid& g) {
    return g.nt == 4 && g.nw == 1 && g.wk == 8 && !g.light && g.split_parts == 1;
  };
  auto wgmma_us = [&](int64_t m) {
    const WgmmaGrid w = wgmma_grid(m, n, n16, kc, sms, own);
    return wgmma_call_us(m, n, n16, kc, sms, w.split, w.rows, own) + kWgmmaCallUs;
  };
  // Rule 13 stands for every default rule: 14 and 15 differ from it only at M <= 16.
  auto decode_at = [&](int64_t m) { return decode_grid(m, n16, kc, sms, 13, detail::Mode::Exact, k % 64 != 0); };
  const DecodeGrid g32 = decode_at(32);
  if (!fitted(g32)) return 33;
  if (wgmma_us(32) < decode_nt4_grid_us(g32, kc)) return 17;
  const DecodeGrid g64 = decode_at(64);
  return fitted(g64) && ceil_div(kc, int64_t{g64.wk}) <= kDecodeTo64MaxChunksPerWarp &&
                 decode_nt4_grid_us(g64, kc) < wgmma_us(64)
             ? 65
             : 33;
}

int64_t default_full_round_max_m(Semantics s, int64_t n, int64_t k, bool wgmma) {
  // Measured after change 72 (dequantize + cuBLAS path against the wgmma kernel, small layers): at M = 1024 the
  // wgmma kernel took 0.93x that path's time on 4096x4096 (128 blocks of 256 rows: one round, fill 0.97) and
  // 0.97x on 6144x4096 (fill 0.88), 1.12x and 1.03x at 768 (fill 0.77, 0.85), 0.99-1.05x at 1536 and 0.96-1.02x
  // at 2048 (fill 0.97 on both: a tie there, so the path is kept above 1024).
  return wgmma && s != Semantics::W4A4_VLLM && n * k < kSmallLayerWeights ? 1024 : 0;
}

bool row_quant_pays(const DecodeGrid& g, int64_t kc, int sms) {
  const int64_t smem = detail::row_quant_smem_bytes(kc, g.wk);  // the warps' K ranges of 2-byte values
  return g.nt == 1 && smem <= kRowQuantMaxSmem && g.blocks * (smem / 2) <= kRowQuantMaxValuesPerSm * sms;
}

namespace {
// Token tiles of 8 rows per block of the decode kernel for m rows: 1, 2 or 4 (8, 16 or 32 tokens).
int decode_token_tiles(int64_t m) { return m <= 8 ? 1 : m <= 16 ? 2 : 4; }
// Blocks of a decode grid of `groups` tile groups (nw tiles each) per token-tile row, K split over wk warps: a block
// takes decode_block_warps(wk) / wk groups (one in the wide form).
int64_t decode_blocks(int64_t mblocks, int64_t groups, int wk) {
  return mblocks * ceil_div(groups, int64_t{detail::decode_block_warps(wk) / wk});
}
}  // namespace

int default_grid_rule(double bytes_per_s_per_sm) {
  return bytes_per_s_per_sm > 0 && bytes_per_s_per_sm < kLongBlockMaxBandwidthPerSm ? 14 : 15;
}

DecodeGrid decode_grid(int64_t m, int64_t n16, int64_t kc, int sms, int rule, detail::Mode mode, bool partial_chunk) {
  // Rule 14: rule 13's, with a grid of more than two waves at its K split run as one wave of longer blocks (below);
  // rule 15: the same only where rule 13's warps are short (at most kLongBlockMaxWarpChunks chunks each).
  const bool long_blocks = rule == 14 || rule == 15, short_warps_only = rule == 15;
  if (long_blocks) rule = 13;
  // Rule 13: rule 11's grid, then the tail split where it applies (at the end).
  const bool tail = rule == 13;
  if (tail) rule = 11;
  // Rules 10 and 11: rule 7's grid, then the wide form where it applies (at the end).
  const bool wide = rule == 10 || rule == 11, wide16 = rule == 11;
  if (wide) rule = 7;
  DecodeGrid g;
  g.nt = decode_token_tiles(m);
  const int nt = g.nt;
  const int64_t mblocks = ceil_div(m, 8 * nt);
  // light2: the two-tile kernel of one token tile that fits 3 blocks per SM (rules 7 and 8).
  bool light2 = false;
  // Block slots of the whole GPU for a kernel with nw weight tiles per warp (rules 0 and 1 counted 2 per
  // SM for every kernel).
  auto slots = [&](int nw) {
    return (rule >= 2 ? detail::fused_blocks_per_sm(nt, nw, light2 && nw == 2) : 2) * static_cast<int64_t>(sms);
  };
  int max_wk = 8;
  while (max_wk > 1 && kc / max_wk < 2) max_wk /= 2;
  // Weight tiles per warp (they share the activation fragments, which are 2x the weight bytes per tile
  // at nt = 1): rules 1 and 2 (M <= 16) keep as many as still fill >= 90% of one wave of blocks with the
  // largest K split; rule 0 (the earlier one, and M > 16) halves them until >= 2 blocks per SM before
  // any K split.
  int nw = nt == 4 ? 2 : 4;
  auto blocks_at_max_wk = [&](int w) { return mblocks * ceil_div(ceil_div(n16, w), 8 / max_wk); };
  if (rule >= 1 && nt <= 2) {
    while (nw > 1 && 10 * blocks_at_max_wk(nw) < 9 * slots(nw)) nw /= 2;
  } else {
    while (nw > 1 && mblocks * ceil_div(n16, nw) < slots(nw)) nw /= 2;
  }
  // A grid of 2 tiles per warp that ends in a second wave at most half full (rule 3 on, M <= 8; rule 7 on,
  // M <= 16 too) runs better as 1 tile per warp, on a kernel that fits 3 blocks per SM (10240x8192 at M = 1:
  // 320 blocks on 264 slots 20.4 µs, 640 on 396 slots 18.9; at M = 16 25.5 -> 24.2, the vLLM flavour 39.9 ->
  // 33.7; docs/PERF.md, changes 30 and 33). Rule 7 on, M <= 8, exact-weight modes: the light two-tile kernel
  // instead, which holds such a grid (<= 1.5 x 2 blocks per SM) in one wave (10240x8192: 19.1 -> 17.5 µs;
  // 12672x8192, exactly 1.5 waves: 23.5 -> 17.1, change 48; the vLLM flavour's per-weight f32 rounding made it
  // slower there, 30.5 -> 33.5, so that form keeps 1 tile; its power-of-two form takes the light kernel, 25.1 ->
  // 24.9, change 56).
  const bool short_second_wave =
      nw == 2 && blocks_at_max_wk(2) > slots(2) && 2 * blocks_at_max_wk(2) <= 3 * slots(2);
  if (rule >= 7 && nt == 1 && mode != detail::Mode::Vllm && short_second_wave) light2 = true;
  if (rule == 8 && nt == 1) {  // measurements and tests: the light two-tile kernel for every grid
    nw = 2;
    light2 = true;
  }
  if (!light2 && short_second_wave && ((rule >= 3 && nt == 1) || (rule >= 7 && nt == 2))) nw = 1;
  if (rule == 6 && nt <= 2 && nw > 1) nw /= 2;  // measurements: twice the blocks, each half as long
  // K split inside a block: rules 0 and 1 split only as much as needed for one wave (the warps of a
  // block sharing a K range also share the activations in L1); rule 2 on (M <= 16) always takes the
  // largest split (>= 2 chunks per warp), whose many short blocks leave a smaller last wave.
  const int64_t groups = ceil_div(n16, nw);
  int wk = 1;
  while (wk < max_wk && decode_blocks(mblocks, groups, wk) < slots(nw)) wk *= 2;
  if (rule >= 2 && nt <= 2) wk = max_wk;
  // Rule 7 on, M <= 16: a grid that needs 1-2 waves at that split runs half of it, one wave of blocks twice as
  // long, where that still fills >= 80% of the wave: 2 or 4 tiles per warp on the 2-blocks-per-SM kernel
  // (28672x4096: 448 blocks on 264 slots -> 224, M = 1 22.9 -> 21.5 µs, M = 16 28.9 -> 26.8; 57344x8192, 896
  // blocks, was not faster with its one-wave split, 224 blocks of 4x the length; change 36), and 16 tokens with
  // one tile on the light kernel in the exact-weight modes (10240x8192: 640 blocks on 396 slots -> 320, M = 16
  // 24.3 -> 23.0, M = 9 23.2 -> 22.2; the vLLM flavour keeps its split: 32.2 -> 37.1 with per-weight rounding,
  // change 39, and 30.1 -> 34.0 in the power-of-two form, change 56; docs/PERF.md).
  const int64_t half_split_blocks = mblocks * ceil_div(groups, 16 / wk);
  const int64_t wave = nt == 2 && nw == 1 ? detail::fused_blocks_per_sm(nt, nw, true) * static_cast<int64_t>(sms)
                                          : slots(nw);
  const bool halve_kind = (nw > 1 && slots(nw) == 2ll * sms) || (nt == 2 && nw == 1 && mode == detail::Mode::Exact);
  if (rule >= 7 && nt <= 2 && halve_kind && wk > 1 && decode_blocks(mblocks, groups, wk) > wave &&
      half_split_blocks <= wave && 5 * half_split_blocks >= 4 * wave)
    wk /= 2;
  // Rule 14, M <= 16 (at M = 9-16 in the exact-weight mode only): a grid of more than two waves at that split takes
  // the split, halving it, at which its blocks make one wave of >= 80% of the slots, where there is one: fewer, longer
  // blocks (the warps of a block share their K range's activations in L1) and no last partial wave. On an H100
  // (docs/PERF.md, change 107) 57344x8192 at M = 1 95.1 -> 87.8 µs, M = 16 107.8 -> 93.6; 128256x4096 105.6 -> 98.1
  // and 127.3 -> 119.2; 57344x4096 50.8 -> 45.1 and 59.1 -> 49.1; the vLLM flavour's 16-token four-tile kernel
  // 125.4 -> 132.7 on 57344x8192, which is why it keeps rule 13's grid. Rule 15 (the H200's default) leaves grids whose
  // warps have more than kLongBlockMaxWarpChunks chunks alone (cuda_linear_internal.h).
  if (long_blocks && (nt == 1 || mode == detail::Mode::Exact) && nt <= 2 &&
      (!short_warps_only || ceil_div(kc, int64_t{wk}) <= kLongBlockMaxWarpChunks) &&
      decode_blocks(mblocks, groups, wk) > 2 * slots(nw)) {
    for (int w = wk / 2; w >= 1; w /= 2) {
      const int64_t b = decode_blocks(mblocks, groups, w);
      if (b <= slots(nw) && 5 * b >= 4 * slots(nw)) {
        wk = w;
        break;
      }
    }
  }
  // K not a multiple of 64: every warp gets chunks. A K split whose ranges of ceil(kc / wk) chunks are used up
  // before the last warp (17 chunks over 8 warps of 3) takes half as many warps: a warp without chunks would
  // add the chunk past K again. (With whole chunks such a warp adds nothing: 9 chunks over 4 warps of 3.)
  auto fit_partial = [&](int w) {
    while (partial_chunk && w > 1 && (w - 1) * ceil_div(kc, w) >= kc) w /= 2;
    return w;
  };
  wk = fit_partial(wk);
  g.nw = nw;
  g.wk = wk;
  g.blocks = decode_blocks(mblocks, groups, wk);
  g.slots = slots(nw);
  g.light = light2;
  // Rule 7 on, M <= 8, the vLLM flavour's power-of-two form: a grid of 4 tiles per warp in one wave of the
  // 2-block kernel runs the light two-tile kernel with the largest K split instead, as rule 8 does (28672x4096:
  // 224 blocks, M = 1 30.4-30.5 µs -> 896 light blocks 29.3-29.5, M = 8 30.6-30.7 -> 29.6; the exact modes lose
  // 2.2 µs there, and 57344x8192 with 3.4 waves of 4-tile blocks 0.8 µs; docs/PERF.md, change 65).
  if (rule == 7 && nt == 1 && mode == detail::Mode::VllmPow2 && nw == 4 && g.blocks <= g.slots) {
    light2 = true;
    g.nw = 2;
    g.wk = fit_partial(max_wk);
    g.blocks = mblocks * ceil_div(ceil_div(n16, 2), 8 / g.wk);
    g.slots = slots(2);
    g.light = true;
  }
  // 16 tokens, one tile per warp, rule 3 on: a grid that needs more than one wave of the 2-block kernel runs
  // the light one (3 blocks per SM, shorter register stages); within one wave the 2-block kernel's deeper
  // stages win (6144x4096 at M = 16, 384 blocks: 11.3 -> 8.2 µs; 4096x4096, 256 blocks: 6.3 with the 2-block
  // kernel, 6.9 with the light one; docs/PERF.md, change 32). Rule 8 takes it wherever it exists.
  if (rule >= 3 && nt == 2 && nw == 1 && (g.blocks > g.slots || rule == 8)) {
    g.light = true;
    g.slots = detail::fused_blocks_per_sm(nt, nw, true) * static_cast<int64_t>(sms);
  }
  // Rules 10, 11 and 13 (13 the default): a one-tile grid of one token tile whose tiles fit 2 blocks per SM as one
  // tile per block (4096x4096 and 4096x14336 at M = 1-8: 256 blocks of 8 warps, 16 warps on most SMs) runs as
  // blocks of 12 warps, K split 12 ways as evenly as the chunks divide (so a partial last chunk needs no smaller
  // split), 2 per SM: at M = 1 w4a16 4096x4096 5.1 -> 4.5-4.6 µs, 4096x14336 13.8 -> 11.7, 2048x8192 8.2 -> 6.7
  // (docs/PERF.md, change 74).
  // Rule 11 also at M = 9-16, on the light 16-token kernel in blocks of 12 warps: 4096x14336 at M = 16 16.1 ->
  // 15.2 µs, M = 9 15.6 -> 14.3; 4096x4096 6.0 -> 5.9.
  const bool wide_kernel = nt == 1 ? !g.light : nt == 2 && wide16;  // the light 16-token one where nt = 2
  if (wide && wide_kernel && detail::has_wide_form(nt, g.nw, nt == 2) && mblocks * n16 <= 2ll * sms &&
      kc >= 2 * detail::kWideWarps) {
    g.light = nt == 2;
    g.wk = detail::kWideWarps;
    g.blocks = mblocks * n16;
    g.slots = 2ll * sms;
  }
  if (tail && mblocks == 1 && !partial_chunk) {
    // Parts of fewer than 4 chunks per warp measured slower (9504x4096 at M = 1: 4 parts of 2 chunks per warp,
    // 10.3 -> 11.2 µs; docs/PERF.md, change 90): such grids stay whole.
    const int64_t q = g.blocks / sms, r = g.blocks % sms;
    const int parts = static_cast<int>(std::min<int64_t>(4, r > 0 ? sms / r : 0));
    if (q >= 1 && q < g.slots / sms && parts >= 2 && kc / parts >= 4 * g.wk) {
      g.split_parts = parts;
      g.split_rows = r;
      g.blocks += r * (parts - 1);
    }
  }
  return g;
}

DecodeGrid forced_decode_grid(int64_t m, int64_t n16, int64_t kc, int sms, const ForcedDecodeGrid& f,
                              bool partial_chunk) {
  DecodeGrid g;
  g.nt = decode_token_tiles(m);
  const std::string what = "cuda linear: forced decode grid nw " + std::to_string(f.nw) + " wk " +
                           std::to_string(f.wk) + (f.light ? " light" : "") + " parts " + std::to_string(f.parts) +
                           " at " + std::to_string(8 * g.nt) + "-token tiles";
  const bool wide = f.wk == detail::kWideWarps;
  NVFP4_CHECK((f.nw == 1 || f.nw == 2 || f.nw == 4) && !(g.nt == 4 && f.nw == 4),
              what + ": no kernel with that many tiles per warp");
  NVFP4_CHECK(!f.light || (g.nt == 2 && f.nw == 1) || (g.nt == 1 && f.nw == 2), what + ": no light variant");
  NVFP4_CHECK(wide ? detail::has_wide_form(g.nt, f.nw, f.light) && kc >= 2 * detail::kWideWarps
                   : f.wk == 1 || f.wk == 2 || f.wk == 4 || f.wk == 8,
              what + ": no such K split (1, 2, 4, 8, or " + std::to_string(detail::kWideWarps) +
                  " for the wide form of the one-tile and light 16-token kernels)");
  NVFP4_CHECK(wide || !partial_chunk || (f.wk - 1) * ceil_div(kc, int64_t{f.wk}) < kc,
              what + ": a warp would get no chunk of the " + std::to_string(kc));
  g.nw = f.nw;
  g.wk = f.wk;
  g.light = f.light;
  const int64_t rows = decode_blocks(1, ceil_div(n16, int64_t{f.nw}), f.wk);  // block rows of one token tile row
  g.blocks = ceil_div(m, int64_t{8 * g.nt}) * rows;
  g.slots = (wide ? 2 : detail::fused_blocks_per_sm(g.nt, g.nw, g.light)) * static_cast<int64_t>(sms);
  if (f.parts > 1) {
    NVFP4_CHECK(!partial_chunk && kc / f.parts >= 2 * f.wk,
                what + ": a split needs K a multiple of 64 and >= 2 chunks per warp in each part (" +
                    std::to_string(kc) + " chunks)");
    g.split_parts = f.parts;
    g.split_rows = rows;
    g.blocks = rows * f.parts;
    NVFP4_CHECK(split_fits(g), what + ": the split's slots do not fit the workspace");
  }
  return g;
}

int wgmma_tile_tokens(int64_t m) { return m <= 64 ? 64 : 128; }

// 4 consumer warpgroups were faster at M <= 128 on five of the seven bench layers (2-9%) and within 1.5% on the
// other two, once the producer work was spread over four warps and the A fragments double-buffered (docs/PERF.md,
// change 28); with 128-token tiles above M = 128 the 2-warpgroup kernel keeps two A buffers, the 4 cannot.
int wgmma_consumers(int64_t m, int rule, int rows) {
  if (rows != 256) return rows / 64;  // one row block per consumer warpgroup (detail::wgmma_consumers_fit)
  return rule == 4 ? 4 : rule == 5 ? 2 : m <= 128 ? 4 : 2;
}

namespace {
// Blocks of `rows` weight rows (rows / 64 stored tile groups each) of a layer of n16 16-row tiles.
int64_t wgmma_row_blocks(int64_t n16, int rows) { return ceil_div(stored_tiles(n16) / kTileGroup, rows / 64); }

// Finish time, in chunks, of `a` blocks of `la` chunks followed by `b` blocks of `lb` chunks, each block started
// in launch order on the SM that is free first (one block per SM). The `a` blocks leave sms - r SMs free at q·la
// and r at (q + 1)·la (q, r: a / sms, a % sms); each SM then starts a `b` block every lb chunks, so the `b` blocks'
// start times are the smallest b of those two lattices, and the last one is found by bisection over time: a few
// arithmetic steps per estimate instead of a step per SM group and round (the host runs this per call, for each
// candidate grid and split).
int64_t makespan_chunks(int64_t a, int64_t la, int64_t b, int64_t lb, int sms) {
  if (a == 0 || b == 0) return a == 0 ? ceil_div(b, sms) * lb : ceil_div(a, sms) * la;  // one kind: in rounds
  const int64_t q = a / sms, r = a % sms;
  const int64_t t1 = q * la, c1 = sms - r, t2 = t1 + la, c2 = r;  // SMs free at t1, and at t2 (c1 >= 1)
  auto started_by = [&](int64_t t) {  // `b` blocks started at or before t (t >= t1)
    return c1 * ((t - t1) / lb + 1) + (t >= t2 ? c2 * ((t - t2) / lb + 1) : 0);
  };
  int64_t lo = t1, hi = t1 + (ceil_div(b, c1) - 1) * lb;  // by hi the first SMs alone have started b
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (started_by(mid) >= b)
      hi = mid;
    else
      lo = mid + 1;
  }
  return std::max(r ? t2 : t1, lo + lb);  // the last `b` block starts at lo
}

// Blocks of `rows` weight rows of a call of m tokens under split sp: (token blocks, row blocks as launched).
std::pair<int64_t, int64_t> wgmma_blocks(int64_t m, int64_t n16, int rows, WgmmaSplit sp) {
  return {ceil_div(m, int64_t{wgmma_tile_tokens(m)}),
          detail::wgmma_grid_rows(wgmma_row_blocks(n16, rows), sp.splits, sp.split_rb0)};
}

// µs per K chunk of a round of blocks of kt tokens and `rows` weight rows.
double wgmma_chunk_us(int kt, int rows) { return (kt == 64 ? 0.55 : 0.74) * wgmma_rows_factor(rows); }
}  // namespace

// Blocks of 128 rows: 0.55x the 256-row block's time per chunk (fitted to 38 bench rows at M = 64-2048, both sizes
// measured in one run; the long grids alone give 0.55-0.64 at 128 tokens, 0.5 at 64; change 68). Blocks of 192
// rows: 0.77x (the median of 15 unsplit grids at M = 256-1024 on five bench layers, 0.67-0.83, both sizes measured
// in one call; change 84).
double wgmma_rows_factor(int rows) { return rows == 128 ? 0.55 : rows == 192 ? 0.77 : 1.0; }

bool wgmma_raw_x_pays(int64_t m, int64_t n16, int sms, int rows, WgmmaSplit sp) {
  if (!detail::wgmma_raw_x_fits(rows, wgmma_tile_tokens(m))) return false;
  const auto [token_blocks, row_blocks] = wgmma_blocks(m, n16, rows, sp);
  return token_blocks * row_blocks <= sms;
}

double wgmma_time_us(int64_t m, int64_t n, int64_t n16, int64_t kc, int sms, WgmmaSplit split, int rows) {
  // µs per K chunk of a round of blocks (one per SM), H200, 2026-11-30, after change 27: 57344x8192 unsplit at
  // M = 64 (2 rounds of 128 chunks: 140.7 µs) and M = 1024 (14 rounds: 1330.1 µs); the f32 partial sums' rate,
  // 5 TB/s where they take at most kWgmmaL2PartialBytes (they stay in the 60 MB L2 while the weights stream
  // through it evict-first) and 3 TB/s above (docs/PERF.md, change 63); the reduction's launch.
  const int kt = wgmma_tile_tokens(m);
  const double chunk_us = wgmma_chunk_us(kt, rows), reduce_launch_us = 2.0;
  const double l2_bytes_per_us = 5.0e6, hbm_bytes_per_us = 3.0e6;  // partial sums in L2, or beyond it
  const int64_t token_blocks = ceil_div(m, kt), row_blocks = wgmma_row_blocks(n16, rows);
  const int s = std::max(1, split.splits);
  const int64_t rb0 = s > 1 ? std::clamp<int64_t>(split.split_rb0, 0, row_blocks - 1) : row_blocks;
  const int64_t chunks = makespan_chunks(rb0 * token_blocks, kc, (row_blocks - rb0) * token_blocks * s,
                                         ceil_div(kc, s), std::max(sms, 1));
  double t = static_cast<double>(chunks) * chunk_us;
  if (s > 1) {  // the split blocks' columns: partial sums written and read once, then y written
    const int64_t cols = std::max<int64_t>(0, n - rb0 * rows);
    const double partial_bytes = 4.0 * s * static_cast<double>(m * cols);
    const double partial_bytes_per_us = partial_bytes <= kWgmmaL2PartialBytes ? l2_bytes_per_us : hbm_bytes_per_us;
    t += static_cast<double>(m * cols) * (8.0 * s + 2.0) / partial_bytes_per_us + reduce_launch_us;
  }
  return t;
}

double wgmma_call_us(int64_t m, int64_t n, int64_t n16, int64_t kc, int sms, WgmmaSplit split, int rows,
                     bool own_permutation) {
  const double t = wgmma_time_us(m, n, n16, kc, sms, split, rows);
  const int64_t longest = split.splits > 1 && split.split_rb0 == 0 ? ceil_div(kc, int64_t{split.splits}) : kc;
  const bool credit = own_permutation && longest <= kWgmmaOwnPermuteMaxChunks &&
                      wgmma_raw_x_pays(m, n16, sms, rows, split);
  return credit ? t - kWgmmaPermuteUs : t;
}

WgmmaSplit wgmma_split(int64_t m, int64_t n, int64_t n16, int64_t kc, int sms, int rows, bool own_permutation) {
  WgmmaSplit best{1, 0};
  double best_us = wgmma_call_us(m, n, n16, kc, sms, best, rows, own_permutation);
  auto consider = [&](WgmmaSplit c) {
    const double t = wgmma_call_us(m, n, n16, kc, sms, c, rows, own_permutation);
    if (t < 0.95 * best_us) best = c, best_us = t;
  };
  // First only the blocks of the last, partial round split: as many row blocks (all their token blocks) as cover
  // it; then every row block, which must save 5% over that. The estimate counts chunks, not blocks, and a split of
  // every block makes many short ones: 57344x8192 at M = 17 and 20 took a uniform 4-way split (estimate 131.8 µs
  // against the tail split's 127.9, within 5%, considered second) that measured 9% slower than the tail split,
  // 134.8-138.0 against 123.5-125.2 µs (H100; docs/PERF.md, change 112).
  const int64_t token_blocks = ceil_div(m, wgmma_tile_tokens(m)), row_blocks = wgmma_row_blocks(n16, rows);
  const int64_t blocks = token_blocks * row_blocks, last = sms > 0 ? blocks % sms : 0;
  if (blocks > sms && last > 0) {
    const int64_t split_rows = ceil_div(last, token_blocks);
    if (split_rows < row_blocks)
      for (int s = 2; s <= 8 && kc / s >= 8; ++s) consider({s, static_cast<int>(row_blocks - split_rows)});
  }
  for (int s = 2; s <= 8 && kc / s >= 8; ++s) consider({s, 0});
  return best;
}

WgmmaGrid wgmma_grid(int64_t m, int64_t n, int64_t n16, int64_t kc, int sms, bool own_permutation) {
  const WgmmaGrid g256{256, wgmma_split(m, n, n16, kc, sms, 256, own_permutation)},
      g128{128, wgmma_split(m, n, n16, kc, sms, 128, own_permutation)};
  const double t256 = wgmma_call_us(m, n, n16, kc, sms, g256.split, 256, own_permutation);
  const double t128 = wgmma_call_us(m, n, n16, kc, sms, g128.split, 128, own_permutation);
  const WgmmaGrid& best = t128 < t256 ? g128 : g256;
  // Blocks of 192 rows only where their estimate is at least 5% below: their chunk time spreads 0.67-0.83x
  // around the fitted 0.77, and near ties measured either way (change 84).
  const WgmmaGrid g192{192, wgmma_split(m, n, n16, kc, sms, 192, own_permutation)};
  const double t192 = wgmma_call_us(m, n, n16, kc, sms, g192.split, 192, own_permutation);
  return t192 < 0.95 * std::min(t256, t128) ? g192 : best;
}

double wgmma_round_fill(int64_t m, int64_t n, int64_t n16, int64_t kc, int sms) {
  const WgmmaGrid g = wgmma_grid(m, n, n16, kc, sms);
  const int64_t blocks = ceil_div(m, wgmma_tile_tokens(m)) * wgmma_row_blocks(n16, g.rows);
  const double even =
      static_cast<double>(blocks * kc) / std::max(sms, 1) * wgmma_chunk_us(wgmma_tile_tokens(m), g.rows);
  return even / wgmma_time_us(m, n, n16, kc, sms, g.split, g.rows);
}

bool fused_kernel_at(int64_t m, int64_t fused_max_m, int64_t full_round_max_m, int64_t n, int64_t n16, int64_t kc,
                     int sms) {
  if (m <= fused_max_m) return true;
  return m <= full_round_max_m && wgmma_round_fill(m, n, n16, kc, sms) >= kFullRoundFill;
}

void set_programmatic_launch(bool on) { g_programmatic.store(on, std::memory_order_relaxed); }

int64_t fused_max_m(const CudaLinear& l) { return dynamic_cast<const CudaLinearImpl&>(l).fused_max_m(); }
bool uses_fused_kernel(const CudaLinear& l, int64_t m) { return dynamic_cast<const CudaLinearImpl&>(l).uses_fused(m); }
bool vllm_weights_pow2(const CudaLinear& l) { return dynamic_cast<const CudaLinearImpl&>(l).vllm_plan().ok; }

}  // namespace nvfp4::cuda
