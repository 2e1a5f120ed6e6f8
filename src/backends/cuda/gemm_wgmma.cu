// Hopper (sm_90a) GEMM from M = 33 (17 or 65 where default_wgmma_from says so): FP4 weights dequantized
// in registers exactly as in the decode kernel (mma_frag.cuh) and multiplied with warpgroup MMAs (wgmma
// m64n{64,128}k16, A from registers, B from shared memory, f32 accumulation), so each weight is read and dequantized
// once per 64 or 128 tokens and the tensor cores run at their Hopper rate. The lane's 16 bytes of codes of one chunk
// are exactly its A fragments of the chunk's four K16 steps (the m64nNk16 A layout is m16n8k16's per warp). The A
// fragment columns of step s are the K values 16t + 4s + {0,1,2,3} of lane t (weight_layout.h), so the activations are
// first written permuted into that order (launch_permute_activations) and tiled, so that the B operand of step s is the
// 32 bytes at 32s of each 128-byte token row (128-byte swizzle, the layout wgmma's descriptor reads). The form for
// blocks of 128 rows and 64 tokens with kRaw reads the row-major activations instead: a warpgroup of its own (the
// permuter) copies each chunk's tile, 16 bytes per lane and row, into a staging ring (cp.async, four chunks in
// flight), and stores it into the stage in that order (4-byte shared stores, a proxy fence, one arrival per warp on
// the stage's barrier); the host picks it where the grid is one round of blocks (wgmma_raw_x_pays), which saves the
// permutation kernel and the blocks' wait for it.
//
// Block: 1 + kCW warpgroups (2 + kCW with kRaw: the permuter is warpgroup 1) and kRows (256, 192 or 128) weight rows.
// Warpgroup 0 (the producer) streams K chunks into a kStages-deep shared-memory ring with bulk copies, one mbarrier per
// stage counting the bytes in: per chunk the codes (2 KB) and scales (256 bytes) of the block's kRows / 64 row blocks
// of 64 rows (stored tile groups of weight_layout.h, each contiguous per chunk) and the activation tile (kT token rows
// x 128 bytes). One thread of producer warp b issues row block b's copies (warp 0 also the activation tile's, unless
// kRaw), so the warps issue in parallel: one thread issuing all nine copies of a chunk took about as long as the
// consumers' chunk at M <= 64 (docs/PERF.md, change 26). The kCW (2, 3 or 4) others are the consumers, each owning
// kRows / 64 / kCW of the row blocks: they wait for a stage, dequantize their weights into A fragments and issue the
// chunk's MMAs in two halves (K steps 0-1, then 2-3), and release the stage (a second mbarrier per stage, one arrival
// per consumer warp) once those MMAs are done, which they wait for only after issuing the next chunk's (two A buffers;
// one where the registers do not hold two). The warpgroups keep no common pace: while one dequantizes, another's MMAs
// can run, and the producer warps refill a stage as soon as all consumers have released it.
// Blocks of 128 rows (two consumer warpgroups of one row block each) double the blocks of a layer, and blocks of
// 192 (three) take 4/3 of them: for grids whose 256-row blocks leave SMs idle in their last round or need a deep K
// split (the host's wgmma_grid picks by its time estimate).
// Grid: x = token blocks of kT (fastest: blocks reading the same weights run together), y = blocks of kRows rows:
// first the whole row blocks 0 .. split_rb0 - 1, then splits x the row blocks from split_rb0 on, each split taking
// one K range (f32 partial sums, added in order by a second kernel: deterministic). Splitting only the row
// blocks of a last, partial round shortens that round without the partial sums of every block.
#include <algorithm>
#include <cstdint>
#include <mutex>
#include <string>
#include <type_traits>

#include "backends/cuda/gemm.cuh"
#include "backends/cuda/mma_frag.cuh"
#include "backends/cuda/quantize_dev.cuh"
#include "backends/cuda/wgmma_ptx.cuh"

