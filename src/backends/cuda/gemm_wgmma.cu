// Hopper (sm_90a) fused GEMM for M > 32: FP4 weights dequantized in registers exactly as in the decode kernel
// (mma_frag.cuh), multiplied with warpgroup MMAs (wgmma m64n64k16, A from registers, B from shared memory,
// f32 accumulation), so each weight is read and dequantized once per 64 tokens and the tensor cores run at
// their Hopper rate.
//
// Block: kWG warpgroups (1 or 2), each 128 weight rows x 64 tokens. Warpgroup w owns the 64-row blocks 2w
// and 2w+1 of the block (each one stored tile group of weight_layout.h); its warp w4 supplies tile w4 of
// each as the A operand: the lane's 16 bytes of codes of one chunk are exactly its A fragments of the
// chunk's four K16 steps (the m64nNk16 A layout is m16n8k16's per warp).
// The A fragment columns of step s are the K values 16t + 4s + {0,1,2,3} of lane t (weight_layout.h), so the
// activations are first written permuted (launch_permute_activations): in every 64-wide chunk, position
// 16s + c holds K = mma_column_k(s, c), and the B operand of step s is the 32 bytes at 32s of each token row
// (128-byte rows, 128-byte swizzle, the layout wgmma's descriptor reads).
// Each K chunk passes through a kStages-deep cp.async ring (activations 8 KB, codes 4 KB and scales 512
// bytes per warpgroup); one __syncthreads per chunk; the chunk's MMAs are issued after its dequantization and
// waited for before the next chunk (ptxas serializes wgmma whose register operands are written while others
// are in flight, so the overlap comes from the other blocks on the SM). blockIdx.z splits K (gemm.cuh).
// Grid: x = token blocks (fastest: blocks reading the same weights run together), y = row blocks, z = K
// splits.
#include <algorithm>
#include <cstdint>
#include <mutex>
#include <string>

#include "backends/cuda/gemm.cuh"
#include "backends/cuda/mma_frag.cuh"

namespace nvfp4::cuda::detail {
namespace {

constexpr int kStages = 4;  // ring depth: copies kStages - 1 chunks ahead
constexpr int kTok = 64;                          // tokens per block (wgmma N)
constexpr int kMT = 2;                            // 64-row blocks per warpgroup
constexpr int kXBytes = kTok * 128;               // activations of one chunk
// Per warpgroup: codes [warp][row block][lane] x 16 bytes, scales x 2 bytes.
constexpr int kWBytesWG = 4 * kMT * 32 * 16, kSBytesWG = 4 * kMT * 32 * 2;
// A stage (rounded up to 1024 bytes: the activations at its start are read through 128-byte swizzle atoms).
constexpr int stage_bytes(int wgs) { return (kXBytes + wgs * (kWBytesWG + kSBytesWG) + 1023) / 1024 * 1024; }
constexpr int smem_bytes(int wgs) { return kStages * stage_bytes(wgs) + 1024; }  // + alignment of the ring
static_assert(kXBytes % 1024 == 0, "swizzle atoms must stay 1024-byte aligned");

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define NVFP4_WGMMA 1
#endif

#ifdef NVFP4_WGMMA
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16- and 4-byte asynchronous copies global -> shared; src_bytes = 0 fills zeros and reads nothing.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Shared-memory matrix descriptor: K-major rows of 128 bytes, 128-byte swizzle, 8-row groups 1024 bytes apart.
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (1ull << 16) | (static_cast<uint64_t>(1024 >> 4) << 32) |
         (1ull << 62);
}

template <typename T>
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[32], const uint32_t (&a)[4], uint64_t desc) {
#define NVFP4_WGMMA_ASM(TY)                                                                                    \
  asm volatile(                                                                                              \
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                                             \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " "                                            \
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26," \
      "%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}\n"                                       \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),        \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),  \
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),             \
        "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),             \
        "+f"(d[30]), "+f"(d[31])                                                                             \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc))
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    NVFP4_WGMMA_ASM("bf16");
  else
    NVFP4_WGMMA_ASM("f16");
