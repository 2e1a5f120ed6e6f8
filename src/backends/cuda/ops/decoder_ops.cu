// Decoder ops on the GPU (see decoder_ops.h for what each computes). Top-down: rounding helpers, block
// reductions, one kernel per op with its launcher, then the cuBLAS GEMM.
#include "backends/cuda/ops/decoder_ops.h"

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "backends/cuda/cuda_util.cuh"
#include "common/error.h"

namespace nvfp4::cuda_ops {

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(std::string("cuda decoder op ") + what + ": " + cudaGetErrorString(e));
}
void check_launch(const char* what) { check(cudaGetLastError(), what); }
cudaStream_t st(void* s) { return static_cast<cudaStream_t>(s); }

// Activation dtype as a kernel argument: 0 f32 (identity), 1 bf16, 2 f16.
int code_of(DType t) {
  switch (t) {
    case DType::F32: return 0;
    case DType::BF16: return 1;
    case DType::F16: return 2;
    default: fail(std::string("cuda decoder op: activation dtype ") + dtype_name(t) + ", expected F32, F16 or BF16");
  }
}

// An op given 16-bit operands (uses_bits) needs a 16-bit activation dtype.
void check_bits16(DType t, bool uses_bits, const char* op) {
  if (uses_bits && code_of(t) == 0) fail(std::string("cuda decoder op ") + op + ": F32 has no 16-bit pattern");
}

// f32 -> bf16 bits, round to nearest even; NaN stays NaN (quiet).
__device__ __forceinline__ uint16_t bf16_bits(float x) {
  uint32_t u = __float_as_uint(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
__device__ __forceinline__ float bf16_value(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }

// The 16-bit pattern of a value already representable in T (t = 1 bf16, 2 f16), and back.
__device__ __forceinline__ uint16_t bits_t(float x, int t) {
  return t == 1 ? bf16_bits(x) : __half_as_ushort(__float2half_rn(x));
}
__device__ __forceinline__ float value_t(uint16_t b, int t) {
  return t == 1 ? bf16_value(b) : __half2float(__ushort_as_half(b));
}

// T(x): the value of x rounded to the activation dtype.
__device__ __forceinline__ float round_t(float x, int t) {
  if (t == 1) return bf16_value(bf16_bits(x));
  if (t == 2) return __half2float(__float2half_rn(x));
  return x;
}

// Sum over a block (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
template <typename V>
__device__ V block_sum(V v, V* sh) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  __syncthreads();
  if (l == 0) sh[w] = v;
  __syncthreads();
  V r = 0;
  for (int i = 0; i < static_cast<int>(blockDim.x / 32); ++i) r += sh[i];
  return r;
}
__device__ float block_max(float v, float* sh) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  __syncthreads();
  if (l == 0) sh[w] = v;
  __syncthreads();
  float r = -INFINITY;
  for (int i = 0; i < static_cast<int>(blockDim.x / 32); ++i) r = fmaxf(r, sh[i]);
  return r;
}

unsigned blocks_for(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

// ---- elementwise -------------------------------------------------------------------------------------
__global__ void k_embed(const float* table, const int32_t* ids, int64_t n, int64_t h, float* x) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n * h) return;
  const int64_t r = i / h, c = i % h;
  x[i] = table[static_cast<int64_t>(ids[r]) * h + c];
}

// Writes the input of the next NVFP4 linear, whose kernels are launched programmatically: it may start
// streaming its weights now (it waits for this grid before it reads `out`).
__global__ void k_to_bits(const float* x, int64_t n, int t, uint16_t* out) {
  nvfp4::cuda::detail::pdl_launch_dependents();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  out[i] = bits_t(x[i], t);
}

__global__ void k_from_bits(const uint16_t* in, int64_t n, int t, float* x) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  x[i] = value_t(in[i], t);
}

__global__ void k_round_bias(float* y, int64_t m, int64_t n, const float* bias, int t) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= m * n) return;
  const float r = round_t(y[i], t);
  y[i] = bias ? round_t(__fadd_rn(r, bias[i % n]), t) : r;
}

