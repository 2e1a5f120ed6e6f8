// bench_wgmma_rate: the on-chip ceiling of the wgmma kernel's consumers (gemm_wgmma.cu), with no memory traffic. One
// block per SM; kW consumer warpgroups of kB row blocks each run the kernel's walk over its ring (wgmma_ring_walk) on
// stages that are already in shared memory. Forms: the kernel's chunk (per row block the lane's 16 bytes of codes and 2
// bytes of scales from shared memory, the scale registers, the four K steps' A fragments by the decode kernel's
// dequantization, exact mode, bf16, and four m64nNk16 MMAs in two commit groups; two A buffers and wgmma_wait<2> as in
// the kernel, one buffer and wgmma_wait<0> for kW = 4 at N = 128); the same MMAs alone in two commit groups or in one;
// the MMAs with A from shared memory too; and the kernel's chunk at N = 8 (an eighth of the tensor work: about the
// dequantization's own cost); and at 64 tokens and 256 rows the dequantization apart from the MMAs (split_kernel,
// docs/PERF.md change 132). Prints, per form, the SM cycles per chunk (the median block of the fastest of three
// launches) against the tensor work at 4096 dense bf16 flops per SM and cycle (N / 2 cycles per m64nNk16): where the
// kernel's chunk takes longer here than its tensor work, its consumers, not its memory, set that much of its time
// (docs/PERF.md, change 128).
//   bench_wgmma_rate [--iters N]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backends/cuda/mma_frag.cuh"
#include "backends/cuda/wgmma_ptx.cuh"

using namespace nvfp4::cuda::detail;