namespace nvfp4::cuda::detail {
namespace {

constexpr int kStages = kWgmmaStages;
// Warpgroups: the producer (0), with `raw` the permuter (1), then kCW consumer warpgroups (2: two row blocks each, or
// one each in blocks of 128 rows; 3 and 4: one each).
constexpr int first_consumer_wg(bool raw) { return raw ? 2 : 1; }
constexpr int threads(int cw, bool raw = false) { return 128 * (first_consumer_wg(raw) + cw); }
// Registers per thread after the start: the block keeps what it launched with (65536 / threads, rounded down
// to 8), the producer (and the permuter) give some back and the consumers take them. 2 consumers: launched with 168
// each (384 threads), then 40 for the producer and 232 for the consumers (128·40 + 256·232 = 384·168); 3 consumers:
// 128 (512 threads), then 24 and 160 (128·24 + 384·160 <= 512·128); 4 consumers: 96 (640 threads), then 24 and 112
// (128·24 + 512·112 <= 640·96). With the permuter (2 consumers of one row block each): 128 (512 threads), then 24
// for the producer, 72 for the permuter (its copies go to the staging ring, not registers; no spills) and 200 for
// the consumers (128·24 + 128·72 + 256·200 <= 512·128).
constexpr int kPermuterRegs = 72;
constexpr int launch_regs(int cw, bool raw = false) { return 65536 / threads(cw, raw) / 8 * 8; }
constexpr int producer_regs(int cw, bool raw = false) { return cw == 2 && !raw ? 40 : 24; }
constexpr int consumer_regs(int cw, bool raw = false) { return raw ? 200 : cw == 2 ? 232 : cw == 3 ? 160 : 112; }
constexpr bool regs_fit(int cw, bool raw = false) {
  return 128 * producer_regs(cw, raw) + (raw ? 128 * kPermuterRegs : 0) + 128 * cw * consumer_regs(cw, raw) <=
         threads(cw, raw) * launch_regs(cw, raw);
}
static_assert(launch_regs(2) == 168 && launch_regs(3) == 128 && launch_regs(4) == 96 && launch_regs(2, true) == 128 &&
                  regs_fit(2) && regs_fit(3) && regs_fit(4) && regs_fit(2, true),
              "setmaxnreg budgets must fit the registers the block launched with");
// The 16-byte unit of a token row of an activation tile that holds its unit `unit` (0-7) of the MMA column order:
// the 128-byte swizzle wgmma's descriptor reads (unit ^ row % 8).
__host__ __device__ constexpr int swizzled_unit(int row, int unit) { return unit ^ (row & 7); }
// The permuter's 16-byte loads hold K pairs 4q .. 4q + 3 of a chunk's row; pair 4q + jj goes to word permuter_word(q)
// of 16-byte unit permuter_unit(q, jj) (before the swizzle): mma_word_of_pair's closed form for such pairs, in the
// operations the permuter's address setup compiles to.
__host__ __device__ constexpr int permuter_unit(int q, int jj) { return 4 * (q & 1) + jj; }
__host__ __device__ constexpr int permuter_word(int q) { return q >> 1; }
constexpr bool permuter_places_pairs_as_mma_word_of_pair() {
  for (int q = 0; q < 8; ++q)
    for (int jj = 0; jj < 4; ++jj)
      if (4 * permuter_unit(q, jj) + permuter_word(q) != mma_word_of_pair(4 * q + jj)) return false;
  return true;
}
static_assert(permuter_places_pairs_as_mma_word_of_pair(), "the permuter must store pairs in the MMA column order");
// Word j of a permuted row's 16-byte unit q holds K pair 16j + 2q: group j of the chunk (permute_tiles_kernel's
// quantization takes a group's 16 values from lanes q = 0 .. 7).
constexpr bool unit_word_group() {
  for (int q = 0; q < 8; ++q)
    for (int j = 0; j < 4; ++j)
      if (mma_column_k((4 * q + j) >> 3, 2 * ((4 * q + j) & 7)) != 16 * j + 2 * q) return false;
  return true;
}
static_assert(unit_word_group(), "permute_tiles_kernel's groups must be the units' words");
// The permuter's staging ring (kRaw): kXSlots chunks of the 64-token tile, each thread's 16-byte copies of a chunk
// in its own four units of the slot, so that kXSlots chunks are in flight without registers.
constexpr int kXSlots = 4;
constexpr int kXSlotBytes = 64 * 128;
constexpr int staging_bytes(bool raw) { return raw ? kXSlots * kXSlotBytes : 0; }
// + 1024 for aligning the ring (128-byte swizzle atoms), + the staging ring (kRaw), + the full and empty mbarriers
// of every stage.
constexpr int smem_bytes(int kt, int rb, bool raw = false) {
  return 1024 + kStages * wgmma_stage_bytes(kt, rb) + staging_bytes(raw) + 2 * kStages * 8;
}
static_assert(smem_bytes(64, 2, true) <= smem_bytes(128, 4), "wgmma_available checks the largest form's shared memory");

// Epilogue of the consumer warpgroups without a K split: the block's kT x kRows outputs (value(b, i, nl): the lane's
// accumulator i of its row block b, at column nl of the block) written per lane into token rows of the ring (kRing
// bytes; every chunk has been consumed, no copy is in flight), then copied out as whole rows: row r (< rows) to
// dst + r·pitch, its first `cols` values, in 16-byte units where `wide` (pitch a multiple of 8, dst 16-byte aligned);
// kC0: the block's first consumer thread.
// Stored straight from the accumulators (2-byte stores of 8 rows x 4 tokens each, unrolled over every token tile),
// the epilogue took about a fifth of the consumers' sampled time at M = 1024 (ncu); this form made most rows at
// M = 256-2048 2-10% faster, while staging a split's f32 partial sums the same way made the split rows 0.6-2.8%
// slower (docs/PERF.md, change 71).
#ifdef NVFP4_WGMMA
template <typename T, int kT, int kRows, int kCW, int kB, int kRing, int kC0, typename F>
__device__ __forceinline__ void tile_out(uint8_t* ring, int wg, int w4, F value, T* dst, int64_t pitch, int rows,
                                         int cols, bool wide) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));  // values per 16-byte unit
  constexpr int kPitch = kRows + kVec;                     // 16 bytes of padding per row: no bank conflicts
  static_assert(kT * kPitch * static_cast<int>(sizeof(T)) <= kRing, "the output tile must fit the ring");
  constexpr int kConsumers = 128 * kCW;
  T* const tile = reinterpret_cast<T*>(ring);
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, ct = threadIdx.x - kC0;
  fence_proxy_async();            // the ring was last read by the MMAs and written by the copies (async proxy)
  named_bar_sync(1, kConsumers);  // every consumer warp's MMAs are done
