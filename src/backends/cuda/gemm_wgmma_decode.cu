// Hopper (sm_90a) decode GEMM for M <= 16 on warpgroup MMAs (wgmma m64n8k16 / m64n16k16, A from registers, B
// from shared memory), reached only through grid rules 14 and 15 (measurements: docs/PERF.md, change 106; slower
// than the decode kernel on every layer). Each warp copies its 16-row tile of a stored tile group into a
// shared-memory ring of its own with cp.async, kDepth chunks ahead (register loads in flight would be waited for
// by every warpgroup MMA's register fence), and dequantizes it into the A fragments exactly as the decode kernel
// does (mma_frag.cuh; the A layout of m64nNk16 is m16n8k16's per warp); the four warps of a warpgroup hold the
// four tiles of one group, so one wgmma per K step covers its 64 rows and all kN tokens. The activations of the
// block's K range are copied once, before the main loop, into a shared-memory slab in the B operand's layout
// (each token row's 64 values of a chunk permuted into the MMA column order and 128-byte swizzled: the layout
// launch_permute_activations writes for the wgmma kernel), so the main loop has no activation loads and no B
// fragments. Block: kW warpgroups on kW consecutive tile groups, all over the same K range (sharing the slab).
// Grid: x = blocks of kW groups, y = `parts` K ranges, one thread-block cluster along y; the parts' f32 sums
// meet in the blocks' shared memory and each block adds its share of the outputs over the parts in part order
// (deterministic), then stores y.
#include <cooperative_groups.h>

#include <algorithm>
#include <string>

#include "backends/cuda/gemm.cuh"
#include "backends/cuda/mma_frag.cuh"
#include "backends/cuda/wgmma_ptx.cuh"
#include "common/error.h"

namespace nvfp4::cuda::detail {
namespace {

namespace cg = cooperative_groups;

constexpr int kDepth = 4;  // chunks of weights a warp has requested ahead of the one it dequantizes
constexpr int kABufs = 2;  // A-fragment buffers: chunks whose MMAs may be in flight at once
static_assert(kDepth % kABufs == 0, "a trip of the main loop must reuse the A buffers in turn");

constexpr int slab_bytes(int kn, int per) { return per * kn * 128; }
constexpr int reduce_bytes(int kn, int kw) { return 128 * kw * (kn / 2) * 4; }
constexpr int region_bytes(int kn, int kw, int per) {
  return ((slab_bytes(kn, per) > reduce_bytes(kn, kw) ? slab_bytes(kn, per) : reduce_bytes(kn, kw)) + 1023) / 1024 *
         1024;
}
// + 1024 for aligning the slab, + the warps' weight rings
constexpr int decode_smem_bytes(int kn, int kw, int per) { return 1024 + region_bytes(kn, kw, per) + 4 * kw * kDepth * 576; }

template <typename T, int kMode, int kN, int kW>
__global__ void __launch_bounds__(128 * kW, kW == 1 ? 4 : 2) wgmma_decode_kernel(const GemmParams p) {
#ifdef NVFP4_WGMMA
  constexpr int kThreads = 128 * kW, kChunkBytes = kN * 128, kAcc = kN / 2;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t base = (raw + 1023) & ~1023u;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2, w4 = warp & 3;
  const int64_t groups = stored_tiles(p.n16) / kTileGroup;
  const int64_t group = static_cast<int64_t>(blockIdx.x) * kW + wg;
  const bool live = group < groups;
  const int parts = static_cast<int>(gridDim.y), z = static_cast<int>(blockIdx.y);
  const int per = (p.kc + parts - 1) / parts, c0 = z * per, nc = max(0, min(p.kc - c0, per));

  // The warp's tile: (group, chunk) blocks of kTileGroup·32 lanes of 16 code bytes and 2 scale bytes. They are
  // copied into the warp's ring in shared memory (kDepth chunks ahead; slot: 512 code bytes, then the 64 scale
  // bytes), not loaded into registers: a warpgroup MMA's register fence waits for every register load in flight.
  constexpr int kChunkStride = kTileGroup * 32, kSlot = 512 + 64;
  const int64_t blk0 = (live ? group : 0) * p.kc + c0;
  const uint4* wp = p.wq + blk0 * kChunkStride + w4 * 32 + lane;
  const uint8_t* spb = reinterpret_cast<const uint8_t*>(p.ws + blk0 * kChunkStride + w4 * 32) + 16 * lane;
  const uint32_t ring = base + region_bytes(kN, kW, per) + warp * kDepth * kSlot;
  auto load = [&](int slot, int c) {
    if (live && c < nc) {
      cp_async16(ring + slot * kSlot + 16 * lane, wp + static_cast<int64_t>(c) * kChunkStride, 16);
      if (lane < 4) cp_async16(ring + slot * kSlot + 512 + 16 * lane, spb + static_cast<int64_t>(c) * 256, 16);
    }
    cp_async_commit();
  };
#pragma unroll
  for (int d = 0; d < kDepth; ++d) load(d, d);
  pdl_wait();  // the activations (and y) of the kernels before
  pdl_launch_dependents();

  // The slab: chunk cc of the range at cc·kChunkBytes, token row r at r·128, its 16-byte units swizzled (unit u
  // at u ^ (r % 8)); the pair of K values 16t + 4s + 2h (+1) of the chunk at unit 2s + h, bytes 4t. Rows past M
  // and values past K are zeros. One 16-byte load per thread and unit (K values 8q .. 8q + 7 of a row).
  {
    const T* x = static_cast<const T*>(p.x);
    const int units = nc * kN * 8;
    for (int u = tid; u < units; u += kThreads) {
      const int cc = u / (kN * 8), r = (u >> 3) % kN, q = u & 7;
      const int kx = (c0 + cc) * 64 + 8 * q;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (r < p.m && kx < p.k) v = *reinterpret_cast<const uint4*>(x + static_cast<int64_t>(r) * p.k + kx);
      const uint32_t row = base + cc * kChunkBytes + r * 128 + (q >> 1) * 4;
      const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int s = 2 * (q & 1) + (i >> 1), h = i & 1;
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(row + (((2 * s + h) ^ (r & 7)) << 4)), "r"(w[i]) : "memory");
      }
    }
    fence_proxy_async();  // the generic stores before the MMAs' (async proxy) reads
    __syncthreads();
  }