namespace {

#define CK(x)                                                                                \
  do {                                                                                       \
    const cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                                 \
      std::fprintf(stderr, "bench_wgmma_rate: %s: %s\n", #x, cudaGetErrorString(e_));       \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)

#ifdef NVFP4_WGMMA
// D += A·B with both operands from shared memory (A: descriptor da, K-major, 128-byte swizzle).
#define RATE_ACC8(o) \
  "+f"(d[o]), "+f"(d[o + 1]), "+f"(d[o + 2]), "+f"(d[o + 3]), "+f"(d[o + 4]), "+f"(d[o + 5]), "+f"(d[o + 6]), \
      "+f"(d[o + 7])
#define RATE_ACC32(o) RATE_ACC8(o), RATE_ACC8(o + 8), RATE_ACC8(o + 16), RATE_ACC8(o + 24)
__device__ __forceinline__ void wgmma_ss64(float (&d)[32], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,"
      "%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : RATE_ACC32(0)
      : "l"(da), "l"(db));
}
__device__ __forceinline__ void wgmma_ss128(float (&d)[64], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,"
      "%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,"
      "%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : RATE_ACC32(0), RATE_ACC32(32)
      : "l"(da), "l"(db));
}
template <int kN>
__device__ __forceinline__ void wgmma_ss(float (&d)[kN / 2], uint64_t da, uint64_t db) {
  if constexpr (kN == 64) wgmma_ss64(d, da, db);
  else wgmma_ss128(d, da, db);
}
#endif

// The forms: the kernel's chunk (dequantization, then two commit groups of two K steps); the same MMAs alone in
// two groups, or in one; the same MMAs with A from shared memory too (one group).
enum { kDeqMma = 0, kMma2 = 1, kMma1 = 2, kSs1 = 3 };
const char* const kFormName[] = {"dequant + mma (the kernel's)", "mma, 2 groups", "mma, 1 group", "mma A from smem"};

constexpr int kStages = kWgmmaStages;  // the kernel's ring
constexpr int smem_bytes(int n, int rb) { return 1024 + kStages * wgmma_stage_bytes(n, rb); }
// Tensor cycles of one chunk of rb row blocks and n tokens: rb·4 m64nNk16 at n / 2 cycles each.
constexpr double tensor_cycles(int rb, int n) { return 4.0 * rb * (n / 2); }
// split_kernel's A ring: one row block's 64 x 64 bf16 tile, four row blocks a slot, each slot with two mbarriers.
constexpr int kSplitABlock = 64 * 128;
constexpr int split_smem_bytes(int slots) { return smem_bytes(64, 4) + slots * (4 * kSplitABlock + 16); }

#ifdef NVFP4_WGMMA
// The ring's kStages stages of kN tokens and kRB row blocks, every stage full: activations small bf16 values; codes
// and scales any bytes with scales below e4m3's NaN.
template <int kN, int kRB>
__device__ void fill_ring(uint8_t* ring) {
  constexpr int kStage = wgmma_stage_bytes(kN, kRB);
  for (int i = threadIdx.x; i < kStages * kStage / 4; i += blockDim.x) {
    const uint32_t h = (static_cast<uint32_t>(i) * 2654435761u) ^ (i >> 7);
    const int off = (i * 4) % kStage;
    uint32_t v = h;
    if (off < kN * 128) v = (h & 0x807F807Fu) | 0x3C003C00u;                // |x| in [2^-7, 2^-6)
    else if (off >= kN * 128 + kRB * kWgmmaCodeBytes) v = h & 0x3F3F3F3Fu;  // scale bytes < 0x40
    reinterpret_cast<uint32_t*>(ring)[i] = v;
  }
}
#endif

template <int kN, int kW, int kB, int kForm>
__global__ void __launch_bounds__(128 * kW, 1) rate_kernel(int chunks, float* sink, long long* cycles) {
#ifdef NVFP4_WGMMA
  using T = __nv_bfloat16;
  constexpr int kRB = kW * kB, kStage = wgmma_stage_bytes(kN, kRB), kAcc = kN / 2;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_addr(smem_raw), base = (raw + 1023) & ~1023u;
  uint8_t* const ring = smem_raw + (base - raw);
  fill_ring<kN, kRB>(ring);
  __syncthreads();
  const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31, w4 = (tid >> 5) & 3;
  float acc[kB][kAcc];
#pragma unroll
  for (int b = 0; b < kB; ++b)
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc[b][i] = 0.0f;
  uint32_t a0[kB][4][4], a1[kB][4][4];
#pragma unroll
  for (int b = 0; b < kB; ++b)
#pragma unroll
    for (int k = 0; k < 4; ++k)
#pragma unroll
      for (int r = 0; r < 4; ++r) a0[b][k][r] = a1[b][k][r] = 0x3C003C00u + 65u * (tid + 7 * k + r);
  uint32_t sbase = base;
  asm volatile("" : "+r"(sbase));
  const uint32_t codes_off = kN * 128 + (kB * wg) * kWgmmaCodeBytes + (w4 * 32 + lane) * 16;
  const uint32_t scales_off = kN * 128 + kRB * kWgmmaCodeBytes + (kB * wg) * kWgmmaScaleBytes + (w4 * 32 + lane) * 2;
  // The MMAs of K steps k0 .. k1 - 1 of every row block (A from registers, or from shared memory too).
  auto mmas = [&](uint32_t st, uint32_t(&a)[kB][4][4], int k0, int k1) {
#pragma unroll
    for (int k = k0; k < k1; ++k)
#pragma unroll
      for (int b = 0; b < kB; ++b) {
        if constexpr (kForm == kSs1)
          wgmma_ss<kN>(acc[b], smem_desc(st) + 2 * k, smem_desc(st) + 2 * k);
        else
          wgmma_m64k16<T, kN>(acc[b], a[b][k], smem_desc(st) + 2 * k);
      }
  };
  // The kernel's walk over the ring (wgmma_ring_walk), with the stages always full: no barriers to wait on or
  // to release.
  auto chunk = [&](WgmmaRingPos q, uint32_t(&a)[kB][4][4]) {  // two commit groups in every form
    const uint32_t st = sbase + q.s * kStage;
    if constexpr (kForm == kDeqMma) {
      wgmma_chunk<T, 0, kN, kB>(st, codes_off, scales_off, 1.0f, acc, a);
    } else if constexpr (kForm == kMma2) {
#pragma unroll
      for (int h = 0; h < 4; h += 2) {
        wgmma_fence();
        mmas(st, a, h, h + 2);
        wgmma_commit();
      }
    } else {  // kMma1, kSs1: one group, then an empty one
      wgmma_fence();
      mmas(st, a, 0, 4);
      wgmma_commit();
      wgmma_commit();
    }
  };
  __syncthreads();
  const long long t0 = clock64();
  wgmma_ring_walk<kStages, wgmma_two_buffers(kN, kW)>(chunks, a0, a1, chunk, [](WgmmaRingPos) {});
#pragma unroll
  for (int b = 0; b < kB; ++b) fence_acc(acc[b]);
  __syncthreads();
  const long long t1 = clock64();
  float sum = 0.0f;
#pragma unroll
  for (int b = 0; b < kB; ++b)
#pragma unroll
    for (int i = 0; i < kAcc; ++i) sum += acc[b][i];
  if (sum == 12345.0f) sink[blockIdx.x] = sum;  // keeps the MMAs
  if (tid == 0) cycles[blockIdx.x] = t1 - t0;
#endif
}

// SM cycles per chunk of `kernel` (one block per SM): the median block of the fastest of three launches.
template <typename K>
double cycles_per_chunk(K kernel, int threads, int smem, int sms, int chunks, float* sink, long long* dcyc) {
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  std::vector<long long> cyc(sms);
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    kernel<<<sms, threads, smem>>>(chunks, sink, dcyc);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(cyc.data(), dcyc, sms * sizeof(long long), cudaMemcpyDeviceToHost));
    std::sort(cyc.begin(), cyc.end());
    best = std::min(best, static_cast<double>(cyc[sms / 2]) / chunks);
  }
  return best;
}