// Inputs from their T bits where given (gb, ub), the result also as T bits where ob is given (the next NVFP4
// linear's input: it may start streaming its weights, as after k_to_bits).
__global__ void k_silu_mul(float* g, const float* u, int64_t n, int t, const uint16_t* gb, const uint16_t* ub,
                           uint16_t* ob) {
  nvfp4::cuda::detail::pdl_launch_dependents();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const double gv = gb ? value_t(gb[i], t) : g[i];
  const float s = round_t(static_cast<float>(gv / (1.0 + exp(-gv))), t);
  const float r = round_t(__fmul_rn(s, ub ? value_t(ub[i], t) : u[i]), t);
  g[i] = r;
  if (ob) ob[i] = bits_t(r, t);
}

__global__ void k_residual(float* x, const float* y, int64_t n, int t, const uint16_t* yb) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  x[i] = round_t(__fadd_rn(x[i], yb ? value_t(yb[i], t) : y[i]), t);
}

// ---- rmsnorm: one block per row ------------------------------------------------------------------------
__global__ void k_rmsnorm(const float* x, const float* w, int64_t d, float eps, int t, float* out, uint16_t* ob) {
  nvfp4::cuda::detail::pdl_launch_dependents();  // ob: the next NVFP4 linear's input, as after k_to_bits
  __shared__ double sh[32];
  const float* xr = x + blockIdx.x * d;
  float* orow = out + blockIdx.x * d;
  // Each thread's elements j = tid, tid + B, ... in that order (B = blockDim), kBatch loads in flight at a time
  // (one row per block: at decode the loads' latency, not their bandwidth, is the cost).
  constexpr int kBatch = 8;
  const int64_t B = blockDim.x;
  double ss = 0;
  for (int64_t j0 = threadIdx.x; j0 < d; j0 += kBatch * B) {
    float v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) v[u] = j0 + u * B < d ? xr[j0 + u * B] : 0.0f;
#pragma unroll
    for (int u = 0; u < kBatch; ++u)
      if (j0 + u * B < d) ss += static_cast<double>(v[u]) * v[u];
  }
  ss = block_sum(ss, sh);
  const float r = static_cast<float>(1.0 / sqrt(ss / static_cast<double>(d) + static_cast<double>(eps)));
  for (int64_t j0 = threadIdx.x; j0 < d; j0 += kBatch * B) {
    float xv[kBatch], wv[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const bool in = j0 + u * B < d;
      xv[u] = in ? xr[j0 + u * B] : 0.0f;
      wv[u] = in ? w[j0 + u * B] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int64_t j = j0 + u * B;
      if (j >= d) break;
      const float v = round_t(__fmul_rn(round_t(__fmul_rn(xv[u], r), t), wv[u]), t);
      orow[j] = v;
      if (ob) ob[blockIdx.x * d + j] = bits_t(v, t);
    }
  }
}

// ---- RoPE + KV store: one thread per (token, head, i < hd/2) over q heads then k heads ------------------
__global__ void k_rope_store(float* q, float* k, const float* v, int64_t n, int64_t nh, int64_t nkv, int64_t hd,
                             const float* cs, int64_t pos0, const int32_t* pos_dev, float* kc, float* vc,
                             int64_t cap, int t, const uint16_t* qb, const uint16_t* kb, const uint16_t* vb) {
  if (pos_dev) pos0 = *pos_dev;
  const int64_t half = hd / 2;
  const int64_t per_tok = (nh + nkv) * half;
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (idx >= n * per_tok) return;
  const int64_t i = idx / per_tok, rem = idx % per_tok;
  const int64_t head = rem / half, e = rem % half;
  const int64_t p = pos0 + i;
  const float c = cs[p * hd + e], s = cs[p * hd + half + e];
  const bool is_q = head < nh;
  const int64_t h = is_q ? head : head - nh;
  const int64_t at = is_q ? (i * nh + h) * hd : (i * nkv + h) * hd;
  float* vec = (is_q ? q : k) + at;
  const uint16_t* vecb = is_q ? qb : kb;
  const float a = vecb ? value_t(vecb[at + e], t) : vec[e], b = vecb ? value_t(vecb[at + e + half], t) : vec[e + half];
  const float na = round_t(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)), t);
  const float nb = round_t(__fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s)), t);
  vec[e] = na;
  vec[e + half] = nb;
  if (!is_q) {
    float* kd = kc + (h * cap + p) * hd;
    float* vd = vc + (h * cap + p) * hd;
    const int64_t vat = (i * nkv + h) * hd;
    kd[e] = na;
    kd[e + half] = nb;
    vd[e] = vb ? value_t(vb[vat + e], t) : v[vat + e];
    vd[e + half] = vb ? value_t(vb[vat + e + half], t) : v[vat + e + half];
  }
}