  float acc[kAcc];
#pragma unroll
  for (int i = 0; i < kAcc; ++i) acc[i] = 0.0f;
  uint32_t a[kABufs][4][4];
  const uint64_t desc0 = smem_desc(base);
  // Chunk c from ring slot `slot` into A buffer `ab`: dequantize, request chunk c + kDepth into the slot, then the
  // chunk's four MMAs as one commit group; the wait leaves only this chunk's in flight, so the other A buffer is
  // free for the next chunk.
  auto chunk = [&](int c, int slot, int ab) {
    cp_async_wait<kDepth - 1>();  // this lane's copies of chunk c; the other lanes' (its scales) after the sync
    __syncwarp();
    const uint4 wv = lds128(ring + slot * kSlot + 16 * lane);
    uint32_t s1[1] = {lds16(ring + slot * kSlot + 512 + 2 * lane)}, ws2[1][2], wsx[1][2];
    scale_regs<T, kMode, 1>(s1, p.w_dec, ws2, wsx);
    dequant_step<T, kMode>(wv.x, ws2[0], wsx[0], a[ab][0]);
    dequant_step<T, kMode>(wv.y, ws2[0], wsx[0], a[ab][1]);
    dequant_step<T, kMode>(wv.z, ws2[0], wsx[0], a[ab][2]);
    dequant_step<T, kMode>(wv.w, ws2[0], wsx[0], a[ab][3]);
    __syncwarp();  // every lane has read the slot
    load(slot, c + kDepth);
    wgmma_fence();
    const uint64_t desc = desc0 + static_cast<uint64_t>((c * kChunkBytes) >> 4);
#pragma unroll
    for (int s = 0; s < 4; ++s) wgmma_m64k16<T, kN>(acc, a[ab][s], desc + 2 * s);
    wgmma_commit();
    wgmma_wait<kABufs - 1>();
  };
  if (live) {
    for (int c = 0; c < nc; c += kDepth) {
#pragma unroll
      for (int u = 0; u < kDepth; ++u)
        if (c + u < nc) chunk(c + u, u, u % kABufs);
    }
    wgmma_wait<0>();
  }
  fence_acc(acc);

  // acc[i]: row 16·w4 + g + 8·((i >> 1) & 1) of the group, token 8·(i >> 2) + 2t + (i & 1).
  auto out = [&](int th, int i, float sum) {
    const int twg = th >> 7, tw4 = (th >> 5) & 3, tl = th & 31;
    const int64_t tile = (static_cast<int64_t>(blockIdx.x) * kW + twg) * kTileGroup + tw4;
    const int n = static_cast<int>(tile * 16) + (tl >> 2) + 8 * ((i >> 1) & 1);
    const int tok = 8 * (i >> 2) + 2 * (tl & 3) + (i & 1);
    if (tile < p.n16 && n < p.n && tok < p.m) store_y<T>(p, tok, n, sum);
  };
  if (parts == 1) {
#pragma unroll
    for (int i = 0; i < kAcc; ++i) out(tid, i, acc[i]);
    return;
  }
  cg::cluster_group cluster = cg::this_cluster();
  fence_proxy_async();  // the slab was last read by the MMAs (async proxy)
  __syncthreads();      // every warpgroup's MMAs have read it
  float* red = reinterpret_cast<float*>(smem_raw + (base - raw));
#pragma unroll
  for (int i = 0; i < kAcc; ++i) red[i * kThreads + tid] = acc[i];
  cluster.sync();
  const int rank = static_cast<int>(cluster.block_rank());
  constexpr int kTotal = kThreads * kAcc;
  const int len = (kTotal + parts - 1) / parts, v1 = min(kTotal, (rank + 1) * len);
  for (int v = rank * len + tid; v < v1; v += kThreads) {
    float sum = *cluster.map_shared_rank(red + v, 0);
    for (int q = 1; q < parts; ++q) sum += *cluster.map_shared_rank(red + v, q);
    out(v % kThreads, v / kThreads, sum);
  }
  cluster.sync();  // no block leaves while another reads its shared memory
#endif
}