// The dequantization apart from the MMAs (docs/PERF.md, change 132): kD dequantizing warpgroups write each 64-token
// chunk's A tiles (4 row blocks of 64 rows x 64 K, bf16, K-major with the 128-byte swizzle: 32 KB) into a ring of kAS
// slots, and one warpgroup issues the chunk's sixteen m64n64k16 MMAs with A and B from shared memory, one commit group
// per chunk, releasing a slot once the MMAs that read it are done (wgmma_wait<1>). Each dequantizing thread takes
// the kernel's 16 bytes of codes and 2 of scales per row block, the same scale registers and dequant_step calls, and
// stores its four A registers of each step word either as one 16-byte row segment (kFrag false: a load-time layout
// would put a step word's eight weights on one row) or each at its place in the m64k16 A fragment (kFrag: the
// kernel's layout as it is, 16 four-byte stores per row block); the values here are not checked.
template <int kD, int kAS, bool kFrag>
__global__ void __launch_bounds__(128 * (kD + 1), 1) split_kernel(int chunks, float* sink, long long* cycles) {
#ifdef NVFP4_WGMMA
  using T = __nv_bfloat16;
  constexpr int kN = 64, kRB = 4, kRBD = kRB / kD, kStage = wgmma_stage_bytes(kN, kRB);
  constexpr int kABlock = kSplitABlock, kA = kRB * kABlock;  // one row block's A tile; a slot
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_addr(smem_raw), base = (raw + 1023) & ~1023u;
  uint8_t* const ring = smem_raw + (base - raw);
  const uint32_t abase = base + kStages * kStage, bars = abase + kAS * kA;  // A slots, then the barriers
  const uint32_t afull0 = bars, aempty0 = bars + 8 * kAS;
  fill_ring<kN, kRB>(ring);
  const int tid = threadIdx.x, wg = tid >> 7, t = tid & 127, lane = tid & 31, w4 = (tid >> 5) & 3;
  if (tid == 0) {
    for (int j = 0; j < kAS; ++j) {
      mbar_init(afull0 + 8 * j, 4 * kD);  // every dequantizing warp
      mbar_init(aempty0 + 8 * j, 4);      // the MMA warpgroup's warps
    }
    mbar_init_fence();
  }
  __syncthreads();
  const long long t0 = clock64();
  float sum = 0.0f;
  if (wg == kD) {  // the MMA warpgroup
    setmaxnreg_inc<kD == 2 ? 232 : 200>();
    float acc[kRB][32];
#pragma unroll
    for (int b = 0; b < kRB; ++b)
#pragma unroll
      for (int i = 0; i < 32; ++i) acc[b][i] = 0.0f;
    WgmmaRingPos qs{0, 0}, qa{0, 0}, prev{0, 0};  // the chunk's stage and A slot; the previous chunk's slot
    for (int i = 0; i < chunks; ++i) {
      mbar_wait(afull0 + 8 * qa.s, qa.parity);
      const uint64_t db = smem_desc(base + qs.s * kStage), da = smem_desc(abase + qa.s * kA);
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < 4; ++k)
#pragma unroll
        for (int b = 0; b < kRB; ++b) wgmma_ss64(acc[b], da + (b * kABlock >> 4) + 2 * k, db + 2 * k);
      wgmma_commit();
      wgmma_wait<1>();  // the previous chunk's MMAs are done: its slot goes back
      if (i > 0) {
        __syncwarp();
        if (lane == 0) mbar_arrive(aempty0 + 8 * prev.s);
      }
      prev = qa;
      qs = wgmma_ring_next<kStages>(qs);
      qa = wgmma_ring_next<kAS>(qa);
    }
    wgmma_wait<0>();
#pragma unroll
    for (int b = 0; b < kRB; ++b) {
      fence_acc(acc[b]);
#pragma unroll
      for (int i = 0; i < 32; ++i) sum += acc[b][i];
    }
  } else {  // dequantizing warpgroup wg: row blocks kRBD·wg ..
    setmaxnreg_dec<kD == 2 ? 96 : 56>();
    const uint32_t codes_off = kN * 128 + (kRBD * wg) * kWgmmaCodeBytes + t * 16;
    const uint32_t scales_off = kN * 128 + kRB * kWgmmaCodeBytes + (kRBD * wg) * kWgmmaScaleBytes + t * 2;
    const int r = t >> 1, h = t & 1;  // this thread's row of each row block and its half of the chunk's K
    WgmmaRingPos qs{0, 0}, qa{0, 0};  // the chunk's stage and A slot
    for (int i = 0; i < chunks; ++i) {
      if (i >= kAS) mbar_wait(aempty0 + 8 * qa.s, qa.parity ^ 1u);  // the slot's use kAS chunks ago is done
      const uint32_t st = base + qs.s * kStage;
      uint4 wv[kRBD];
      uint32_t sv[kRBD], ws2[kRBD][2], wsx[kRBD][2];
#pragma unroll
      for (int b = 0; b < kRBD; ++b) {
        wv[b] = lds128(st + codes_off + b * kWgmmaCodeBytes);
        sv[b] = lds16(st + scales_off + b * kWgmmaScaleBytes);
      }
      scale_regs<T, 0, kRBD>(sv, 1.0f, ws2, wsx);
#pragma unroll
      for (int b = 0; b < kRBD; ++b) {
        const uint32_t blk = abase + qa.s * kA + (kRBD * wg + b) * kABlock;
        const uint32_t q[4] = {wv[b].x, wv[b].y, wv[b].z, wv[b].w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          uint32_t v[4];
          dequant_step<T, 0>(q[k], ws2[b], wsx[b], v);
          if constexpr (kFrag) {  // register j: row w4·16 + lane/4 + 8(j & 1), K 16k + 2(lane % 4) + 8(j >> 1)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              const int fr = w4 * 16 + (lane >> 2) + 8 * (j & 1), c = 2 * k + (j >> 1);
              sts32(blk + fr * 128 + ((c ^ (fr & 7)) << 4) + (lane & 3) * 4, v[j]);
            }
          } else {
            sts128(blk + r * 128 + (((4 * h + k) ^ (r & 7)) << 4), v);
          }
        }
      }
      fence_proxy_async();  // generic stores, read by the MMAs (async proxy)
      __syncwarp();
      if (lane == 0) mbar_arrive(afull0 + 8 * qa.s);
      qs = wgmma_ring_next<kStages>(qs);
      qa = wgmma_ring_next<kAS>(qa);
    }
  }
  __syncthreads();
  const long long t1 = clock64();
  if (sum == 12345.0f) sink[blockIdx.x] = sum;  // keeps the MMAs
  if (tid == 0) cycles[blockIdx.x] = t1 - t0;
