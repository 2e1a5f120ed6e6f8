// PTX wrappers of the Hopper (sm_90a) GEMM kernel (gemm_wgmma.cu): bulk copies, mbarriers, named barriers,
// register budgets, shared-memory matrix descriptors and warpgroup MMAs; and the kernel's consumer step on one K
// chunk (wgmma_chunk) and its walk over the ring (wgmma_ring_walk), which bench/wgmma_rate.cu runs on its own.
// Compiled only where NVFP4_WGMMA is defined (device code for sm_90a).
#pragma once
#include <cstdint>
#include <type_traits>

#include "backends/cuda/cuda_util.cuh"
#include "backends/cuda/mma_frag.cuh"  // smem_addr, lds128

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define NVFP4_WGMMA 1
#endif

namespace nvfp4::cuda::detail {

// One row block's (kTileGroup stored tiles of 16 rows) codes and scales of one K chunk in a stage.
constexpr int kWgmmaCodeBytes = kTileGroup * 32 * 16;
constexpr int kWgmmaScaleBytes = kTileGroup * 32 * 2;
// Stages in the wgmma kernel's shared-memory ring of K chunks.
constexpr int kWgmmaStages = 6;
// One stage: the activation tile of `tokens` rows of 128 bytes, then rb row blocks' codes and scales, padded to
// 1024 bytes (each stage's activation tile must stay 1024-byte aligned for the 128-byte swizzle).
constexpr int wgmma_stage_bytes(int tokens, int rb) {
  return (tokens * 128 + rb * (kWgmmaCodeBytes + kWgmmaScaleBytes) + 1023) / 1024 * 1024;
}
// Whether the consumers keep two A-fragment buffers (wgmma_ring_walk): every form but 128 tokens with four consumer
// warpgroups, whose 112 registers per thread hold 64 accumulators and one A buffer, not two (ptxas would
// serialize the MMAs), so that they take one chunk at a time.
constexpr bool wgmma_two_buffers(int tokens, int consumer_wgs) { return !(tokens == 128 && consumer_wgs == 4); }

#ifdef NVFP4_WGMMA
// mbarriers (shared::cta addresses). A phase completes when its arrivals and its expected transaction bytes
// are all in; waiting on parity P returns once the phase of that parity has completed.
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}
// Orders this thread's earlier shared-memory accesses of the async proxy (bulk copies, wgmma operands) before its
// later generic ones.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Makes initialized mbarriers visible to the other threads and to the bulk copy engine (then __syncthreads).
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  fence_proxy_async();
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}
__device__ __forceinline__ void sts32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ void sts128(uint32_t addr, const uint32_t (&v)[4]) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3])
               : "memory");
}
__device__ __forceinline__ uint32_t lds16(uint32_t addr) {
  uint16_t v;
  asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(v) : "r"(addr) : "memory");
  return v;
}
// L2 policy for data read once (the weights).
__device__ __forceinline__ uint64_t l2_evict_first() {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
  return pol;
}
// Bulk copy global -> shared of `bytes` (a multiple of 16, both addresses 16-byte aligned) that completes
// `bytes` transaction bytes on mbarrier `bar`.
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar,
                                          uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], "
      "%4;\n" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar), "l"(policy)
      : "memory");
}

// Warpgroup-wide register budget change (every thread of the warpgroup executes it): a producer warpgroup
// gives registers back, consumer warpgroups take them.
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// Named barrier `id` (1-15; 0 is __syncthreads) of `threads` threads (a multiple of 32): bar.sync waits for
// all of them, bar.arrive counts the calling warp and goes on.
__device__ __forceinline__ void named_bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Shared-memory matrix descriptor: K-major rows of 128 bytes, 128-byte swizzle, 8-row groups 1024 bytes apart.
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (1ull << 16) | (static_cast<uint64_t>(1024 >> 4) << 32) |
         (1ull << 62);
}

// The accumulator operands of one wgmma: "+f"(d[o]) .. "+f"(d[o + 31]).
#define NVFP4_ACC8(o) \
  "+f"(d[o]), "+f"(d[o + 1]), "+f"(d[o + 2]), "+f"(d[o + 3]), "+f"(d[o + 4]), "+f"(d[o + 5]), "+f"(d[o + 6]), \
      "+f"(d[o + 7])
