// Decoder ops on the GPU (see decoder_ops.h for what each computes). Top-down: rounding helpers, block
// reductions, one kernel per op with its launcher, then the cuBLAS GEMM.
#include "backends/cuda/ops/decoder_ops.h"

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>
#include <type_traits>

#include "backends/cuda/cuda_util.cuh"
#include "backends/cuda/device/device_info.h"
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

// A KV cache entry (decoder_ops.h's KvCache): C float holds the value, C uint16_t its T bit pattern (t 1 or 2).
// Both 16-bit conversions and a select, no branch: a branch on t between a block's cache loads kept them from
// being issued together (each waited for the one before; attention took twice as long).
template <typename C>
__device__ __forceinline__ float cache_value(C c, int t) {
  if constexpr (std::is_same_v<C, float>) {
    return c;
  } else {
    const float b = bf16_value(c), h = __half2float(__ushort_as_half(c));
    return t == 1 ? b : h;
  }
}
template <typename C>
__device__ __forceinline__ C cache_entry(float x, int t) {
  if constexpr (std::is_same_v<C, float>) return x;
  else return bits_t(x, t);
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

using nvfp4::cuda::detail::pdl_launch_dependents;
using nvfp4::cuda::detail::pdl_wait;

// Programmatic dependent launch (sm_90+) of the op kernels: each may be scheduled while the kernel before it
// in the stream (a linear, another op) still runs. Every op kernel therefore begins with pdl_wait, before
// which it reads only what no kernel writes (norm weights), and then calls pdl_launch_dependents, so that the
// kernel after it (an NVFP4 linear streams its first weights before it waits) starts while it runs, and at
// most one grid waits ahead of the running one. Below sm_90, and where the image that runs was compiled for an
// earlier architecture (programmatic_launch_supported), the launches are ordinary (pdl_wait returns at once).
// An attribute of the current device, read once per device (cache: value + 1 per device, 0 = not read yet).
int current_device_attribute(cudaDeviceAttr a, std::atomic<int> (&cache)[64]) {
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  if (dev < 64 && cache[dev].load(std::memory_order_relaxed) > 0) return cache[dev].load(std::memory_order_relaxed) - 1;
  int v = 0;
  check(cudaDeviceGetAttribute(&v, a, dev), "cudaDeviceGetAttribute");
  if (dev < 64) cache[dev].store(v + 1, std::memory_order_relaxed);
  return v;
}
bool programmatic_here() {
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  return programmatic_launch_supported(dev);
}
int sms_here() {
  static std::atomic<int> sms[64];
  return current_device_attribute(cudaDevAttrMultiProcessorCount, sms);
}

template <typename... P, typename... A>
void launch_op(const char* op, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, void* stream,
               A&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = st(stream);
  cudaLaunchAttribute attr[1];
  if (programmatic_here()) {
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  check(cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...), op);
}

// The first statements of every op kernel (see programmatic_here).
__device__ __forceinline__ void op_begin() {
  pdl_wait();
  pdl_launch_dependents();
}

// ---- elementwise -------------------------------------------------------------------------------------
__global__ void k_embed(const float* table, const int32_t* ids, int64_t n, int64_t h, float* x) {
  op_begin();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n * h) return;
  const int64_t r = i / h, c = i % h;
  x[i] = table[static_cast<int64_t>(ids[r]) * h + c];
}

__global__ void k_to_bits(const float* x, int64_t n, int t, uint16_t* out) {
  op_begin();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  out[i] = bits_t(x[i], t);
}

__global__ void k_from_bits(const uint16_t* in, int64_t n, int t, float* x) {
  op_begin();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  x[i] = value_t(in[i], t);
}

__global__ void k_round_bias(float* y, int64_t m, int64_t n, const float* bias, int t) {
  op_begin();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= m * n) return;
  const float r = round_t(y[i], t);
  y[i] = bias ? round_t(__fadd_rn(r, bias[i % n]), t) : r;
}