// ---- attention: one block per (query head, token); scores in dynamic shared memory ----------------------
constexpr int kAttnThreads = 128;
constexpr int64_t kMaxHeadDim = 256;
constexpr int64_t kMaxPositions = 32768;  // 128 KiB of scores (opt-in shared memory above 32 KiB; sm_80+ have >= 163 KiB)

__global__ void k_attention(const float* q, const float* kc, const float* vc, int64_t pos0, const int32_t* pos_dev,
                            int64_t nh, int64_t nkv, int64_t hd, int64_t cap, float scale, int t, float* out,
                            uint16_t* ob) {
  nvfp4::cuda::detail::pdl_launch_dependents();  // ob: the next NVFP4 linear's input, as after k_to_bits
  if (pos_dev) pos0 = *pos_dev;
  extern __shared__ float sc[];
  __shared__ float qs[kMaxHeadDim];
  __shared__ float red[32];
  const int64_t h = blockIdx.x, i = blockIdx.y;
  const int64_t p = pos0 + i, g = h / (nh / nkv);
  const float* qh = q + (i * nh + h) * hd;
  for (int64_t e = threadIdx.x; e < hd; e += blockDim.x) qs[e] = qh[e];
  __syncthreads();
  const float* kb = kc + g * cap * hd;
  const float* vb = vc + g * cap * hd;
  float mx = -INFINITY;
  // The sums below run in their plain sequential order; the loads of kBatch terms are issued first.
  constexpr int kBatch = 16;
  for (int64_t s = threadIdx.x; s <= p; s += blockDim.x) {
    const float* kr = kb + s * hd;
    float d = 0;
    for (int64_t e0 = 0; e0 < hd; e0 += kBatch) {
      float kv[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) kv[u] = e0 + u < hd ? kr[e0 + u] : 0.0f;
#pragma unroll
      for (int u = 0; u < kBatch; ++u)
        if (e0 + u < hd) d = __fadd_rn(d, __fmul_rn(qs[e0 + u], kv[u]));
    }
    d = __fmul_rn(d, scale);
    sc[s] = d;
    mx = fmaxf(mx, d);
  }
  mx = block_max(mx, red);
  float sum = 0;
  for (int64_t s = threadIdx.x; s <= p; s += blockDim.x) {
    const float e = expf(sc[s] - mx);
    sc[s] = e;
    sum += e;
  }
  sum = block_sum(sum, red);
  const float inv = 1.0f / sum;
  __syncthreads();
  float* o = out + (i * nh + h) * hd;
  for (int64_t e = threadIdx.x; e < hd; e += blockDim.x) {
    float acc = 0;
    for (int64_t s0 = 0; s0 <= p; s0 += kBatch) {
      float vv[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) vv[u] = s0 + u <= p ? vb[(s0 + u) * hd + e] : 0.0f;
#pragma unroll
      for (int u = 0; u < kBatch; ++u)
        if (s0 + u <= p) acc = __fadd_rn(acc, __fmul_rn(__fmul_rn(sc[s0 + u], inv), vv[u]));
    }
    o[e] = round_t(acc, t);
    if (ob) ob[(i * nh + h) * hd + e] = bits_t(o[e], t);
  }
}

}  // namespace