#pragma unroll
  for (int b = 0; b < kB; ++b) {
    const int nl0 = ((kB * wg + b) * kTileGroup + w4) * 16 + g;
#pragma unroll
    for (int j = 0; j < kT / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int nl = nl0 + 8 * (e >> 1);
        if (nl < cols) tile[(8 * j + 2 * t + (e & 1)) * kPitch + nl] = value(b, 4 * j + e, nl);
      }
  }
  named_bar_sync(1, kConsumers);
  if (wide) {
    constexpr int kUnits = kRows / kVec;  // cols: a multiple of kVec here
#pragma unroll 4
    for (int u = ct; u < kT * kUnits; u += kConsumers) {
      const int r = u / kUnits, q = u % kUnits;
      if (r < rows && kVec * q < cols)
        *reinterpret_cast<uint4*>(dst + r * pitch + kVec * q) =
            *reinterpret_cast<const uint4*>(tile + r * kPitch + kVec * q);
    }
  } else {
#pragma unroll 4
    for (int u = ct; u < kT * kRows; u += kConsumers) {
      const int r = u / kRows, c = u % kRows;
      if (r < rows && c < cols) dst[r * pitch + c] = tile[r * kPitch + c];
    }
  }
}
#endif

// Consumers: kRB / kCW row blocks each (kRB = kRows / 64), kT / 2 accumulators and 16 A-fragment registers per
// row block.
template <typename T, int kMode, int kT, int kCW, int kRows, bool kRaw>
__global__ void __launch_bounds__(threads(kCW, kRaw), 1) wgmma_gemm_kernel(const GemmParams p) {
#ifdef NVFP4_WGMMA
  constexpr int kRB = kRows / 64;
  static_assert(kRB >= 2 && kRB <= 4 && kRB % kCW == 0, "row blocks per block: 2, 3 or 4, whole per consumer");
  constexpr int kThreads = threads(kCW, kRaw), kB = kRB / kCW, kC0 = 128 * first_consumer_wg(kRaw);
  static_assert(!kRaw || (kCW == 2 && kB == 1 && kT == 64), "the permuting warpgroup: 128-row blocks, 64 tokens");
  constexpr int kStage = wgmma_stage_bytes(kT, kRB), kXBytes = kT * 128, kAcc = kT / 2;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t base = (raw + 1023) & ~1023u;
  uint8_t* const ring = smem_raw + (base - raw);
  const uint32_t staging = base + kStages * kStage;  // the permuter's (kRaw)
  const uint32_t full0 = staging + staging_bytes(kRaw), empty0 = full0 + 8 * kStages;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int64_t groups = stored_tiles(p.n16) / kTileGroup;
  // This block's kRows rows and K range: y < split_rb0 a whole block of rows, then split z of block
  // split_rb0 + j % (blocks split).
  int yb = blockIdx.y, z = 0;
  const bool split = p.splits > 1 && yb >= p.split_rb0;
  if (split) {
    const int tail = static_cast<int>((groups + kRB - 1) / kRB) - p.split_rb0, j = yb - p.split_rb0;
    yb = p.split_rb0 + j % tail;
    z = j / tail;
  }
  const int64_t g0 = static_cast<int64_t>(yb) * kRB;
  const int live = static_cast<int>(min(static_cast<int64_t>(kRB), groups - g0));  // row blocks inside
  // Chunks [c0, c0 + nc).
  const int per = split ? (p.kc + p.splits - 1) / p.splits : p.kc, c0 = z * per, nc = max(0, min(p.kc - c0, per));

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full0 + 8 * s, live + (kRaw ? 4 : 0));  // one per producer warp with a row block inside (and
                                                        // one per permuter warp)
      mbar_init(empty0 + 8 * s, 4 * kCW);
    }
    mbar_init_fence();
  }
  // Row blocks past the weight get zero codes and scales in every stage and are never copied: their MMAs add
  // zeros to accumulator rows that are not stored.
  if (live < kRB) {
    const int cu = (kRB - live) * kWgmmaCodeBytes / 16, su = (kRB - live) * kWgmmaScaleBytes / 16;
    for (int i = tid; i < kStages * (cu + su); i += kThreads) {
      const int s = i / (cu + su), j = i % (cu + su);
      uint8_t* w = ring + s * kStage + kXBytes;
      uint4* d = j < cu ? reinterpret_cast<uint4*>(w + live * kWgmmaCodeBytes) + j
                        : reinterpret_cast<uint4*>(w + kRB * kWgmmaCodeBytes + live * kWgmmaScaleBytes) + (j - cu);
      *d = make_uint4(0, 0, 0, 0);
    }
  }
  __syncthreads();

  if (warp < 4) {  // producer: warp b < live copies row block b (and warp 0 the activation tile, unless kRaw)
    setmaxnreg_dec<producer_regs(kCW, kRaw)>();
    if (lane != 0 || warp >= live || nc == 0) return;
    const int b = warp;
    const uint64_t evict_first = l2_evict_first();
    const int64_t blk0 = (g0 + b) * p.kc + c0;  // (tile group, chunk) of this warp's first chunk
    const uint8_t* wq = reinterpret_cast<const uint8_t*>(p.wq) + blk0 * kWgmmaCodeBytes;
    const uint8_t* ws = reinterpret_cast<const uint8_t*>(p.ws) + blk0 * kWgmmaScaleBytes;
    const uint8_t* xt = static_cast<const uint8_t*>(p.x) + (static_cast<int64_t>(blockIdx.x) * p.kc + c0) * kXBytes;
    const uint32_t tx = kWgmmaCodeBytes + kWgmmaScaleBytes + (b == 0 && !kRaw ? kXBytes : 0);
    const uint32_t wdst = base + kXBytes + b * kWgmmaCodeBytes;
    const uint32_t sdst = base + kXBytes + kRB * kWgmmaCodeBytes + b * kWgmmaScaleBytes;
    auto weights = [&](int i, int s) {
#ifdef NVFP4_PROBE_SAME_CHUNK
      i = 0;  // measurement build only (wrong results): the weights from L2, as the decode kernel's probe
#endif
      const uint32_t bar = full0 + 8 * s;
      bulk_copy(wdst + s * kStage, wq + static_cast<int64_t>(i) * kWgmmaCodeBytes, kWgmmaCodeBytes, bar, evict_first);
      bulk_copy(sdst + s * kStage, ws + static_cast<int64_t>(i) * kWgmmaScaleBytes, kWgmmaScaleBytes, bar, evict_first);
    };
    auto activations = [&](int i, int s) {
      bulk_copy(base + s * kStage, xt + static_cast<int64_t>(i) * kXBytes, kXBytes, full0 + 8 * s);
    };
    // The first stages' weights are requested before waiting for the previous kernel (programmatic launch:
    // it may still be writing the activations).
    const int pre = min(nc, kStages);
    for (int i = 0; i < pre; ++i) {
      mbar_arrive_expect_tx(full0 + 8 * i, tx);
      weights(i, i);
    }
    pdl_wait();
    pdl_launch_dependents();
    if (b == 0 && !kRaw)
      for (int i = 0; i < pre; ++i) activations(i, i);
    for (int i = pre, s = 0, phase = 0; i < nc; ++i) {  // s = i % kStages, phase = (i / kStages - 1) & 1
      mbar_wait(empty0 + 8 * s, phase);  // every consumer warp is done with its last use
      mbar_arrive_expect_tx(full0 + 8 * s, tx);
      weights(i, s);
      if (b == 0 && !kRaw) activations(i, s);
      if (++s == kStages) s = 0, phase ^= 1;
    }
    return;
  }

  if constexpr (kRaw) {
    if (warp < 8) {  // permuter: the activation tile of each chunk from the row-major x, permuted and swizzled
      setmaxnreg_dec<kPermuterRegs>();
      if (nc == 0) return;
      // Thread pt: 16-byte unit q (K values 8q .. 8q + 7 of the chunk, pairs 4q .. 4q + 3) of token rows r0 + 16j
      // (j < 4; rows past m re-read row m - 1, whose outputs are not stored), copied (cp.async, zeros past K) into
      // its own units of staging slot i % kXSlots kXSlots chunks ahead, then read back and stored pair 4q + jj into
      // word mma_word_of_pair(4q + jj) of the row: word q / 2 of 16-byte unit 4(q % 2) + jj (permuter_unit, _word),
      // in its swizzled place; rows r0 + 16j share r0's swizzle.
      const int pt = tid - 128, q = pt & 7, r0 = pt >> 3;
      const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kT;
      const char* src[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t row = min(m0 + r0 + 16 * j, p.m - 1);
        const T* const unit = static_cast<const T*>(p.x) + row * p.k + static_cast<int64_t>(c0) * 64 + q * 8;
        src[j] = reinterpret_cast<const char*>(unit);
      }
      uint32_t dst0[4];
#pragma unroll
      for (int jj = 0; jj < 4; ++jj)
        dst0[jj] = base + r0 * 128 + (swizzled_unit(r0, permuter_unit(q, jj)) << 4) + permuter_word(q) * 4;
      const uint32_t own = staging + pt * 16;  // unit j of a slot: own + slot·kXSlotBytes + j·2048
      const int kin = p.k - c0 * 64 - q * 8;   // this unit is inside K in chunk i where 64·i < kin
      auto copy = [&](int i, int slot) {       // chunk i into `slot`, one copy group (empty past the block's chunks)
        if (i < nc) {
#pragma unroll
          for (int j = 0; j < 4; ++j)
            cp_async16(own + slot * kXSlotBytes + j * 2048, src[j] + static_cast<int64_t>(i) * 128,
                       64 * i < kin ? 16 : 0);
        }
        cp_async_commit();
      };
      pdl_wait();  // x is the previous kernel's output
      pdl_launch_dependents();
#pragma unroll
      for (int i = 0; i < kXSlots; ++i) copy(i, i);
      // Chunk i: staging slot xs, stage s.
      for (int i = 0, xs = 0, s = 0; i < nc; ++i) {
        cp_async_wait<kXSlots - 1>();  // this thread's copies of chunk i are in
        uint4 v[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = lds128(own + xs * kXSlotBytes + j * 2048);
        if (i >= kStages) mbar_wait(empty0 + 8 * s, (i / kStages - 1) & 1);  // the consumers are done with it
        const uint32_t st = s * kStage;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          sts32(dst0[0] + st + j * 2048, v[j].x);
          sts32(dst0[1] + st + j * 2048, v[j].y);
          sts32(dst0[2] + st + j * 2048, v[j].z);
          sts32(dst0[3] + st + j * 2048, v[j].w);
        }
        fence_proxy_async();  // generic stores, read by the MMAs (async proxy)
        __syncwarp();         // the warp's stores are done
        if (lane == 0) mbar_arrive(full0 + 8 * s);
        copy(i + kXSlots, xs);  // into the slot just read (its values are stored)
        if (++xs == kXSlots) xs = 0;
        if (++s == kStages) s = 0;
      }
      cp_async_wait<0>();  // only empty groups are left
      return;
    }
  }

  // Consumers: warpgroup wg owns row blocks kB·wg .. kB·wg + kB - 1; its warp w4 supplies tile w4 of each.
  setmaxnreg_inc<consumer_regs(kCW, kRaw)>();
  const int wg = (warp >> 2) - first_consumer_wg(kRaw), w4 = warp & 3;
  float acc[kB][kAcc];