// Inputs from their T bits where given (gb, ub), the result also as T bits where ob is given.
__global__ void k_silu_mul(float* g, const float* u, int64_t n, int t, const uint16_t* gb, const uint16_t* ub,
                           uint16_t* ob, int64_t bcols, int64_t bstride) {
  op_begin();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int64_t bi = bcols > 0 ? i / bcols * bstride + i % bcols : i;
  const float gv = gb ? value_t(gb[bi], t) : g[i];
  const float r = cuda::detail::swiglu_value(gv, ub ? value_t(ub[bi], t) : u[i], [t](float x) { return round_t(x, t); });
  g[i] = r;
  if (ob) ob[i] = bits_t(r, t);
}

__global__ void k_residual(float* x, const float* y, int64_t n, int t, const uint16_t* yb) {
  op_begin();
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  x[i] = cuda::detail::residual_value(x[i], yb ? value_t(yb[i], t) : y[i], [t](float v) { return round_t(v, t); });
}

// ---- rmsnorm: one block per row ------------------------------------------------------------------------
// Each thread's elements are j = tid, tid + B, ... in that order (B = blockDim), kRmsBatch loads in flight at a
// time (one row per block: at decode the loads' latency, not their bandwidth, is the cost). The launcher gives
// rows of up to kRmsBatch * 1024 elements enough threads for one round, whose values stay in registers between
// the sum of squares and the output, and whose norm weights are read before the wait for the previous kernel.
constexpr int kRmsBatch = 8;

__global__ void k_rmsnorm(const float* x, const float* w, int64_t d, float eps, int t, float* out, uint16_t* ob) {
  __shared__ double sh[32];
  const int64_t B = blockDim.x;
  const bool one_round = d <= kRmsBatch * B;
  float xv[kRmsBatch], wv[kRmsBatch];
  if (one_round) {
#pragma unroll
    for (int u = 0; u < kRmsBatch; ++u) wv[u] = threadIdx.x + u * B < d ? w[threadIdx.x + u * B] : 0.0f;
  }
  op_begin();
  const float* xr = x + blockIdx.x * d;
  float* orow = out + blockIdx.x * d;
  double ss = 0;
  for (int64_t j0 = threadIdx.x; j0 < d; j0 += kRmsBatch * B) {
#pragma unroll
    for (int u = 0; u < kRmsBatch; ++u) xv[u] = j0 + u * B < d ? xr[j0 + u * B] : 0.0f;
#pragma unroll
    for (int u = 0; u < kRmsBatch; ++u)
      if (j0 + u * B < d) ss += static_cast<double>(xv[u]) * xv[u];
  }
  ss = block_sum(ss, sh);
  const float r = static_cast<float>(1.0 / sqrt(ss / static_cast<double>(d) + static_cast<double>(eps)));
  for (int64_t j0 = threadIdx.x; j0 < d; j0 += kRmsBatch * B) {
    if (!one_round) {
#pragma unroll
      for (int u = 0; u < kRmsBatch; ++u) {
        const bool in = j0 + u * B < d;
        xv[u] = in ? xr[j0 + u * B] : 0.0f;
        wv[u] = in ? w[j0 + u * B] : 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < kRmsBatch; ++u) {
      const int64_t j = j0 + u * B;
      if (j >= d) break;
      const float v = round_t(__fmul_rn(round_t(__fmul_rn(xv[u], r), t), wv[u]), t);
      orow[j] = v;
      if (ob) ob[blockIdx.x * d + j] = bits_t(v, t);
    }
  }
}

// ---- RoPE + KV store: one thread per (token, head, i < hd/2) over q heads then k heads ------------------
template <typename C>
__global__ void k_rope_store(float* q, float* k, const float* v, int64_t n, int64_t nh, int64_t nkv, int64_t hd,
                             const float* cs, int64_t pos0, const int32_t* pos_dev, C* kc, C* vc,
                             int64_t cap, int t, const uint16_t* qb, const uint16_t* kb, const uint16_t* vb,
                             int64_t bstride) {
  op_begin();
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
  // Where the bits are read: rows of bstride elements per token, or packed like the f32 arrays.
  const int64_t bat = bstride > 0 ? i * bstride + h * hd : at;
  const uint16_t* vecb = is_q ? qb : kb;
  const float a = vecb ? value_t(vecb[bat + e], t) : vec[e], b = vecb ? value_t(vecb[bat + e + half], t) : vec[e + half];
  const float na = round_t(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)), t);
  const float nb = round_t(__fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s)), t);
  vec[e] = na;
  vec[e + half] = nb;
  if (!is_q) {
    C* kd = kc + (h * cap + p) * hd;
    C* vd = vc + (h * cap + p) * hd;
    const int64_t vat = (i * nkv + h) * hd;
    kd[e] = cache_entry<C>(na, t);
    kd[e + half] = cache_entry<C>(nb, t);
    vd[e] = cache_entry<C>(vb ? value_t(vb[bat + e], t) : v[vat + e], t);
    vd[e + half] = cache_entry<C>(vb ? value_t(vb[bat + e + half], t) : v[vat + e + half], t);
  }
}