#undef NVFP4_WGMMA_ASM
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving accesses of the accumulators across the asynchronous MMAs.
__device__ __forceinline__ void fence_acc(float (&d)[32]) {
#pragma unroll
  for (int i = 0; i < 32; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
#endif

// Two warpgroups are compiled for 2 blocks per SM (128 registers, no spills); one warpgroup takes 158-190
// registers (2-3 blocks per SM; cudaOccupancy tells the host).
template <typename T, int kMode, int kWG>
__global__ void __launch_bounds__(128 * kWG, kWG == 2 ? 2 : 1) wgmma_gemm_kernel(const GemmParams p) {
#ifdef NVFP4_WGMMA
  constexpr bool kVllm = kMode == static_cast<int>(Mode::Vllm);
  constexpr int kThreads = 128 * kWG, kStageBytes = stage_bytes(kWG), kWBytes = kWG * kWBytesWG;
  extern __shared__ uint8_t smem_raw[];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wg = warp >> 2, w4 = warp & 3;
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t base = (raw + 1023) & ~1023u;
  uint8_t* const ring = smem_raw + (base - raw);
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kTok;
  const int64_t groups = stored_tiles(p.n16) / kTileGroup;
  const int kp = p.kc * 64;  // row length of the permuted activations
  const T* x = static_cast<const T*>(p.x);

  // Row block b of this warpgroup: stored tile group g[b]; this warp supplies its tile w4.
  int64_t wblock[kMT];
  bool live[kMT];
#pragma unroll
  for (int b = 0; b < kMT; ++b) {
    const int64_t g = static_cast<int64_t>(blockIdx.y) * kWG * kMT + wg * kMT + b;
    live[b] = g < groups;
    wblock[b] = live[b] ? fragment_block(g * kTileGroup + w4, 0, p.kc) * 32 + lane : 0;
  }
  constexpr int kChunkStride = kTileGroup * 32;

  auto load_x = [&](int slot, int c) {
    const uint32_t st = base + slot * kStageBytes;
#pragma unroll
    for (int i = 0; i < kTok * 8 / kThreads; ++i) {
      const int u = tid + kThreads * i, row = u >> 3, q = u & 7;
      const bool in = m0 + row < p.m;
      const T* src = in ? x + (m0 + row) * kp + c * 64 + q * 8 : x;
      cp_async16(st + row * 128 + ((q ^ (row & 7)) << 4), src, in ? 16u : 0u);
    }
  };
  auto load_w = [&](int slot, int c) {
    const uint32_t st = base + slot * kStageBytes;
#pragma unroll
    for (int b = 0; b < kMT; ++b) {
      const int64_t off = wblock[b] + static_cast<int64_t>(c) * kChunkStride;
      cp_async16(st + kXBytes + ((warp * kMT + b) * 32 + lane) * 16, live[b] ? p.wq + off : p.wq,
                 live[b] ? 16u : 0u);
    }
    // scales: lanes 0..15 copy the 2-byte pairs of lanes 2l, 2l+1 for row block 0, lanes 16..31 for block 1
    {
      const int b = lane >> 4, l2 = lane & 15;
      const int64_t off = wblock[b] - lane + static_cast<int64_t>(c) * kChunkStride + 2 * l2;
      cp_async4(st + kXBytes + kWBytes + ((warp * kMT + b) * 32 + 2 * l2) * 2, live[b] ? p.ws + off : p.ws,
                live[b] ? 4u : 0u);
    }
  };
  static_assert(kMT == 2, "the scale copy assigns half a warp per row block");
  auto load = [&](int slot, int c) {
    load_x(slot, c);
    load_w(slot, c);
  };

  float acc[kMT][32];
#pragma unroll
  for (int b = 0; b < kMT; ++b)
#pragma unroll
    for (int i = 0; i < 32; ++i) acc[b][i] = 0.0f;

  // K split: blockIdx.z takes chunks [c0, c0 + nc).
  const int per = (p.kc + p.splits - 1) / p.splits, c0 = blockIdx.z * per, nc = min(p.kc - c0, per);
  // Dequantized A fragments of chunk i (the lane's four K16 steps of each row block) from ring slot `slot`.
  auto dequant = [&](int slot, uint32_t (&a)[kMT][4][4]) {
    const uint8_t* st = ring + slot * kStageBytes;
    const uint4* wsm = reinterpret_cast<const uint4*>(st + kXBytes) + warp * kMT * 32;
    const uint16_t* ssm = reinterpret_cast<const uint16_t*>(st + kXBytes + kWBytes) + warp * kMT * 32;
    uint4 wv[kMT];
    uint32_t sv[kMT];
#pragma unroll
    for (int b = 0; b < kMT; ++b) {
      wv[b] = wsm[b * 32 + lane];
      sv[b] = ssm[b * 32 + lane];
    }
    uint32_t ws2[kMT][2];
    float wsf[kMT][2];
    scale_regs<T, kVllm, kMT>(sv, p.w_dec, ws2, wsf);
#pragma unroll
    for (int b = 0; b < kMT; ++b) {
      dequant_step<T, kVllm>(wv[b].x, ws2[b], wsf[b], a[b][0]);
      dequant_step<T, kVllm>(wv[b].y, ws2[b], wsf[b], a[b][1]);
      dequant_step<T, kVllm>(wv[b].z, ws2[b], wsf[b], a[b][2]);
      dequant_step<T, kVllm>(wv[b].w, ws2[b], wsf[b], a[b][3]);
    }
  };
  // Issues (does not wait for) the MMAs of the chunk in ring slot `slot`.
  auto mma = [&](int slot, const uint32_t (&a)[kMT][4][4]) {
    const uint32_t xaddr = base + slot * kStageBytes;
    wgmma_fence();
    // Unconditional (a row block past the weight has zero codes and scales): a condition here would be
    // divergent to the compiler, which then serializes the MMAs.
#pragma unroll
    for (int s = 0; s < 4; ++s)
#pragma unroll
      for (int b = 0; b < kMT; ++b) wgmma_m64n64k16<T>(acc[b], a[b][s], smem_desc(xaddr + 32 * s));
    wgmma_commit();
  };
  // Waits for chunk i's copies (every thread) and starts those of chunk i + kAhead, into the slot of chunk
  // i - 1, whose MMAs have completed.
  constexpr int kAhead = kStages - 1;
  auto next = [&](int i) {
    cp_async_wait<kAhead - 1>();
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // cp.async data -> wgmma's reads
    __syncthreads();
    if (i + kAhead < nc) load((i + kAhead) % kStages, c0 + i + kAhead);
    cp_async_commit();
  };

  // Prologue: the first chunks' weights are requested before waiting for the previous kernel (programmatic
  // launch after the permutation: it may still be writing the activations; the first group then holds them).
#pragma unroll
  for (int s = 0; s < kAhead; ++s)
    if (s < nc) load_w(s, c0 + s);
  pdl_wait();
  pdl_launch_dependents();  // the K-split reduction or the next kernel may be scheduled (and wait for us)
#pragma unroll
  for (int s = 0; s < kAhead; ++s) {
    if (s < nc) load_x(s, c0 + s);
    cp_async_commit();
  }
  for (int i = 0; i < nc; ++i) {
    next(i);
    uint32_t a[kMT][4][4];
    dequant(i % kStages, a);
    mma(i % kStages, a);
    wgmma_wait<0>();
  }
#pragma unroll
  for (int b = 0; b < kMT; ++b) fence_acc(acc[b]);

  // acc[b][4j + e] is the m16n8 accumulator layout of token tile j (8 tokens) of this warp's tile.
#pragma unroll
  for (int b = 0; b < kMT; ++b) {
    if (!live[b]) continue;
    const int tile = static_cast<int>((static_cast<int64_t>(blockIdx.y) * kWG * kMT + wg * kMT + b) * kTileGroup + w4);
    if (tile >= p.n16) continue;
    if (p.splits == 1) {
      float t4[1][8][4];
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) t4[0][j][e] = acc[b][4 * j + e];
      store_tiles<T, 8, 1>(p, tile, m0, t4);
      continue;
    }
    // K split: raw f32 partial sums, [split][token][n], added by splitk_reduce_kernel.
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int n = tile * 16 + g + 8 * (e >> 1);
        const int64_t tok = m0 + 8 * j + 2 * t + (e & 1);
        if (n < p.n && tok < p.m) p.partial[(blockIdx.z * p.m + tok) * p.n + n] = acc[b][4 * j + e];
      }
  }
#endif
}