#pragma unroll
  for (int b = 0; b < kB; ++b)
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc[b][i] = 0.0f;
  pdl_wait();  // before writing y
  pdl_launch_dependents();
  // The stages' shared-memory addresses from one pinned 32-bit base, so that the walk carries no division, no
  // generic-to-shared conversion and no descriptor arithmetic beyond one add per K step (the descriptor's address
  // field is addr >> 4 of a 1024-byte aligned stage, and step k reads 32k bytes further; docs/PERF.md, change 72).
  uint32_t sbase = base;
  asm volatile("" : "+r"(sbase));  // kept in a register, not recomputed from the shared window each chunk
  const uint32_t codes_off = kXBytes + (kB * wg) * kWgmmaCodeBytes + (w4 * 32 + lane) * 16;
  const uint32_t scales_off = kXBytes + kRB * kWgmmaCodeBytes + (kB * wg) * kWgmmaScaleBytes + (w4 * 32 + lane) * 2;
  uint32_t a0[kB][4][4], a1[kB][4][4];  // A-fragment buffers (a1: not used by the one-buffer walk)
  // One chunk: wait for its stage, then wgmma_chunk (two commit groups).
  auto chunk = [&](WgmmaRingPos q, uint32_t (&a)[kB][4][4]) {
    mbar_wait(full0 + 8 * q.s, q.parity);
    const uint32_t st = sbase + q.s * kStage;
    wgmma_chunk<T, kMode, kT, kB>(st, codes_off, scales_off, p.w_dec, acc, a);
  };
  auto release = [&](WgmmaRingPos q) {
    __syncwarp();
    if (lane == 0) mbar_arrive(empty0 + 8 * q.s);
  };
  wgmma_ring_walk<kStages, wgmma_two_buffers(kT, kCW)>(nc, a0, a1, chunk, release);