// ---- attention: blocks per (group of query heads, token, split of the positions); scores in shared memory ---
// Block (x, i, z) takes the kG query heads kG·x .. kG·x + kG - 1, which read one kv head (kG divides nh / nkv),
// and positions [lo, hi) of token i's p + 1: split z of `splits` ranges of ceil((p + 1) / splits) (decoding;
// splits = 1 otherwise). Each key and value row is loaded once for the kG heads. Warp w takes the positions
// lo + w, lo + w + kAttnWarps, ...; lane l the head elements e = l + 32u (u < kE). Per head: the scores are each
// lane's partial dot product over its elements in order of u, then a butterfly sum over the lanes (every lane
// ends with the same value: each step adds the same two numbers on both sides); weights e_s = exp(score_s - m)
// against the block's maximum m, their sum l in the fixed order of block_sum; the weighted sum: each warp sums
// its positions in order, then the warps' sums are added in warp order. One split: out = acc / l. Several:
// the block stores (acc, m, l) per head in the scratch and the last block of the group to arrive adds them in
// split order, scaled by exp(m_z - M) (M the largest m_z): out = Σ_z c_z acc_z / Σ_z c_z l_z. Loads of kP
// positions are issued before they are used; at decode a warp's first kP value rows are loaded with its first
// key rows and kept in registers (a split is often one such round: one trip to memory for both).
constexpr int kAttnWarps = 4;
constexpr int kAttnThreads = 32 * kAttnWarps;
constexpr int64_t kMaxHeadDim = 256;
constexpr int64_t kMaxScores = 32768;  // per block (heads x positions): 128 KiB (opt-in shared memory above 32 KiB)
// Decoding: a split takes at least kMinSplitPositions positions, and the grid offers enough splits for ranges
// of kSplitPositions at the cache's capacity, at most kMaxSplits, and no more blocks (one head each) than one
// wave holds at kDecodeBlocksPerSm per SM (the one-token kernel's launch bound): a second wave repeats each
// block's fixed latency (32 heads on 132 SMs at ~1800 positions: 32 splits, two waves, 2.66 ms per step of the
// Llama-3-8B-shaped model; 16 splits, one wave, 2.57 ms; docs/PERF.md).
constexpr int64_t kMinSplitPositions = 32, kSplitPositions = 64, kMaxSplits = 64;
constexpr int kDecodeBlocksPerSm = 4;
// Positions per warp and round: one-token steps (kDecode) 8 where the registers allow; a prompt's blocks (many
// per head: throughput, not latency) 4, with the value rows in the second pass only.
template <int kE, bool kDecode, int kG>
constexpr int attn_pos() {
  return kDecode && kE <= 4 && kE * kG <= 8 ? 8 : 4;
}
// Query heads per block of a prompt: 4, 2 or 1, dividing the group of query heads that share a kv head (at most
// 2 for head_dim > 128, whose rows take twice the registers). A one-token step takes one: its blocks are few
// and short, and each head's maxima, sums and outputs one after another in one block made the Llama-3-8B-shaped
// model's step slower (2.22 -> 2.43 ms at 10-73 positions, 2.67 -> 3.18 at ~1800; docs/PERF.md), while a 1751-token
// prompt, whose blocks are many, took 283 -> 233 ms with 4.
int attn_heads_per_block(int64_t nh, int64_t nkv, int64_t hd) {
  const int64_t group = nh / nkv;
  if (group % 4 == 0 && hd <= 128) return 4;
  return group % 2 == 0 ? 2 : 1;
}

