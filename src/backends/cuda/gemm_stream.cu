// The decode kernel's stream form (gemm.cuh, launch_stream_gemm): M <= 8, weights streamed through a
// shared-memory ring by a producer warp, the consumer warps paying one shared load per 16 bytes of codes and one
// barrier wait per stage instead of holding their next stages in registers.
#include <algorithm>
#include <atomic>
#include <string>

#include "backends/cuda/gemm.cuh"
#include "backends/cuda/mma_frag.cuh"
#include "backends/cuda/wgmma_ptx.cuh"
#include "common/error.h"

namespace nvfp4::cuda::detail {
namespace {

constexpr int kChunkCodeBytes = kTileGroup * 32 * 16;   // one chunk of a tile group: 2 KB
constexpr int kChunkScaleBytes = kTileGroup * 32 * 2;   // 256 bytes
constexpr int kStageCodes = kStreamChunks * kChunkCodeBytes;
constexpr int kStageScales = kStreamChunks * kChunkScaleBytes;
constexpr int kRingBytes = kStreamStages * (kStageCodes + kStageScales);
constexpr int kSlotFloats = 512;  // one tile group's sums: 4 tiles x 4 accumulators x 32 lanes
static_assert(stream_work_bytes() == kStreamMaxBlocks * kSlotFloats * 4, "a slot per block");

// The block whose share holds stream position f (shares floor(b·F / B) .. floor((b + 1)·F / B)).
__device__ __forceinline__ int share_of(int f, int F, int B) {
  return static_cast<int>(((f + 1ll) * B - 1) / F);
}

// Relaxed accesses at GPU scope: the feeders' slot values, each 4 bytes single-copy atomic, polled by the owner.
__device__ __forceinline__ void st_relaxed(float* p, float v) {
  asm volatile("st.relaxed.gpu.global.f32 [%0], %1;\n" ::"l"(p), "f"(v) : "memory");
}
__device__ __forceinline__ float ld_relaxed(const float* p) {
  float v;
  asm volatile("ld.relaxed.gpu.global.f32 %0, [%1];\n" : "=f"(v) : "l"(p) : "memory");
  return v;
}

// Consumer warps of the kernel with kNW tiles per warp: each chunk of a stage is shared by 4 / kNW warps.
constexpr int stream_warps(int nw) { return kStreamChunks * kTileGroup / nw; }

template <typename T, int kMode, int kNW>
__global__ void __launch_bounds__(32 * (stream_warps(kNW) + 1), kStreamBlocksPerSm)
    stream_gemm_kernel(const GemmParams p) {
#ifdef NVFP4_WGMMA
  constexpr int kW = stream_warps(kNW), kS = kStreamStages, kC = kStreamChunks, kSplit = kTileGroup / kNW;
  extern __shared__ __align__(128) uint8_t ring[];  // kS stages of codes, then kS stages of scales
  __shared__ __align__(8) uint64_t bars[2 * kS];   // full, then empty
  __shared__ float red[kW][kNW * 4][32];           // each warp's sums of the group being closed
  const uint32_t codes0 = smem_addr(ring), scales0 = codes0 + kS * kStageCodes;
  const uint32_t full0 = smem_addr(bars), empty0 = full0 + 8 * kS;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int B = static_cast<int>(gridDim.x);
  // Stream positions fit 32 bits: stream_form_fits bounds the groups, K < 2^31 the chunks.
  const int kc = p.kc, F = static_cast<int>(stored_tiles(p.n16) / kTileGroup) * kc;
  auto share_start = [&](int b) { return static_cast<int>(static_cast<int64_t>(b) * F / B); };
  const int f_lo = share_start(blockIdx.x), f_hi = share_start(blockIdx.x + 1);

  if (tid == 0) {
    for (int s = 0; s < kS; ++s) {
      mbar_init(full0 + 8 * s, 1);
      mbar_init(empty0 + 8 * s, kW);
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (warp == kW) {  // producer: lane 0 copies the share, kC chunks per stage
    if (lane != 0) return;
    const uint64_t evict_first = l2_evict_first();
    const uint8_t* wq = reinterpret_cast<const uint8_t*>(p.wq);
    const uint8_t* ws = reinterpret_cast<const uint8_t*>(p.ws);
    int it = 0;
    for (int fs = f_lo; fs < f_hi; fs += kC, ++it) {
      const int s = it % kS;
      if (it == kS) {  // the first stages are requested before waiting for the previous kernel
        pdl_wait();
        pdl_launch_dependents();
      }
      if (it >= kS) mbar_wait(empty0 + 8 * s, ((it / kS) + 1) & 1);  // every consumer is done with its last use
      const int cnt = min(kC, f_hi - fs);
      const uint32_t bar = full0 + 8 * s;
      mbar_arrive_expect_tx(bar, cnt * (kChunkCodeBytes + kChunkScaleBytes));
      bulk_copy(codes0 + s * kStageCodes, wq + static_cast<int64_t>(fs) * kChunkCodeBytes, cnt * kChunkCodeBytes, bar,
                evict_first);
      bulk_copy(scales0 + s * kStageScales, ws + static_cast<int64_t>(fs) * kChunkScaleBytes, cnt * kChunkScaleBytes,
                bar, evict_first);
    }
    if (it <= kS) {
      pdl_wait();
      pdl_launch_dependents();
    }
    return;
  }

  // Consumers: warp w computes chunk fs + w / kSplit of each stage (fs = f_lo, f_lo + kC, ...) for tiles
  // (w % kSplit)·kNW .. + kNW - 1 of the group.
  const int w = warp, wc = w / kSplit, wt = (w % kSplit) * kNW, g = lane >> 2, t = lane & 3;
  pdl_wait();  // the activations are the previous kernel's; y and the slots are written below
  pdl_launch_dependents();
  const T* xrow = static_cast<const T*>(p.x) + min(static_cast<int64_t>(g), p.m - 1) * p.k + 16 * t;
  // The lane's 16 activations of K chunk c (zeros past K: K % 16 == 0, so a lane's 16 are inside or outside).
  auto load_x = [&](int c, bool live, uint4 (&xa)[2]) {
    if (live && c * 64 + 16 * t < p.k) {
      const uint4* src = reinterpret_cast<const uint4*>(xrow + c * 64);
      xa[0] = src[0];
      xa[1] = src[1];
    } else {
      xa[0] = xa[1] = make_uint4(0, 0, 0, 0);
    }
  };
  float acc[kNW][1][4];
  auto zero = [&] {
#pragma unroll
    for (int i = 0; i < kNW; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][0][e] = 0.0f;
  };
  auto flush = [&] {  // this warp's sums of the group being closed into red, and a fresh start
#pragma unroll
    for (int i = 0; i < kNW; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) red[w][i * 4 + e][lane] = acc[i][0][e];
    zero();
  };
  // Group G's part of this share is closed: every warp's sums are in red; they are added in warp order. A group
  // inside the share is stored. A group cut by the share's start (a feeder piece) goes to the share's slot, each
  // value replacing the empty marker, with no fence and no wait. The share holding the group's first chunk (its
  // owner; the piece is at the end of its share, so the feeders' pieces, at the starts of theirs, are long done)
  // adds the feeders' slots in share order once each has replaced its marker, stores y and puts the markers back.
  auto close_group = [&](int G) {
    constexpr int kThreads = 32 * kW, kPer = (16 + kW - 1) / kW;
    named_bar_sync(1, kThreads);
    float v[kPer];
#pragma unroll
    for (int r = 0; r < kPer; ++r) {
      const int q = w + r * kW;  // tile q / 4 of the group, accumulator q % 4
      const int ws = q / 4 / kNW, iq = (q / 4 % kNW) * 4 + q % 4;
      float sum = 0.0f;
      if (q < 16)
#pragma unroll
        for (int cc = 0; cc < kC; ++cc) sum += red[cc * kSplit + ws][iq][lane];  // in chunk order
      v[r] = sum;
    }
    named_bar_sync(1, kThreads);  // red is free again
    if (G * kc < f_lo) {          // feeder
      float* const slot = p.partial + static_cast<int64_t>(blockIdx.x) * kSlotFloats;
#pragma unroll
      for (int r = 0; r < kPer; ++r)
        if (w + r * kW < 16)
          st_relaxed(slot + (w + r * kW) * 32 + lane,
                     __float_as_uint(v[r]) == kStreamEmpty ? __uint_as_float(0x7FFFFFFFu) : v[r]);
      return;
    }
    const int b_hi = (G + 1) * kc > f_hi ? share_of((G + 1) * kc - 1, F, B) : blockIdx.x;  // owner: feeders to b_hi
#pragma unroll
    for (int r = 0; r < kPer; ++r) {
      const int q = w + r * kW;
      if (q >= 16) break;
      float sum = v[r];
      for (int b = blockIdx.x + 1; b <= b_hi; ++b) {
        float* const at = p.partial + static_cast<int64_t>(b) * kSlotFloats + q * 32 + lane;
        float x;
        while (__float_as_uint(x = ld_relaxed(at)) == kStreamEmpty) {
        }
        sum += x;
        st_relaxed(at, __uint_as_float(kStreamEmpty));
      }
      const int i = q / 4, e = q % 4;
      const int tile = G * kTileGroup + i;
      const int n = tile * 16 + g + 8 * (e >> 1);
      const int tok = 2 * t + (e & 1);
      if (tile < p.n16 && n < p.n && tok < p.m) store_y<T>(p, tok, n, sum);
    }
  };

  zero();
  int gcur = f_lo / kc;                   // the group being accumulated
  int gend = min((gcur + 1) * kc, f_hi);  // where its part of the share ends
  int c = f_lo - gcur * kc + wc;          // this warp's chunk (K index) and its group
  int gw = gcur;
  if (c >= kc) c -= kc, ++gw;             // kc >= kC: one wrap at most
  // Four tiles per warp: the activations a stage ahead; two (56 registers): the stage's own, requested before
  // its wait.
  constexpr bool kAhead = kNW == 4;
  uint4 xa[2];
  if constexpr (kAhead) load_x(c, f_lo + wc < f_hi, xa);
  int s = 0;
  uint32_t parity = 0;
  const uint32_t code_off = wc * kChunkCodeBytes + wt * 512 + lane * 16;
  const uint32_t scale_off = wc * kChunkScaleBytes + wt * 64 + lane * 2;
  for (int fs = f_lo; fs < f_hi; fs += kC) {
    const bool mine = fs + wc < f_hi;
    int cn = c + kC;
    int gn = gw;
    if (cn >= kc) cn -= kc, ++gn;
    uint4 xn[2];
    if constexpr (kAhead)
      load_x(cn, fs + kC + wc < f_hi, xn);  // the next stage's activations, in flight during this one
    else
      load_x(c, mine, xa);
    mbar_wait(full0 + 8 * s, parity);
    uint4 wv[kNW];
    uint32_t sv[kNW];
    if (mine) {
#pragma unroll
      for (int i = 0; i < kNW; ++i) {
        wv[i] = lds128(codes0 + s * kStageCodes + code_off + i * 512);
        sv[i] = lds16(scales0 + s * kStageScales + scale_off + i * 64);
      }
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(empty0 + 8 * s);
    if (++s == kS) s = 0, parity ^= 1;
    const bool closes = fs + kC >= gend;  // this stage holds the last chunk of gcur's part of the share
    const bool next_group = mine && gw != gcur;
    if (closes && next_group) flush();
    if (mine) {
      uint32_t ws2[kNW][2], wsx[kNW][2];
      scale_regs<T, kMode, kNW>(sv, p.w_dec, ws2, wsx);
      uint4 xh[1] = {xa[0]};
      chunk_half<T, kMode, 1, kNW, 0>(wv, ws2, wsx, xh, acc);
      xh[0] = xa[1];
      chunk_half<T, kMode, 1, kNW, 2>(wv, ws2, wsx, xh, acc);
    }
    if (closes) {
      if (!next_group) flush();
      close_group(gcur);
      ++gcur;
      gend = min((gcur + 1) * kc, f_hi);
    }
    c = cn;
    gw = gn;
    if constexpr (kAhead) {
      xa[0] = xn[0];
      xa[1] = xn[1];
    }
  }
  // The share ending in the stage that closed the group before: the group begun there is closed here.
  if (gcur * kc < f_hi) {
    flush();
    close_group(gcur);
  }
#endif
}

template <typename T, int kNW>
void launch_typed(const GemmParams& p, cudaStream_t stream) {
  constexpr auto kernel = stream_gemm_kernel<T, static_cast<int>(Mode::Exact), kNW>;
  raise_dynamic_smem_limit<kernel>(kRingBytes);
  launch_maybe_programmatic(p.programmatic, kernel, dim3(static_cast<unsigned>(p.stream_blocks)),
                            dim3(32 * (stream_warps(kNW) + 1)), static_cast<size_t>(kRingBytes), stream, p);
}

template <int kNW>
int blocks_per_sm() {
  int fewest = 1 << 30;
  auto ask = [&](auto kernel) {
    // The ring wants the largest shared-memory carveout (the driver's default may favour L1).
    NVFP4_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kRingBytes));
    NVFP4_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
    int blocks = 0;
    NVFP4_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, 32 * (stream_warps(kNW) + 1), kRingBytes));
    fewest = std::min(fewest, blocks);
  };
  ask(stream_gemm_kernel<__nv_bfloat16, static_cast<int>(Mode::Exact), kNW>);
  ask(stream_gemm_kernel<__half, static_cast<int>(Mode::Exact), kNW>);
  return fewest;
}

}  // namespace