// Permuted copy of the activations (weight_layout.h's mma_column_k): (m, kc·64) T, zeros past K.
// One thread per 4-byte output word (two values, K and K+1 for an even column): word w of a chunk is
// position 2w = 16s + c.
template <typename T>
__global__ void permute_kernel(const T* __restrict__ x, int64_t m, int k, int kc, T* __restrict__ out) {
  pdl_wait();               // x is written by the previous kernel
  pdl_launch_dependents();  // the wgmma kernel may start loading weights
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t words_per_row = static_cast<int64_t>(kc) * 32;
  if (idx >= m * words_per_row) return;
  const int64_t row = idx / words_per_row;
  const int wr = static_cast<int>(idx % words_per_row), chunk = wr >> 5, w = wr & 31;
  const int kx = chunk * 64 + mma_column_k(w >> 3, 2 * (w & 7));
  uint32_t v = 0;
  if (kx < k) v = *reinterpret_cast<const uint32_t*>(x + row * k + kx);
  reinterpret_cast<uint32_t*>(out)[idx] = v;
}

// y = T(T(Σ_z partial[z] · out_scale) + bias), the splits added in order z = 0, 1, ... (deterministic).
template <typename T>
__global__ void splitk_reduce_kernel(const GemmParams p) {
  using A = Act<T>;
  pdl_wait();  // the partial sums
  pdl_launch_dependents();
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t total = p.m * p.n;
  if (idx >= total) return;
  float sum = p.partial[idx];
  for (int z = 1; z < p.splits; ++z) sum += p.partial[z * total + idx];
  T out = A::one(__fmul_rn(sum, p.out_scale));
  if (p.bias) out = A::one(__fadd_rn(A::back(out), p.bias[idx % p.n]));
  static_cast<T*>(p.y)[idx] = out;
}