// The lane's elements of kP cache rows s0, s0 + kAttnWarps, ... (zero at hi and past, or past hd).
template <int kP, int kE, typename C>
__device__ __forceinline__ void load_positions(const C* rows, int64_t s0, int64_t hi, int64_t hd, int l, int t,
                                               float (&r)[kP][kE]) {
  C c[kP][kE];  // every load issued before any is converted
#pragma unroll
  for (int j = 0; j < kP; ++j) {
    const int64_t s = s0 + j * kAttnWarps;
#pragma unroll
    for (int u = 0; u < kE; ++u) c[j][u] = s < hi && l + 32 * u < hd ? rows[s * hd + l + 32 * u] : C(0);
  }
#pragma unroll
  for (int j = 0; j < kP; ++j)
#pragma unroll
    for (int u = 0; u < kE; ++u) r[j][u] = cache_value<C>(c[j][u], t);
}

// Scratch of a decoding step: one arrival counter per block of heads (nh of them at most, padded to 256 bytes),
// then per head and split hd + 2 floats: acc[hd], m, l.
constexpr size_t counter_bytes(int64_t nh) { return static_cast<size_t>((nh * 4 + 255) / 256 * 256); }

// One-token steps' blocks are held to 128 registers (4 blocks per SM): the T-bits cache's conversions took the
// hd 128 kernel to 133 (3 blocks per SM) otherwise.
template <int kE, bool kDecode, int kG, typename C>
__global__ void __launch_bounds__(kAttnThreads, kDecode ? kDecodeBlocksPerSm : 1)
    k_attention(const float* q, const C* kc, const C* vc, int64_t pos0, const int32_t* pos_dev, int64_t nh,
                int64_t nkv, int64_t hd, int64_t cap, float scale, int t, float* out, uint16_t* ob, int max_splits,
                int64_t srow, int* counters, float* partial) {
  constexpr int kP = attn_pos<kE, kDecode, kG>();
  op_begin();
  if (pos_dev) pos0 = *pos_dev;
  extern __shared__ float sc[];  // kG rows of srow scores
  __shared__ float part[kAttnWarps][kE * 32];
  __shared__ float red[32];
  __shared__ int last;
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  const int64_t h0 = static_cast<int64_t>(blockIdx.x) * kG, i = blockIdx.y;
  const int z = static_cast<int>(blockIdx.z);
  const int64_t p = pos0 + i, g = h0 / (nh / nkv);
  const int64_t want = (p + kMinSplitPositions) / kMinSplitPositions;
  const int splits = want < max_splits ? static_cast<int>(want) : max_splits;
  if (z >= splits) return;
  const int64_t per = (p + splits) / splits;
  const int64_t lo = z * per, hi = min(p + 1, lo + per);
  const C* kb = kc + g * cap * hd;
  const C* vb = vc + g * cap * hd;
  float qv[kG][kE];
#pragma unroll
  for (int r = 0; r < kG; ++r)
#pragma unroll
    for (int u = 0; u < kE; ++u) qv[r][u] = l + 32 * u < hd ? q[(i * nh + h0 + r) * hd + l + 32 * u] : 0.0f;
  constexpr int64_t kRound = kAttnWarps * kP;
  float v0[kDecode ? kP : 1][kE];  // the warp's first value rows (kDecode)
  float mx[kG];
#pragma unroll
  for (int r = 0; r < kG; ++r) mx[r] = -INFINITY;
  for (int64_t s0 = lo + w; s0 < hi; s0 += kRound) {
    float kv[kP][kE];
    load_positions(kb, s0, hi, hd, l, t, kv);
    if constexpr (kDecode) {
      if (s0 == lo + w) load_positions(vb, s0, hi, hd, l, t, v0);
    }
#pragma unroll
    for (int j = 0; j < kP; ++j) {
      const int64_t s = s0 + j * kAttnWarps;
#pragma unroll
      for (int r = 0; r < kG; ++r) {
        float d = 0;
#pragma unroll
        for (int u = 0; u < kE; ++u) d = __fadd_rn(d, __fmul_rn(qv[r][u], kv[j][u]));
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) d = __fadd_rn(d, __shfl_xor_sync(0xFFFFFFFFu, d, o));
        if (s < hi) {
          d = __fmul_rn(d, scale);
          if (l == 0) sc[r * srow + s - lo] = d;
          mx[r] = fmaxf(mx[r], d);
        }
      }
    }
  }
  float sum[kG];