void embed(const float* table, const int32_t* ids, int64_t n, int64_t h, float* x, void* stream) {
  if (n * h == 0) return;
  k_embed<<<blocks_for(n * h, 256), 256, 0, st(stream)>>>(table, ids, n, h, x);
  check_launch("embed");
}

void to_bits16(const float* x, int64_t n, DType t, uint16_t* out, void* stream) {
  check_bits16(t, true, "to_bits16");
  const int c = code_of(t);
  if (n == 0) return;
  k_to_bits<<<blocks_for(n, 256), 256, 0, st(stream)>>>(x, n, c, out);
  check_launch("to_bits16");
}

void from_bits16(const uint16_t* in, int64_t n, DType t, float* x, void* stream) {
  check_bits16(t, true, "from_bits16");
  const int c = code_of(t);
  if (n == 0) return;
  k_from_bits<<<blocks_for(n, 256), 256, 0, st(stream)>>>(in, n, c, x);
  check_launch("from_bits16");
}

void round_bias(float* y, int64_t m, int64_t n, const float* bias, DType t, void* stream) {
  const int c = code_of(t);
  if (m * n == 0 || (c == 0 && !bias)) return;
  k_round_bias<<<blocks_for(m * n, 256), 256, 0, st(stream)>>>(y, m, n, bias, c);
  check_launch("round_bias");
}

void rmsnorm(const float* x, const float* w, int64_t m, int64_t d, float eps, DType t, float* out, void* stream,
             uint16_t* out_bits) {
  if (m == 0) return;
  check_bits16(t, out_bits, "rmsnorm");
  k_rmsnorm<<<static_cast<unsigned>(m), 256, 0, st(stream)>>>(x, w, d, eps, code_of(t), out, out_bits);
  check_launch("rmsnorm");
}

void rope_store_kv(float* q, float* k, const float* v, int64_t n, int64_t nh, int64_t nkv, int64_t hd,
                   const float* cs, int64_t pos0, float* kc, float* vc, int64_t cap, DType t, void* stream,
                   const int32_t* pos_dev, const QkvBits& bits) {
  if (pos0 + n > cap) fail("cuda decoder op rope_store_kv: positions beyond the KV cache");
  check_bits16(t, bits.q || bits.k || bits.v, "rope_store_kv");
  const int64_t total = n * (nh + nkv) * (hd / 2);
  if (total == 0) return;
  k_rope_store<<<blocks_for(total, 256), 256, 0, st(stream)>>>(q, k, v, n, nh, nkv, hd, cs, pos0, pos_dev, kc, vc,
                                                                cap, code_of(t), bits.q, bits.k, bits.v);
  check_launch("rope_store_kv");
}

void attention(const float* q, const float* kc, const float* vc, int64_t n, int64_t pos0, int64_t nh, int64_t nkv,
               int64_t hd, int64_t cap, DType t, float* out, void* stream, const int32_t* pos_dev,
               uint16_t* out_bits) {
  if (n == 0) return;
  check_bits16(t, out_bits, "attention");
  if (hd > kMaxHeadDim) fail("cuda decoder op attention: head_dim " + std::to_string(hd) + " > 256");
  if (pos0 + n > kMaxPositions) {
    fail("cuda decoder op attention: position " + std::to_string(pos0 + n) + " beyond the kernel's limit of " +
         std::to_string(kMaxPositions));
  }
  if (nkv <= 0 || nh % nkv != 0) fail("cuda decoder op attention: heads not a multiple of kv heads");
  // Scores plus 4 floats of slack, rounded to 16 bytes: ptxas merges the guarded tail loads of the
  // score loops into one wider shared load (up to 12 bytes past the last score read; seen with
  // compute-sanitizer memcheck), which must stay inside the allocation.
  const size_t shmem = static_cast<size_t>((pos0 + n + 4 + 3) / 4 * 4) * sizeof(float);
  // The static arrays (q, reduction slots) take ~1.2 KiB; past 32 KiB of scores the 48 KiB default is opted out of.
  if (shmem > 32 * 1024) {
    check(cudaFuncSetAttribute(k_attention, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shmem)),
          "attention shared memory opt-in");
  }
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  k_attention<<<dim3(static_cast<unsigned>(nh), static_cast<unsigned>(n)), kAttnThreads, shmem, st(stream)>>>(
      q, kc, vc, pos0, pos_dev, nh, nkv, hd, cap, scale, code_of(t), out, out_bits);
  check_launch("attention");
}