#pragma unroll
  for (int b = 0; b < kB; ++b) fence_acc(acc[b]);

  // acc[b][4j + e] is the m16n8 accumulator layout of token tile j (8 tokens) of this warp's 16 rows.
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kT;
  if (!split) {  // y_value's values through the ring, out as whole rows of y
    const int n0 = static_cast<int>(g0 * kTileGroup * 16), cols = min(kRows, p.n - n0);
    const int rows = static_cast<int>(min(static_cast<int64_t>(kT), p.m - m0));
    T* const y = static_cast<T*>(p.y) + m0 * p.n + n0;
    const bool wide = p.n % 8 == 0 && reinterpret_cast<uintptr_t>(p.y) % 16 == 0;
    tile_out<T, kT, kRows, kCW, kB, kStages * kStage, kC0>(
        ring, wg, w4, [&](int b, int i, int nl) { return y_value<T>(p, n0 + nl, acc[b][i]); }, y, p.n, rows, cols,
        wide);
    return;
  }
#pragma unroll
  for (int b = 0; b < kB; ++b) {
    if (kB * wg + b >= live) continue;
    const int tile = static_cast<int>((g0 + kB * wg + b) * kTileGroup + w4);
    if (tile >= p.n16) continue;
    const int g = lane >> 2, t = lane & 3;  // K split: raw f32 partial sums, [split][token][n - n0]
    const int n0 = p.split_rb0 * kRows, wn = p.n - n0;
#pragma unroll
    for (int j = 0; j < kT / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int n = tile * 16 + g + 8 * (e >> 1);
        const int64_t tok = m0 + 8 * j + 2 * t + (e & 1);
        if (n < p.n && tok < p.m) p.partial[(z * p.m + tok) * wn + (n - n0)] = acc[b][4 * j + e];
      }
  }