#pragma unroll
  for (int r = 0; r < kG; ++r) {
    mx[r] = block_max(mx[r], red);  // its barriers also make the scores visible
    float acc = 0;
    for (int64_t s = lo + threadIdx.x; s < hi; s += blockDim.x) {
      const float e = expf(__fsub_rn(sc[r * srow + s - lo], mx[r]));
      sc[r * srow + s - lo] = e;
      acc = __fadd_rn(acc, e);
    }
    sum[r] = block_sum(acc, red);
  }
  __syncthreads();
  float acc[kG][kE];
#pragma unroll
  for (int r = 0; r < kG; ++r)
#pragma unroll
    for (int u = 0; u < kE; ++u) acc[r][u] = 0;
  for (int64_t s0 = lo + w; s0 < hi; s0 += kRound) {
    float vv[kP][kE];
    if (kDecode && s0 == lo + w) {
#pragma unroll
      for (int j = 0; j < kP; ++j)
#pragma unroll
        for (int u = 0; u < kE; ++u) vv[j][u] = v0[kDecode ? j : 0][u];
    } else {
      load_positions(vb, s0, hi, hd, l, t, vv);
    }
#pragma unroll
    for (int j = 0; j < kP; ++j) {
      const int64_t s = s0 + j * kAttnWarps;
      if (s >= hi) break;
#pragma unroll
      for (int r = 0; r < kG; ++r) {
        const float e = sc[r * srow + s - lo];
#pragma unroll
        for (int u = 0; u < kE; ++u) acc[r][u] = __fadd_rn(acc[r][u], __fmul_rn(e, vv[j][u]));
      }
    }
  }
  // Per head: the warps' sums added in warp order; one split divides, several store their sums.
  const int64_t row = hd + 2;