#define NVFP4_ACC32(o) NVFP4_ACC8(o), NVFP4_ACC8(o + 8), NVFP4_ACC8(o + 16), NVFP4_ACC8(o + 24)
// wgmma.mma_async m64nNk16 for T (bf16 or f16) with D in the accumulator operands (the variadic list, numbered
// from %0: DREGS), A in 4 registers (AREGS: the next four operand numbers), B from descriptor `desc`; D += A·B.
#define NVFP4_WGMMA_RS(SHAPE, DREGS, AREGS, ...)                                                              \
  do {                                                                                                        \
    if constexpr (std::is_same_v<T, __nv_bfloat16>)                                                           \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned." SHAPE            \
                   ".f32.bf16.bf16 " DREGS ", " AREGS ", p, 1, 1, 0;\n}\n"                                     \
                   : __VA_ARGS__                                                                              \
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));                                  \
    else                                                                                                      \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned." SHAPE            \
                   ".f32.f16.f16 " DREGS ", " AREGS ", p, 1, 1, 0;\n}\n"                                       \
                   : __VA_ARGS__                                                                              \
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));                                  \
  } while (0)
// D (m64n64, f32, 32 registers per thread) += A (registers) x B (shared memory descriptor).
template <typename T>
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[32], const uint32_t (&a)[4], uint64_t desc) {
  NVFP4_WGMMA_RS("m64n64k16",
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,"
                 "%25,%26,%27,%28,%29,%30,%31}",
                 "{%32,%33,%34,%35}, %36", NVFP4_ACC32(0));
}
// D (m64n128, f32, 64 registers per thread) += A (registers) x B (shared memory descriptor).
template <typename T>
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], const uint32_t (&a)[4], uint64_t desc) {
  NVFP4_WGMMA_RS("m64n128k16",
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,"
                 "%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
                 "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}",
                 "{%64,%65,%66,%67}, %68", NVFP4_ACC32(0), NVFP4_ACC32(32));
}
// D (m64n8, f32, 4 registers per thread) += A (registers) x B: an eighth of m64n64k16's tensor work
// (bench/wgmma_rate.cu's measure of the dequantization's own cost).
template <typename T>
__device__ __forceinline__ void wgmma_m64n8k16(float (&d)[4], const uint32_t (&a)[4], uint64_t desc) {
  NVFP4_WGMMA_RS("m64n8k16", "{%0,%1,%2,%3}", "{%4,%5,%6,%7}, %8", "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]));
}
#undef NVFP4_WGMMA_RS
#undef NVFP4_ACC32
#undef NVFP4_ACC8
template <typename T, int kN>
__device__ __forceinline__ void wgmma_m64k16(float (&d)[kN / 2], const uint32_t (&a)[4], uint64_t desc) {
  static_assert(kN == 8 || kN == 64 || kN == 128, "m64n8k16, m64n64k16 and m64n128k16 only");
  if constexpr (kN == 8)
    wgmma_m64n8k16<T>(d, a, desc);
  else if constexpr (kN == 64)
    wgmma_m64n64k16<T>(d, a, desc);
  else
    wgmma_m64n128k16<T>(d, a, desc);
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving accesses of the accumulators across the asynchronous MMAs.
template <int kN>
__device__ __forceinline__ void fence_acc(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The consumer step of gemm_wgmma.cu on one K chunk that is in the stage at shared address `st`, for kB row
// blocks of kN tokens: the lane's codes and scales of row block b (at codes_off + b·kWgmmaCodeBytes and
// scales_off + b·kWgmmaScaleBytes from st), their scale registers, then the A fragments of K steps 0-1 and their
// MMAs, then those of steps 2-3, so that the tensor cores get the first half of a chunk's MMAs while its second
// half is still being dequantized. Each half is a commit group of its own (a register fence before it: its MMAs
// read A registers written since the last one), so a chunk is two groups. B of K step k: the stage's tile at
// 32k bytes (smem_desc(st) + 2k).
template <typename T, int kMode, int kN, int kB>
__device__ __forceinline__ void wgmma_chunk(uint32_t st, uint32_t codes_off, uint32_t scales_off, float w_dec,
                                            float (&acc)[kB][kN / 2], uint32_t (&a)[kB][4][4]) {
  uint4 wv[kB];
  uint32_t sv[kB];
#pragma unroll
  for (int b = 0; b < kB; ++b) {
    wv[b] = lds128(st + codes_off + b * kWgmmaCodeBytes);
    sv[b] = lds16(st + scales_off + b * kWgmmaScaleBytes);
  }
  uint32_t ws2[kB][2], wsx[kB][2];
  scale_regs<T, kMode, kB>(sv, w_dec, ws2, wsx);
  const uint64_t desc = smem_desc(st);
  auto half = [&](auto first) {  // K steps h and h + 1
    constexpr int h = decltype(first)::value;
#pragma unroll
    for (int b = 0; b < kB; ++b) {
      dequant_step<T, kMode>(h == 0 ? wv[b].x : wv[b].z, ws2[b], wsx[b], a[b][h]);
      dequant_step<T, kMode>(h == 0 ? wv[b].y : wv[b].w, ws2[b], wsx[b], a[b][h + 1]);
    }
    wgmma_fence();
#pragma unroll
    for (int k = h; k < h + 2; ++k)
#pragma unroll
      for (int b = 0; b < kB; ++b) wgmma_m64k16<T, kN>(acc[b], a[b][k], desc + 2 * k);
    wgmma_commit();
  };
  half(std::integral_constant<int, 0>{});
  half(std::integral_constant<int, 2>{});
}

// A chunk's place in the wgmma kernel's ring of kStages stages: chunk i is in stage s = i % kStages, and its
// stage's full barrier completes the phase of parity (i / kStages) & 1.
struct WgmmaRingPos {
  int s;
  uint32_t parity;
};
// The position of the chunk after q in a ring of kSlots.
template <int kSlots>
__device__ __forceinline__ WgmmaRingPos wgmma_ring_next(WgmmaRingPos q) {
  return q.s + 1 == kSlots ? WgmmaRingPos{0, q.parity ^ 1u} : WgmmaRingPos{q.s + 1, q.parity};
}
// The consumers' walk over nc K chunks, the ring position stepped once per chunk rather than divided out.
// chunk(q, a) waits for the chunk at ring position q and issues its two commit groups with A buffer a
// (wgmma_chunk); release(q) hands q's stage back to the producer once the MMAs that read it are done.
// - Two A buffers (kTwoBuffers): chunk i + 1 is dequantized while chunk i's MMAs run, and chunk i's stage is
//   released once the MMAs of chunk i + 1 have been issued (wgmma_wait<2>: at most that chunk's two groups still
//   in flight).
// - One buffer: one chunk at a time (wgmma_wait<0>, then its release).
// (Unrolled over a round of the ring, with each chunk's stage a constant, the two-buffer walk issues a fifth
// fewer instructions per chunk and runs no faster: docs/PERF.md, change 129.)
template <int kStages, bool kTwoBuffers, typename A, typename Chunk, typename Release>
__device__ __forceinline__ void wgmma_ring_walk(int nc, A& a0, A& a1, Chunk chunk, Release release) {
  using Pos = WgmmaRingPos;
  auto next = wgmma_ring_next<kStages>;
  Pos cur{0, 0};
  if constexpr (!kTwoBuffers) {
    for (int i = 0; i < nc; ++i, cur = next(cur)) {
      chunk(cur, a0);
      wgmma_wait<0>();
      release(cur);
    }
  } else {
    if (nc > 0) chunk(cur, a0);
    for (int i = 1; i < nc; i += 2) {
      const Pos q1 = next(cur);
      chunk(q1, a1);
      wgmma_wait<2>();
      release(cur);
      cur = q1;
      if (i + 1 == nc) break;
      const Pos q2 = next(cur);
      chunk(q2, a0);
      wgmma_wait<2>();
      release(cur);
      cur = q2;
    }
    wgmma_wait<0>();
    if (nc > 0) release(cur);
  }
}
#endif

}  // namespace nvfp4::cuda::detail