__global__ void wgmma_probe_kernel(int* out) {
#ifdef NVFP4_WGMMA
  *out = 1;
#else
  *out = 0;
#endif
}

template <typename T, int kMode, int kWG>
struct Wg {
  static constexpr auto kernel = wgmma_gemm_kernel<T, kMode, kWG>;
  static constexpr int kSmem = smem_bytes(kWG);
  // The first call per device raises the kernel's dynamic shared-memory limit (per function and context)
  // and asks its blocks per SM.
  static int blocks_per_sm() {
    static std::mutex mu;
    static int bps[64] = {};
    int dev = 0;
    NVFP4_CUDA_CHECK(cudaGetDevice(&dev));
    std::lock_guard<std::mutex> lock(mu);
    int& b = bps[dev % 64];
    if (b == 0) {
      NVFP4_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
      NVFP4_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel, 128 * kWG, kSmem));
      b = std::max(b, 1);
    }
    return b;
  }
  static void launch(const GemmParams& p, cudaStream_t stream) {
    blocks_per_sm();
    const int64_t groups = stored_tiles(p.n16) / kTileGroup;
    dim3 grid(static_cast<unsigned>(ceil_div(p.m, kTok)), static_cast<unsigned>(ceil_div(groups, kWG * kMT)),
              static_cast<unsigned>(p.splits));
    launch_maybe_programmatic(p.programmatic, kernel, grid, dim3(128 * kWG), kSmem, stream, p);
  }
};