#pragma unroll
  for (int r = 0; r < kG; ++r) {
    const int64_t h = h0 + r;
    __syncthreads();  // the previous head's sums have been read
#pragma unroll
    for (int u = 0; u < kE; ++u) part[w][l + 32 * u] = acc[r][u];
    __syncthreads();
    float* const mine = splits > 1 ? partial + (h * max_splits + z) * row : nullptr;
    for (int64_t e = threadIdx.x; e < hd; e += blockDim.x) {
      float o = part[0][e];
#pragma unroll
      for (int v = 1; v < kAttnWarps; ++v) o = __fadd_rn(o, part[v][e]);
      if (splits == 1) {
        o = round_t(__fdiv_rn(o, sum[r]), t);
        out[(i * nh + h) * hd + e] = o;
        if (ob) ob[(i * nh + h) * hd + e] = bits_t(o, t);
      } else {
        mine[e] = o;
      }
    }
    if (splits > 1 && threadIdx.x == 0) {
      mine[hd] = mx[r];
      mine[hd + 1] = sum[r];
    }
  }
  if (splits == 1) return;
  // Several splits (decoding: i = 0): the last block of this group of heads to arrive adds them.
  __threadfence();  // the sums are visible device-wide before the count says so
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(&counters[blockIdx.x], 1) == splits - 1;
    if (last) counters[blockIdx.x] = 0;  // every split has counted: ready for the next call
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int r = 0; r < kG; ++r) {
    const int64_t h = h0 + r;
    const float* const head = partial + h * max_splits * row;
    float mall = -INFINITY;
    for (int zz = 0; zz < splits; ++zz) mall = fmaxf(mall, __ldcg(head + zz * row + hd));
    for (int64_t e = threadIdx.x; e < hd; e += blockDim.x) {
      float num = 0, den = 0;
      for (int zz = 0; zz < splits; ++zz) {
        const float* rz = head + zz * row;
        const float c = expf(__fsub_rn(__ldcg(rz + hd), mall));
        den = __fadd_rn(den, __fmul_rn(c, __ldcg(rz + hd + 1)));
        num = __fadd_rn(num, __fmul_rn(c, __ldcg(rz + e)));
      }
      const float o = round_t(__fdiv_rn(num, den), t);
      out[h * hd + e] = o;
      if (ob) ob[h * hd + e] = bits_t(o, t);
    }
  }
}

}  // namespace

void embed(const float* table, const int32_t* ids, int64_t n, int64_t h, float* x, void* stream) {
  if (n * h == 0) return;
  // An ordinary launch: in a decoding step the work before it is the copy of the token ids.
  k_embed<<<blocks_for(n * h, 256), 256, 0, st(stream)>>>(table, ids, n, h, x);
  check_launch("embed");
}

void to_bits16(const float* x, int64_t n, DType t, uint16_t* out, void* stream) {
  check_bits16(t, true, "to_bits16");
  const int c = code_of(t);
  if (n == 0) return;
  launch_op("to_bits16", k_to_bits, blocks_for(n, 256), 256, 0, stream, x, n, c, out);
}

void from_bits16(const uint16_t* in, int64_t n, DType t, float* x, void* stream) {
  check_bits16(t, true, "from_bits16");
  const int c = code_of(t);
  if (n == 0) return;
  launch_op("from_bits16", k_from_bits, blocks_for(n, 256), 256, 0, stream, in, n, c, x);
}

void round_bias(float* y, int64_t m, int64_t n, const float* bias, DType t, void* stream) {
  const int c = code_of(t);
  if (m * n == 0 || (c == 0 && !bias)) return;
  launch_op("round_bias", k_round_bias, blocks_for(m * n, 256), 256, 0, stream, y, m, n, bias, c);
}

void rmsnorm(const float* x, const float* w, int64_t m, int64_t d, float eps, DType t, float* out, void* stream,
             uint16_t* out_bits) {
  if (m == 0) return;
  check_bits16(t, out_bits, "rmsnorm");
  // One round of kRmsBatch loads per thread where 1024 threads suffice; at least 128 threads.
  const int64_t want = (d + kRmsBatch - 1) / kRmsBatch;
  const int threads = static_cast<int>(std::min<int64_t>(1024, std::max<int64_t>(128, (want + 31) / 32 * 32)));
  launch_op("rmsnorm", k_rmsnorm, dim3(static_cast<unsigned>(m)), dim3(threads), 0, stream, x, w, d, eps, code_of(t),
            out, out_bits);
}