int stream_blocks_per_sm(int device, int nw) {
  static std::atomic<int> known[2][64];  // per form and device: blocks per SM + 1 once asked
  const int f = nw == 2 ? 1 : 0;
  if (device >= 0 && device < 64 && known[f][device].load(std::memory_order_acquire) > 0)
    return known[f][device].load(std::memory_order_relaxed) - 1;
  const int blocks = nw == 2 ? blocks_per_sm<2>() : blocks_per_sm<4>();
  if (device >= 0 && device < 64) known[f][device].store(blocks + 1, std::memory_order_release);
  return blocks;
}

void launch_stream_gemm(const GemmParams& p, DType act, Mode mode, cudaStream_t stream) {
  const int64_t groups = stored_tiles(p.n16) / kTileGroup, F = groups * p.kc;
  NVFP4_CHECK(mode == Mode::Exact, "stream kernel: the exact weight mode only");
  NVFP4_CHECK(stream_form_fits(p.m, p.n16, p.kc),
              "stream kernel: needs M <= 8 (got " + std::to_string(p.m) + "), K >= " +
                  std::to_string(64 * kStreamChunks) + " (got " + std::to_string(p.k) + ") and at most " +
                  std::to_string(kStreamMaxGroups) + " tile groups");
  NVFP4_CHECK(p.stream_tiles == 4 || p.stream_tiles == 2,
              "stream kernel: 4 or 2 tiles per warp, got " + std::to_string(p.stream_tiles));
  NVFP4_CHECK(!p.custom_epilogue() && p.x_gs == 0.0f, "stream kernel: no epilogue form and no row quantization");
  NVFP4_CHECK(p.stream_blocks >= 1 && p.stream_blocks <= kStreamMaxBlocks && p.stream_blocks <= F,
              "stream kernel: " + std::to_string(p.stream_blocks) + " blocks for " + std::to_string(F) +
                  " chunks (at most " + std::to_string(kStreamMaxBlocks) + ")");
  NVFP4_CHECK(p.partial, "stream kernel: no partial-sum workspace");
  if (act == DType::BF16)
    p.stream_tiles == 2 ? launch_typed<__nv_bfloat16, 2>(p, stream) : launch_typed<__nv_bfloat16, 4>(p, stream);
  else
    p.stream_tiles == 2 ? launch_typed<__half, 2>(p, stream) : launch_typed<__half, 4>(p, stream);
  NVFP4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace nvfp4::cuda::detail