#endif
}

// Activations permuted into the MMA column order (weight_layout.h's mma_column_k) and tiled: [token block][chunk]
// [kT rows x 128 bytes], each row's 16-byte units stored at unit q ^ (row % 8) (the 128-byte swizzle wgmma's
// descriptor reads), rows past m zero, so one bulk copy brings a chunk's tile into shared memory.
// One thread per 16-byte unit. gs > 0 (W4A4): the values are quantized and dequantized on the way (global scale gs,
// the group factors of `factors`), as launch_quantize_dequant would have written them: word j of unit q holds K
// pair 16j + 2q of the chunk (unit_word_group), so a token row's 8 lanes hold two values of each of its 4 groups.
template <typename T>
__global__ void permute_tiles_kernel(const T* __restrict__ x, int64_t m, int k, int kc, int kt, float gs,
                                     const float2* __restrict__ factors, T* __restrict__ out) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t units = (m + kt - 1) / kt * kt * kc * 8;
  const bool in = idx < units;  // a row's 8 lanes are in or out together (units is a multiple of 8)
  if (!in && !(gs > 0.0f)) return;
  const int q = static_cast<int>(idx & 7);
  const int64_t tile_row = idx >> 3;  // (tb * kc + c) * kt + r
  const int r = static_cast<int>(tile_row % kt);
  const int64_t tc = tile_row / kt;
  const int c = static_cast<int>(tc % kc);
  const int64_t row = tc / kc * kt + r;
  uint32_t v[4] = {0, 0, 0, 0};
  if (in && row < m) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int w = 4 * q + j;
      const int kx = c * 64 + mma_column_k(w >> 3, 2 * (w & 7));
      if (kx < k) v[j] = *reinterpret_cast<const uint32_t*>(x + row * k + kx);
    }
  }
  if (gs > 0.0f) {  // every lane of the warp (the shuffles)
#pragma unroll
    for (int j = 0; j < 4; ++j)
      lanes_quant_dequant_words<T, 2, 8>(&v[j], gs, [factors](uint32_t s8) { return __ldg(factors + s8); });
    if (!in) return;
  }
  uint8_t* dst = reinterpret_cast<uint8_t*>(out) + tile_row * 128 + (swizzled_unit(r, q) << 4);
  *reinterpret_cast<uint4*>(dst) = make_uint4(v[0], v[1], v[2], v[3]);
}