void rope_store_kv(float* q, float* k, const float* v, int64_t n, int64_t nh, int64_t nkv, int64_t hd,
                   const float* cs, int64_t pos0, const KvCache& cache, int64_t cap, DType t, void* stream,
                   const int32_t* pos_dev, const QkvBits& bits) {
  if (pos0 + n > cap) fail("cuda decoder op rope_store_kv: positions beyond the KV cache");
  check_bits16(t, bits.q || bits.k || bits.v, "rope_store_kv");
  check_bits16(t, cache.bits, "rope_store_kv (KV cache)");
  if (bits.stride < 0 || (bits.stride > 0 && bits.stride < std::max(nh, nkv) * hd))
    fail("cuda decoder op rope_store_kv: bits rows of " + std::to_string(bits.stride) + " elements, shorter than a row");
  const int64_t total = n * (nh + nkv) * (hd / 2);
  if (total == 0) return;
  auto go = [&](auto* kc, auto* vc) {
    launch_op("rope_store_kv", k_rope_store<std::remove_pointer_t<decltype(kc)>>, blocks_for(total, 256), 256, 0,
              stream, q, k, v, n, nh, nkv, hd, cs, pos0, pos_dev, kc, vc, cap, code_of(t), bits.q, bits.k, bits.v,
              bits.stride);
  };
  if (cache.bits) go(static_cast<uint16_t*>(cache.k), static_cast<uint16_t*>(cache.v));
  else go(static_cast<float*>(cache.k), static_cast<float*>(cache.v));
}

namespace {
// Splits for ranges of kSplitPositions at the cache's capacity, 1 .. most.
int64_t splits_for_cap(int64_t cap, int64_t most) {
  return std::clamp<int64_t>((cap + kSplitPositions - 1) / kSplitPositions, 1, most);
}
}  // namespace

int attention_splits(int64_t n, int64_t nh, int64_t cap, int sms) {
  if (n != 1 || nh <= 0) return 1;
  if (sms <= 0) sms = sms_here();
  const int64_t wave = static_cast<int64_t>(sms) * kDecodeBlocksPerSm;
  return static_cast<int>(splits_for_cap(cap, std::max<int64_t>(1, std::min<int64_t>(kMaxSplits, wave / nh))));
}

size_t attention_scratch_bytes(int64_t nh, int64_t hd, int64_t cap) {
  const int64_t splits = splits_for_cap(cap, kMaxSplits);  // at least attention_splits on any device
  return counter_bytes(nh) + static_cast<size_t>(nh * splits * (hd + 2)) * sizeof(float);
}