#endif
}

template <int kD, int kAS, bool kFrag>
void run_split(int sms, int chunks, float* sink, long long* dcyc) {
  const double best =
      cycles_per_chunk(split_kernel<kD, kAS, kFrag>, 128 * (kD + 1), split_smem_bytes(kAS), sms, chunks, sink, dcyc);
  const double tensor = tensor_cycles(4, 64);
  std::printf("| 64 | 256 | %d + 1 | %d | dequant apart (%d A slots, %s stores) | %.0f | %.0f | %.2f |\n", kD,
              4 / kD, kAS, kFrag ? "fragment 4-byte" : "row 16-byte", best, tensor, best / tensor);
}

template <int kN, int kW, int kB, int kForm>
void run(int sms, int chunks, float* sink, long long* dcyc) {
  const double best =
      cycles_per_chunk(rate_kernel<kN, kW, kB, kForm>, 128 * kW, smem_bytes(kN, kW * kB), sms, chunks, sink, dcyc);
  const double tensor = tensor_cycles(kW * kB, kN);
  std::printf("| %d | %d | %d | %d | %s | %.0f | %.0f | %.2f |\n", kN, kW * kB * 64, kW, kB, kFormName[kForm],
              best, tensor, best / tensor);
}

}  // namespace

int main(int argc, char** argv) {
  int chunks = 4096;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) chunks = std::max(2, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "usage: bench_wgmma_rate [--iters N]\n");
      return 2;
    }
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  if (prop.major != 9 || prop.minor != 0) {
    std::fprintf(stderr, "bench_wgmma_rate: needs an sm_90 GPU, found sm_%d%d\n", prop.major, prop.minor);
    return 1;
  }
  float* sink = nullptr;
  long long* dcyc = nullptr;
  CK(cudaMalloc(&sink, prop.multiProcessorCount * sizeof(float)));
  CK(cudaMalloc(&dcyc, prop.multiProcessorCount * sizeof(long long)));
  std::printf("%s, %d SMs, %d chunks per block\n\n", prop.name, prop.multiProcessorCount, chunks);
  std::printf("| N (tokens) | rows | warpgroups | row blocks each | mode | cycles per chunk | tensor cycles | "
              "ratio |\n");
  std::printf("|---:|---:|---:|---:|---|---:|---:|---:|\n");
  const int sms = prop.multiProcessorCount;