template <typename T, int kMode, int kN, int kW>
void launch_decode_typed(const GemmParams& p, int parts, cudaStream_t stream) {
  constexpr auto kernel = wgmma_decode_kernel<T, kMode, kN, kW>;
  const int per = (p.kc + parts - 1) / parts;
  const int smem = decode_smem_bytes(kN, kW, per);
  raise_dynamic_smem_limit<kernel>(smem);
  const int64_t groups = stored_tiles(p.n16) / kTileGroup;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(ceil_div(groups, kW)), static_cast<unsigned>(parts));
  cfg.blockDim = dim3(128 * kW);
  cfg.dynamicSmemBytes = static_cast<size_t>(smem);
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  int n = 0;
  attr[n].id = cudaLaunchAttributeClusterDimension;
  attr[n].val.clusterDim.x = 1;
  attr[n].val.clusterDim.y = static_cast<unsigned>(parts);
  attr[n].val.clusterDim.z = 1;
  ++n;
  if (p.programmatic) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  cfg.attrs = attr;
  cfg.numAttrs = n;
  NVFP4_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, p));
}

template <typename T, int kMode>
void launch_decode_tokens(const GemmParams& p, int warpgroups, int parts, cudaStream_t stream) {
  if (p.m <= 8) {
    if (warpgroups == 1) launch_decode_typed<T, kMode, 8, 1>(p, parts, stream);
    else launch_decode_typed<T, kMode, 8, 2>(p, parts, stream);
  } else {
    if (warpgroups == 1) launch_decode_typed<T, kMode, 16, 1>(p, parts, stream);
    else launch_decode_typed<T, kMode, 16, 2>(p, parts, stream);
  }
}

}  // namespace

int wgmma_decode_parts(int64_t m, int64_t n16, int64_t kc, int sms, int warpgroups) {
  if (m < 1 || m > 16 || (warpgroups != 1 && warpgroups != 2)) return 0;
  const int64_t groups = (n16 + kTileGroup - 1) / kTileGroup, blocks = ceil_div(groups, warpgroups);
  const int kn = m <= 8 ? 8 : 16;
  // blocks per SM the kernel is compiled for, and the shared memory that leaves each of them
  const int per_sm = warpgroups == 1 ? 4 : 2, max_smem = 227 * 1024 / per_sm / 1024 * 1024;
  const int64_t slots = static_cast<int64_t>(per_sm) * sms;
  int best = 0;
  int64_t best_cost = 0;
  for (int parts = 1; parts <= kWgmmaDecodeMaxParts; ++parts) {
    const int64_t per = ceil_div(kc, parts);
    if (per * parts - kc >= per) continue;  // a part without chunks
    if (decode_smem_bytes(kn, warpgroups, static_cast<int>(per)) > max_smem) continue;
    const int64_t cost = ceil_div(blocks * parts, slots) * per;  // rounds x chunks per round
    if (best == 0 || cost < best_cost) best = parts, best_cost = cost;
  }
  return best;
}

void launch_wgmma_decode(const GemmParams& p, DType act, Mode mode, int warpgroups, int parts, cudaStream_t stream) {
  NVFP4_CHECK(!p.custom_epilogue() && p.x_gs == 0.0f,
              "wgmma decode: no SwiGLU or residual epilogue and no row quantization (the decode kernel's)");
  NVFP4_CHECK(p.m >= 1 && p.m <= 16 && (warpgroups == 1 || warpgroups == 2) && parts >= 1 &&
                  parts <= kWgmmaDecodeMaxParts,
              "wgmma decode: M " + std::to_string(p.m) + ", " + std::to_string(warpgroups) + " warpgroups, " +
                  std::to_string(parts) + " parts");
  NVFP4_CHECK(mode == Mode::Exact, "wgmma decode: exact weight mode only");
  if (act == DType::BF16)
    launch_decode_tokens<__nv_bfloat16, 0>(p, warpgroups, parts, stream);
  else
    launch_decode_tokens<__half, 0>(p, warpgroups, parts, stream);
  NVFP4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace nvfp4::cuda::detail