// y = T(T(Σ_z partial[z] · out_scale) + bias) for the split columns n0 .. N - 1, the splits added in order z =
// 0, 1, ... (deterministic).
template <typename T>
__global__ void splitk_reduce_kernel(const GemmParams p) {
  pdl_wait();  // the partial sums
  pdl_launch_dependents();
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int n0 = p.split_rb0 * p.wgmma_rows, wn = p.n - n0;
  const int64_t total = p.m * wn;
  if (idx >= total) return;
  float sum = p.partial[idx];
  for (int z = 1; z < p.splits; ++z) sum += p.partial[z * total + idx];
  store_y<T>(p, idx / wn, n0 + static_cast<int>(idx % wn), sum);
}

__global__ void wgmma_probe_kernel(int* out) {
#ifdef NVFP4_WGMMA
  *out = 1;
#else
  *out = 0;
#endif
}

template <typename T, int kMode, int kT, int kCW, int kRows, bool kRaw = false>
void launch_typed(const GemmParams& p, cudaStream_t stream) {
  constexpr auto kernel = wgmma_gemm_kernel<T, kMode, kT, kCW, kRows, kRaw>;
  constexpr int kRB = kRows / 64;
  raise_dynamic_smem_limit<kernel>(smem_bytes(kT, kRB, kRaw));
  const int64_t groups = stored_tiles(p.n16) / kTileGroup;
  const int64_t y = wgmma_grid_rows(ceil_div(groups, kRB), p.splits, p.split_rb0);
  const dim3 grid(static_cast<unsigned>(ceil_div(p.m, kT)), static_cast<unsigned>(y));
  launch_maybe_programmatic(p.programmatic, kernel, grid, dim3(threads(kCW, kRaw)), smem_bytes(kT, kRB, kRaw), stream,
                            p);
}