#define FORMS(N, W, B)                       \
  run<N, W, B, kDeqMma>(sms, chunks, sink, dcyc); \
  run<N, W, B, kMma2>(sms, chunks, sink, dcyc);   \
  run<N, W, B, kMma1>(sms, chunks, sink, dcyc);   \
  run<N, W, B, kSs1>(sms, chunks, sink, dcyc)
  run<8, 4, 1, kDeqMma>(sms, chunks, sink, dcyc);
  run<8, 2, 2, kDeqMma>(sms, chunks, sink, dcyc);
  FORMS(64, 4, 1);
  run_split<2, 2, false>(sms, chunks, sink, dcyc);
  run_split<2, 3, false>(sms, chunks, sink, dcyc);
  run_split<4, 2, false>(sms, chunks, sink, dcyc);
  run_split<4, 3, false>(sms, chunks, sink, dcyc);
  run_split<2, 3, true>(sms, chunks, sink, dcyc);
  run_split<4, 3, true>(sms, chunks, sink, dcyc);
  FORMS(64, 2, 2);
  FORMS(64, 3, 1);
  FORMS(64, 2, 1);
  FORMS(64, 1, 2);
  FORMS(128, 4, 1);
  FORMS(128, 2, 2);
  FORMS(128, 3, 1);
  FORMS(128, 2, 1);
#undef FORMS
  cudaFree(sink);
  cudaFree(dcyc);
  return 0;
}