void silu_mul(float* g, const float* u, int64_t n, DType t, void* stream, const uint16_t* g_bits,
              const uint16_t* u_bits, uint16_t* out_bits) {
  if (n == 0) return;
  check_bits16(t, g_bits || u_bits || out_bits, "silu_mul");
  k_silu_mul<<<blocks_for(n, 256), 256, 0, st(stream)>>>(g, u, n, code_of(t), g_bits, u_bits, out_bits);
  check_launch("silu_mul");
}

void residual_add(float* x, const float* y, int64_t n, DType t, void* stream, const uint16_t* y_bits) {
  if (n == 0) return;
  check_bits16(t, y_bits, "residual_add");
  k_residual<<<blocks_for(n, 256), 256, 0, st(stream)>>>(x, y, n, code_of(t), y_bits);
  check_launch("residual_add");
}

void synchronize(void* stream) {
  check(stream ? cudaStreamSynchronize(st(stream)) : cudaDeviceSynchronize(), "synchronize");
}

// ---- cuBLAS --------------------------------------------------------------------------------------------
namespace {

const char* blas_status(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "invalid value";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "execution failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "not supported";
    default: return "error";
  }
}

class CublasGemm final : public Gemm {
 public:
  explicit CublasGemm(int device) {
    check(cudaSetDevice(device < 0 ? 0 : device), "cudaSetDevice");
    const cublasStatus_t s = cublasCreate(&h_);
    if (s != CUBLAS_STATUS_SUCCESS) fail(std::string("cublasCreate: ") + blas_status(s));
  }
  ~CublasGemm() override { cublasDestroy(h_); }

  void run(const void* x, int64_t m, int64_t k, const void* w, DType wt, int64_t n, float* y, void* stream) override {
    if (m == 0) return;
    if (wt != DType::BF16 && wt != DType::F32) fail(std::string("cuda dense GEMM: weight dtype ") + dtype_name(wt));
    cublasSetStream(h_, st(stream));
    // f32 GEMMs must stay f32 (no TF32), so that an f32 model matches its f64 reference; bf16 GEMMs may use
    // any tensor-core algorithm (inputs are bf16 already, accumulation f32).
    cublasSetMathMode(h_, wt == DType::F32 ? CUBLAS_PEDANTIC_MATH : CUBLAS_DEFAULT_MATH);
    const float one = 1.0f, zero = 0.0f;
    const cudaDataType ab = wt == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
    // Row-major y (m, n) = x (m, k) · Wᵀ is column-major yᵀ (n, m) = W (k, n)ᵀ · xᵀ (k, m).
    const cublasStatus_t s =
        cublasGemmEx(h_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &one,
                     w, ab, static_cast<int>(k), x, ab, static_cast<int>(k), &zero, y, CUDA_R_32F, static_cast<int>(n),
                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) {
      fail(std::string("cuda dense GEMM (") + std::to_string(m) + "x" + std::to_string(k) + " · " + std::to_string(n) +
           "x" + std::to_string(k) + "ᵀ): cublasGemmEx: " + blas_status(s));
    }
  }

 private:
  cublasHandle_t h_ = nullptr;
};

}  // namespace

std::unique_ptr<Gemm> Gemm::create(int device) { return std::make_unique<CublasGemm>(device); }

}  // namespace nvfp4::cuda_ops