template <typename T, int kMode>
void launch_mode(const GemmParams* p, int wgs, int* bps, cudaStream_t stream) {
  auto go = [&](auto k) {
    using K = decltype(k);
    if (p) K::launch(*p, stream);
    else *bps = K::blocks_per_sm();
  };
  if (wgs == 1) go(Wg<T, kMode, 1>{});
  else go(Wg<T, kMode, 2>{});
}

void dispatch(const GemmParams* p, DType act, Mode mode, int wgs, int* bps, cudaStream_t stream) {
  if (act == DType::BF16) {
    if (mode == Mode::Exact) launch_mode<__nv_bfloat16, 0>(p, wgs, bps, stream);
    else launch_mode<__nv_bfloat16, 1>(p, wgs, bps, stream);
  } else {
    if (mode == Mode::Exact) launch_mode<__half, 0>(p, wgs, bps, stream);
    else launch_mode<__half, 1>(p, wgs, bps, stream);
  }
}

}  // namespace

bool wgmma_available(int device) {
  static std::mutex mu;
  static int state[64] = {};  // 0 unknown, 1 yes, 2 no
  std::lock_guard<std::mutex> lock(mu);
  int& s = state[device % 64];
  if (s == 0) {
    cudaDeviceProp prop{};
    NVFP4_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    int prev = 0;
    NVFP4_CUDA_CHECK(cudaGetDevice(&prev));
    bool yes = false;
    if (prop.major == 9 && prop.minor == 0 && prop.sharedMemPerBlockOptin >= static_cast<size_t>(smem_bytes(2))) {
      NVFP4_CUDA_CHECK(cudaSetDevice(device));
      int* d = nullptr;
      int h = 0;
      NVFP4_CUDA_CHECK(cudaMalloc(&d, sizeof(int)));
      wgmma_probe_kernel<<<1, 1>>>(d);
      const cudaError_t e = cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost);
      cudaFree(d);
      cudaSetDevice(prev);
      NVFP4_CUDA_CHECK(e);
      yes = h == 1;
    }
    s = yes ? 1 : 2;
  }
  return s == 1;
}

void launch_permute_activations(const void* x, DType act, int64_t m, int k, int kc, void* out, bool programmatic,
                                cudaStream_t stream) {
  const int64_t words = m * kc * 32;
  const dim3 blocks(static_cast<unsigned>(ceil_div(words, 256)));
  if (act == DType::BF16)
    launch_maybe_programmatic(programmatic, permute_kernel<__nv_bfloat16>, blocks, dim3(256), 0, stream,
                              static_cast<const __nv_bfloat16*>(x), m, k, kc, static_cast<__nv_bfloat16*>(out));
  else
    launch_maybe_programmatic(programmatic, permute_kernel<__half>, blocks, dim3(256), 0, stream,
                              static_cast<const __half*>(x), m, k, kc, static_cast<__half*>(out));
  NVFP4_CUDA_CHECK(cudaGetLastError());
}

void launch_wgmma_gemm(const GemmParams& p, DType act, Mode mode, int wgs, cudaStream_t stream) {
  dispatch(&p, act, mode, wgs, nullptr, stream);
  NVFP4_CUDA_CHECK(cudaGetLastError());
  if (p.splits > 1) {
    const dim3 blocks(static_cast<unsigned>(ceil_div(p.m * p.n, 256)));
    if (act == DType::BF16)
      launch_maybe_programmatic(p.programmatic, splitk_reduce_kernel<__nv_bfloat16>, blocks, dim3(256), 0, stream, p);
    else
      launch_maybe_programmatic(p.programmatic, splitk_reduce_kernel<__half>, blocks, dim3(256), 0, stream, p);
    NVFP4_CUDA_CHECK(cudaGetLastError());
  }
}

int wgmma_blocks_per_sm(DType act, Mode mode, int wgs) {
  int b = 0;
  dispatch(nullptr, act, mode, wgs, &b, nullptr);
  return b;
}

}  // namespace nvfp4::cuda::detail