template <typename T, int kMode>
void launch_tokens(const GemmParams& p, int tile_tokens, int consumers, cudaStream_t stream) {
  if (p.wgmma_rows == 128) {  // two consumer warpgroups of one row block each
    if (tile_tokens == 64 && p.wgmma_raw_x) launch_typed<T, kMode, 64, 2, 128, true>(p, stream);  // raw x
    else if (tile_tokens == 64) launch_typed<T, kMode, 64, 2, 128>(p, stream);
    else launch_typed<T, kMode, 128, 2, 128>(p, stream);
  } else if (p.wgmma_rows == 192) {  // three of one row block each
    if (tile_tokens == 64) launch_typed<T, kMode, 64, 3, 192>(p, stream);
    else launch_typed<T, kMode, 128, 3, 192>(p, stream);
  } else if (tile_tokens == 64) {
    if (consumers == 4) launch_typed<T, kMode, 64, 4, 256>(p, stream);
    else launch_typed<T, kMode, 64, 2, 256>(p, stream);
  } else {
    if (consumers == 4) launch_typed<T, kMode, 128, 4, 256>(p, stream);
    else launch_typed<T, kMode, 128, 2, 256>(p, stream);
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
    if (prop.major == 9 && prop.minor == 0 && prop.sharedMemPerBlockOptin >= static_cast<size_t>(smem_bytes(128, 4))) {
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

void launch_permute_activations(const void* x, DType act, int64_t m, int k, int kc, int tile_tokens, float x_gs,
                                const float2* x_factors, void* out, bool programmatic, cudaStream_t stream) {
  const int64_t units = ceil_div(m, tile_tokens) * tile_tokens * kc * 8;
  const dim3 blocks(static_cast<unsigned>(ceil_div(units, 256)));
  if (act == DType::BF16)
    launch_maybe_programmatic(programmatic, permute_tiles_kernel<__nv_bfloat16>, blocks, dim3(256), 0, stream,
                              static_cast<const __nv_bfloat16*>(x), m, k, kc, tile_tokens, x_gs, x_factors,
                              static_cast<__nv_bfloat16*>(out));
  else
    launch_maybe_programmatic(programmatic, permute_tiles_kernel<__half>, blocks, dim3(256), 0, stream,
                              static_cast<const __half*>(x), m, k, kc, tile_tokens, x_gs, x_factors,
                              static_cast<__half*>(out));
  NVFP4_CUDA_CHECK(cudaGetLastError());
}

// y = T(T(Σ_z p.partial[z] · out_scale) + bias) for the split columns after a K-split launch.
static void launch_splitk_reduce(const GemmParams& p, DType act, cudaStream_t stream) {
  const dim3 blocks(static_cast<unsigned>(ceil_div(p.m * (p.n - p.split_rb0 * p.wgmma_rows), 256)));
  if (act == DType::BF16)
    launch_maybe_programmatic(p.programmatic, splitk_reduce_kernel<__nv_bfloat16>, blocks, dim3(256), 0, stream, p);
  else
    launch_maybe_programmatic(p.programmatic, splitk_reduce_kernel<__half>, blocks, dim3(256), 0, stream, p);
  NVFP4_CUDA_CHECK(cudaGetLastError());
}

void launch_wgmma_gemm(const GemmParams& p, DType act, Mode mode, int tile_tokens, int consumers,
                       cudaStream_t stream) {
  NVFP4_CHECK(!p.custom_epilogue(), "wgmma gemm: no SwiGLU or residual epilogue (the decode kernel's only)");
  NVFP4_CHECK(p.wgmma_rows == 256 || p.wgmma_rows == 192 || p.wgmma_rows == 128,
              "wgmma gemm: blocks of " + std::to_string(p.wgmma_rows) + " rows, expected 128, 192 or 256");
  NVFP4_CHECK(wgmma_split_inside(p.splits, p.split_rb0, p.wgmma_rows, p.n),
              "wgmma gemm: first split row block " + std::to_string(p.split_rb0) + " outside the " +
                  std::to_string(p.n) + " rows");
  NVFP4_CHECK(!p.wgmma_raw_x || wgmma_raw_x_fits(p.wgmma_rows, tile_tokens),
              "wgmma gemm: row-major activations need blocks of 128 rows and 64-token tiles");
  NVFP4_CHECK(!(p.x_gs > 0.0f), "wgmma gemm: W4A4 activations must be quantized by the permutation before it");
  NVFP4_CHECK((tile_tokens == 64 || tile_tokens == 128) && wgmma_consumers_fit(p.wgmma_rows, consumers),
              "wgmma gemm: tile_tokens " + std::to_string(tile_tokens) + ", consumers " + std::to_string(consumers) +
                  ", expected 64 or 128, and 2 or 4 (blocks of 192 and 128 rows: 3 and 2)");
  if (act == DType::BF16) {
    if (mode == Mode::Exact) launch_tokens<__nv_bfloat16, 0>(p, tile_tokens, consumers, stream);
    else if (mode == Mode::Vllm) launch_tokens<__nv_bfloat16, 1>(p, tile_tokens, consumers, stream);
    else launch_tokens<__nv_bfloat16, 2>(p, tile_tokens, consumers, stream);
  } else {
    if (mode == Mode::Exact) launch_tokens<__half, 0>(p, tile_tokens, consumers, stream);
    else if (mode == Mode::Vllm) launch_tokens<__half, 1>(p, tile_tokens, consumers, stream);
    else launch_tokens<__half, 2>(p, tile_tokens, consumers, stream);
  }
  NVFP4_CUDA_CHECK(cudaGetLastError());
  if (p.splits > 1) launch_splitk_reduce(p, act, stream);
}

}  // namespace nvfp4::cuda::detail