void attention(const float* q, const KvCache& cache, int64_t n, int64_t pos0, int64_t nh, int64_t nkv, int64_t hd,
               int64_t cap, DType t, float* out, void* stream, const int32_t* pos_dev, uint16_t* out_bits,
               void* scratch) {
  if (n == 0) return;
  check_bits16(t, out_bits, "attention");
  check_bits16(t, cache.bits, "attention (KV cache)");
  if (hd > kMaxHeadDim) fail("cuda decoder op attention: head_dim " + std::to_string(hd) + " > 256");
  if (nkv <= 0 || nh % nkv != 0) fail("cuda decoder op attention: heads not a multiple of kv heads");
  if (pos0 + n > cap) fail("cuda decoder op attention: positions beyond the KV cache");
  const int splits = attention_splits(n, nh, cap);
  if (splits > 1 && !scratch) {
    fail("cuda decoder op attention: a cache of " + std::to_string(cap) + " positions splits decoding over " +
         std::to_string(splits) + " blocks per head, which needs scratch (attention_scratch_bytes)");
  }
  // Positions per block, at most: below the last split count, a split takes <= kMinSplitPositions (the count
  // is at least (p + 1) / kMinSplitPositions); with all of them, ceil((p + 1) / splits) at p <= pos0.
  const int64_t per = splits > 1 ? std::max(kMinSplitPositions, (pos0 + n + splits - 1) / splits) : pos0 + n;
  // A prompt's heads per block, halved while their scores would not fit (long prompts keep one head per block
  // and the full limit).
  int heads = n == 1 ? 1 : attn_heads_per_block(nh, nkv, hd);
  while (heads > 1 && heads * per > kMaxScores) heads /= 2;
  if (heads * per > kMaxScores) {
    fail("cuda decoder op attention: " + std::to_string(per) + " positions for one block, beyond the kernel's limit of " +
         std::to_string(kMaxScores / heads));
  }
  // A head's scores plus 4 floats of slack, rounded to 16 bytes: ptxas may merge guarded tail loads of the
  // score loops into one wider shared load (up to 12 bytes past the last score read; seen with
  // compute-sanitizer memcheck on an earlier form of the kernel), which must stay inside its row.
  const int64_t srow = (per + 4 + 3) / 4 * 4;
  const size_t shmem = static_cast<size_t>(heads * srow) * sizeof(float);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  int* const counters = splits > 1 ? static_cast<int*>(scratch) : nullptr;
  float* const partial = splits > 1 ? reinterpret_cast<float*>(static_cast<char*>(scratch) + counter_bytes(nh)) : nullptr;
  // C: the cache's element (float, or uint16_t for T bit patterns).
  auto go = [&](auto kernel, auto* kc, auto* vc) {
    // The static arrays (per-warp sums, reduction slots) take <= 4.2 KiB; past 32 KiB of scores the 48 KiB
    // default is opted out of.
    if (shmem > 32 * 1024) {
      check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shmem)),
            "attention shared memory opt-in");
    }
    launch_op("attention", kernel,
              dim3(static_cast<unsigned>(nh / heads), static_cast<unsigned>(n), static_cast<unsigned>(splits)),
              dim3(kAttnThreads), shmem, stream, q, kc, vc, pos0, pos_dev, nh, nkv, hd, cap, scale, code_of(t), out,
              out_bits, splits, srow, counters, partial);
  };
  auto by_heads = [&](auto e, auto* kc, auto* vc) {
    constexpr int kE = decltype(e)::value;
    using C = std::remove_const_t<std::remove_pointer_t<decltype(kc)>>;
    if (n == 1) go(k_attention<kE, true, 1, C>, kc, vc);
    else if (heads == 1) go(k_attention<kE, false, 1, C>, kc, vc);
    else if (heads == 2) go(k_attention<kE, false, 2, C>, kc, vc);
    else if constexpr (kE <= 4) go(k_attention<kE, false, 4, C>, kc, vc);
    else fail("cuda decoder op attention: 4 query heads per block need head_dim <= 128");
  };
  auto by_dim = [&](auto* kc, auto* vc) {
    if (hd <= 32) by_heads(std::integral_constant<int, 1>{}, kc, vc);
    else if (hd <= 64) by_heads(std::integral_constant<int, 2>{}, kc, vc);
    else if (hd <= 128) by_heads(std::integral_constant<int, 4>{}, kc, vc);
    else by_heads(std::integral_constant<int, 8>{}, kc, vc);
  };
  if (cache.bits) by_dim(static_cast<const uint16_t*>(cache.k), static_cast<const uint16_t*>(cache.v));
  else by_dim(static_cast<const float*>(cache.k), static_cast<const float*>(cache.v));
}

void silu_mul(float* g, const float* u, int64_t n, DType t, void* stream, const uint16_t* g_bits,
              const uint16_t* u_bits, uint16_t* out_bits, int64_t bits_cols, int64_t bits_stride) {
  if (n == 0) return;
  check_bits16(t, g_bits || u_bits || out_bits, "silu_mul");
  if (bits_cols < 0 || (bits_cols > 0 && bits_stride < bits_cols)) fail("cuda decoder op silu_mul: bad bits layout");
  launch_op("silu_mul", k_silu_mul, blocks_for(n, 256), 256, 0, stream, g, u, n, code_of(t), g_bits, u_bits, out_bits,
            bits_cols, bits_stride);
}

void residual_add(float* x, const float* y, int64_t n, DType t, void* stream, const uint16_t* y_bits) {
  if (n == 0) return;
  check_bits16(t, y_bits, "residual_add");
  launch_op("residual_add", k_residual, blocks_for(n, 256), 256, 0, stream, x, y, n, code_of(t), y_bits);
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
