// Fused mixed-input GEMM for NVFP4 weights (SPEC §5), tensor cores via mma.sync m16n8k16 (sm_80+),
// fp32 accumulation. Activations are T (for W4A4, the quantizer's exact or vLLM-rounded dequantized values,
// quantize.cuh); weights stay FP4 in memory (weight_layout.h's fragment order) and are dequantized in
// registers:
//   Mode::Exact (w4a16, w4a4): the code's bits are moved into the sign/exponent/mantissa bits of T (value
//     e2m1·2^-b; dequant_bits.h's reg_bits)
//     and multiplied by a T register holding S·2^(b-c); the product e2m1·S·2^-c is exact in T (<= 6
//     significant bits, no overflow, subnormals exact), and 2^c (c = 8 bf16, 7 f16) is folded into the f32
//     output factor, which is exact because it is a power of two.
//   Mode::Vllm (w4a4-vllm): T( e2m1 · f32(scale) ) computed in f32 and rounded to T, per element;
//   Mode::VllmPow2 (w4a4-vllm where vllm_weights.h's plan fits): the same values times 2^τ, exactly, from two T
//     values per block and five T operations per register.
#include <algorithm>
#include <string>
#include <type_traits>

#include "backends/cuda/gemm.cuh"
#include "backends/cuda/mma_frag.cuh"
#include "backends/cuda/quantize_dev.cuh"
#include "common/error.h"

namespace nvfp4::cuda::detail {
namespace {

// MMA steps [kS0, kS0 + 2) of one K chunk: weight tiles wv (scale registers ws2 / wsx from scale_regs) times
// the activation fragments xh of kNT token tiles (xh[j]: the lane's 8 activations of those two steps, words
// 2s' and 2s'+1 for step kS0 + s'); kFmaShifts: dequant_step's form (fma_shifts).
template <typename T, int kMode, int kNT, int kNW, int kS0, bool kFmaShifts>
__device__ __forceinline__ void chunk_half(const uint4 (&wv)[kNW], const uint32_t (&ws2)[kNW][2],
                                           const uint32_t (&wsx)[kNW][2], const uint4 (&xh)[kNT],
                                           float (&acc)[kNW][kNT][4]) {
#pragma unroll
  for (int s = kS0; s < kS0 + 2; ++s) {
    uint32_t b[kNT][2];
#pragma unroll
    for (int j = 0; j < kNT; ++j) {
      b[j][0] = s == kS0 ? xh[j].x : xh[j].z;
      b[j][1] = s == kS0 ? xh[j].y : xh[j].w;
    }
#pragma unroll
    for (int i = 0; i < kNW; ++i) {
      const uint32_t q = s == 0 ? wv[i].x : s == 1 ? wv[i].y : s == 2 ? wv[i].z : wv[i].w;
      uint32_t a[4];
      dequant_step<T, kMode, kFmaShifts>(q, ws2[i], wsx[i], a);
#pragma unroll
      for (int j = 0; j < kNT; ++j) mma16816<T>(acc[i][j], a, b[j][0], b[j][1]);
    }
  }
}

// B fragments from each lane's own 16 consecutive K values (16t .. 16t+15): words 2s and 2s+1 are K = 16t + 4s
// + {0,1} and {2,3}, the columns 2t, 2t+1, 2t+8, 2t+9 of step s in weight_layout.h's mma_column_k.
constexpr bool lane_holds_its_columns() {
  for (int s = 0; s < 4; ++s)
    for (int t = 0; t < 4; ++t)
      for (int j = 0; j < 2; ++j)
        if (mma_column_k(s, 2 * t + j) != 16 * t + 4 * s + j ||
            mma_column_k(s, 2 * t + 8 + j) != 16 * t + 4 * s + 2 + j)
          return false;
  return true;
}
static_assert(lane_holds_its_columns(), "the decode kernel's activation words must match the fragment columns");

// Whether a decode kernel dequantizes with two of its integer shifts on the FMA pipe (mma_frag.cuh's
// reg_bits_dev): the exact mode's 8-warp kernels other than the one-tile kernel. Measured against the shifts,
// same call (docs/PERF.md, change 93): M = 1 10240x8192 16.7 -> 16.2 µs, 28672x4096 21.6 -> 20.6-20.8, M = 16
// 10240x8192 22.6 -> 21.4-21.6, 6144x4096 7.9 -> 7.5; slower in the one-tile kernel (6144x4096 at M = 1 6.7 ->
// 6.8-7.0), the 12-warp light 16-token kernel (4096x14336 at M = 16 14.7 -> 15.1) and the vLLM power-of-two form,
// whose dequantization is mostly on the FMA pipe already (1-6%).
constexpr bool fma_shifts(int mode, int nt, int nw, int warps) {
  return mode == static_cast<int>(Mode::Exact) && !(nt == 1 && nw == 1) && warps == 8;
}

// The register pipeline of accumulate() for kNT token tiles of 8 and kNW weight tiles per warp: kS stages of
// kU chunks of weights and scales in a ring (while one stage is computed, the next kS - 1 are requested:
// (kS - 1)·kU·kNW chunk-tiles of 512 bytes per warp in flight), and where the activations come from: their
// stage (kActInStage: loaded with it), a buffer filled one chunk ahead (kActChunkAhead: two buffers), or one
// buffer whose halves are replaced as soon as the steps that use them have issued. Chosen per kernel from
// same-machine measurements at M = 1, 16 and 32 against the earlier two-stage kernel (docs/PERF.md, change 31),
// within the register budget (fused_blocks_per_sm: 80 registers for one weight tile with one token tile and
// for the light kernels, else 128; spills in a main loop: 2 instructions in the 32-token two-tile kernel, none
// elsewhere): one token tile and one weight tile, 3 stages of 2 chunks with the activations a chunk ahead (its
// activation loads often miss L1); 32 tokens and one weight tile, 2 stages of 1 chunk with the activations in
// them; the light kernels (16 tokens and one tile, change 32; 8 tokens and two tiles, change 33) 2 stages of
// 2 chunk-tiles (for two tiles: faster than 3 stages, or than the activations a chunk ahead); the others 2
// stages of up to 4 chunk-tiles (1 for 32 tokens, whose activation registers are 4x larger) with the
// activations half a chunk ahead, except 16 tokens with one or two tiles, whose activations (2 KB per chunk,
// often from L2: L1 hit rate 48% on 8192x28672, ncu) come a whole chunk ahead (change 37; four tiles spill).
template <int kNT, int kNW, bool kLight>
struct Pipeline {
  static constexpr bool kOneTile = kNT == 1 && kNW == 1;
  static constexpr int kS = kOneTile ? 3 : 2;
  static constexpr int kTiles = kOneTile || kLight ? 2 : kNT == 4 ? 1 : 4;  // chunk-tiles per stage
  static constexpr int kU = kTiles / kNW > 1 ? kTiles / kNW : 1;
  static constexpr bool kActInStage = kNT == 4 && kNW == 1;
  static constexpr bool kActChunkAhead = kOneTile || (kNT == 2 && kNW <= 2 && !kLight);
};

// Whether the decode kernel of kNT token tiles and kNW weight tiles per warp takes the power-of-two form's scale
// registers from a table in shared memory (pow2_table_entry of every scale byte, filled by the block) instead of
// computing them per chunk: with 2 and 4 tiles per warp, 3.5-7% faster at M = 1 and 16 on the layers that run them
// (docs/PERF.md, change 58); the kernels that quantize the W4A4 row themselves, all one-token-tile kernels (6144x4096
// at M = 1 9.7-9.8 -> 9.4-9.5 µs; change 66). With one tile per warp the table had lost 1-3% in the one-tile kernel and 2-4% in the light
// 16-token kernel (which spilled with it) while it was filled before the first weight requests (change 58); filled
// after them (change 78) it wins there too: the one-tile kernel 4096x14336 at M = 1 18.0 -> 17.1, its 12-warp
// form's spills gone (20-24 bytes; change 101); the 16-token kernels at M = 9 / 16 4096x14336 19.9 / 20.2 -> 18.5 /
// 18.9, 10240x8192 27.1 / 27.7 -> 26.6 / 27.2, 4096x4096 8.4 / 8.6 -> 8.1 / 8.4, the 12-warp light kernel's spills
// gone (16 bytes; change 102). The 32-token kernels (kNT = 4) with one tile per warp were not measured with it.
constexpr bool pow2_table(int mode, int nt, int nw) {
  return mode == static_cast<int>(Mode::VllmPow2) && (nw >= 2 || nt <= 2);
}

// Accumulates chunks [c0, c1) of weight tiles tile0 .. tile0+kNW-1 (tiles past N16 are zero tiles whose
// outputs are never stored) for the token rows m0 + 8j + g (j < kNT; rows past M re-read row M-1) into acc,
// with Pipeline<kNT, kNW, kLight>'s register stages (pow2_tab: the block's table where pow2_table holds).
// kQuant (M = 1, one token tile; GemmParams::x_gs): x is the raw row; after the wait the warp quantizes and
// dequantizes its chunks' groups of it (four lanes per group, quad_quant_dequant with the layer's table of group
// factors, GemmParams::x_factors, whose 1 KB the warp requests before the wait: the quantizer kernel's arithmetic,
// so the values are the ones that kernel writes) into qbuf, its ceil(kc / wk) chunks of shared memory, and reads
// its activations from there.
// Pointers advance by a constant per chunk and the main loop has no per-element predicates; a last chunk that
// reaches past K (K % 64 != 0) is done after it, with the lane's activations past K read as zero.
// setup() runs after the first register stages are requested and before the wait for the previous kernel
// (fused_gemm_kernel's power-of-two table and its barrier; every warp of such a block calls accumulate, with an
// empty K range where it has no tile). kFmaShifts: the kernel's fma_shifts.
template <typename T, int kMode, int kNT, int kNW, bool kLight, bool kQuant, bool kFmaShifts, typename Setup>
__device__ __forceinline__ void accumulate(const GemmParams& p, const uint2* pow2_tab, uint2* qbuf, int tile0,
                                           int64_t m0, int c0, int c1, float (&acc)[kNW][kNT][4], Setup setup) {
  static_assert(!kQuant || kNT == 1, "the kernel quantizes one token row only");
  using P = Pipeline<kNT, kNW, kLight>;
  constexpr int kS = P::kS, kU = P::kU;
  // chunks per trip of the main loop: whole turns of the ring, an even number with two activation buffers
  // (and a multiple of the activation ring, so that a chunk's slot is known at compile time)
  constexpr int kTrip0 = kS * kU * (P::kActChunkAhead && (kS * kU) % 2 ? 2 : 1);
  constexpr int kRing = act_ring_chunks(kNT, kNW, kMode);  // the activation ring (act_ring_chunks)
  constexpr int kRing1 = kRing > 0 ? kRing : 1;
  constexpr int kTrip = kTrip0 % kRing1 ? kTrip0 * kRing1 : kTrip0;
  static_assert(kRing == 0 || (kTrip % kRing1 == 0 && kRing >= 2), "the ring's slots must repeat with the trip");
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  // Tiles tile0 .. tile0+kNW-1 lie in one stored group (tile0 is a multiple of kNW, which divides 4), 32
  // lanes apart; a chunk further is kTileGroup·32 lanes further. Tiles past N16 are stored zero tiles.
  constexpr int kChunkStride = kTileGroup * 32;
  static_assert(kTileGroup % kNW == 0, "a warp's tiles must lie in one stored group");
  const int64_t block0 = fragment_block(tile0, c0, p.kc) * 32 + lane;
  const uint4* wp = p.wq + block0;
  const uint16_t* sp = p.ws + block0;
  // The lane's 16 activations of chunk c of token row j: xq[j][8·(c - c0)], xq[j][8·(c - c0) + 1].
  const uint4* xq[kNT];
#pragma unroll
  for (int j = 0; j < kNT; ++j) {
    const int64_t row = min(m0 + 8 * j + g, p.m - 1);
    xq[j] = reinterpret_cast<const uint4*>(static_cast<const T*>(p.x) + row * p.k + c0 * 64 + 16 * t);
  }
  const int cm = min(c1, p.k / 64);  // chunks [c0, cm) lie inside K

  // The activation ring (kRing > 0, 16 tokens): slot r (chunks c0 + r mod kRing) holds the 16 token rows' 128 bytes
  // of the chunk, piece q (16 bytes) of row w at w·128 + (q ^ (w & 7))·16, so that both the copies (8 lanes per row,
  // 4 rows per instruction) and the reads (lane g, t: rows g and 8 + g, pieces 2t and 2t + 1) hit distinct banks.
  // Rows past M are zeros (copies of 0 source bytes).
  int xoff = 0;       // the lane's copy source of chunk c0 in x (elements): row m0 + (lane >> 3), piece lane & 7
  int rows_left = 0;  // rows of x from the lane's first copy row on
  uint32_t ring_dst[2], ring_src[2];
  if constexpr (kRing > 0) {
    const uint32_t ring = smem_addr(qbuf);
    const int q = lane & 7, w0 = lane >> 3;
    rows_left = static_cast<int>(min(p.m - m0 - w0, static_cast<int64_t>(16)));
    xoff = static_cast<int>(min(m0 + w0, p.m - 1) * p.k + c0 * 64 + 8 * q);
#pragma unroll
    for (int e = 0; e < 2; ++e) ring_dst[e] = ring + (w0 * 8 + (q ^ (w0 + 4 * e))) * 16;
    ring_src[0] = ring + (8 * g + ((2 * t) ^ g)) * 16;
    ring_src[1] = ring + (8 * g + ((2 * t + 1) ^ g)) * 16;
  }
  // Copies chunk c into its slot (rows past M as zeros; nothing past the main loop's chunks) and closes a copy
  // group.
  auto ring_issue = [&](int c, int ring_slot) {  // ring_slot: (c - c0) % kRing
    if constexpr (kRing > 0) {
      if (c < cm) {
        const T* src = static_cast<const T*>(p.x) + xoff + (c - c0) * 64;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const bool in = 4 * i < rows_left;  // the row exists (else 0 bytes are read from row m0 + w0's)
          cp_async16(ring_dst[i & 1] + ring_slot * 2048 + 512 * i, in ? src + 4 * i * p.k : src, in ? 16 : 0);
        }
      }
      cp_async_commit();
    }
  };
  // Half h (steps 2h, 2h + 1) of the lane's activations of the chunk in slot ring_slot, once its copies are in.
  auto ring_half = [&](uint4 (&xh)[kNT], int ring_slot, int h) {
#pragma unroll
    for (int j = 0; j < kNT; ++j) xh[j] = lds128(ring_src[h] + ring_slot * 2048 + j * 1024);
  };

  struct Stage {
    uint4 wv[kU][kNW];
    uint32_t sv[kU][kNW];
    uint4 xs[P::kActInStage ? kU : 1][kNT][2];  // the stage's activations (kActInStage)
  };
  auto load_weights = [&](Stage& st, int c) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
#ifdef NVFP4_PROBE_SAME_CHUNK
      // Measurement build only (wrong results): every stage reads the warp's first chunks again, so the weights
      // come from L2 instead of DRAM; the time left is the kernel's own (docs/PERF.md, change 87).
      const int64_t off = static_cast<int64_t>(u) * kChunkStride;
#else
      const int64_t off = static_cast<int64_t>(c + u - c0) * kChunkStride;
#endif
      if (c + u < cm) {
#pragma unroll
        for (int i = 0; i < kNW; ++i) {
          st.wv[u][i] = ld_stream(wp + off + 32 * i);
          st.sv[u][i] = sp[off + 32 * i];
        }
      }
    }
  };
  auto load_stage_acts = [&](Stage& st, int c) {
    if constexpr (P::kActInStage) {
#pragma unroll
      for (int u = 0; u < kU; ++u)
        if (c + u < cm)
#pragma unroll
          for (int j = 0; j < kNT; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) st.xs[u][j][h] = xq[j][8 * (c + u - c0) + h];
    }
  };
  // xv[b][j][h]: activations feeding steps 2h and 2h+1 of token tile j (buffer b; one buffer unless
  // kActChunkAhead).
  uint4 xv[P::kActChunkAhead ? 2 : 1][kNT][2];
  auto load_act_half = [&](uint4 (&x)[kNT][2], int h, int c) {
#pragma unroll
    for (int j = 0; j < kNT; ++j) x[j][h] = xq[j][8 * (c - c0) + h];
  };
  // Chunk c with the activations x (a stage's, or buffer b of xv); next: the following chunk's activations are
  // requested (into the other buffer, or half by half into this one; not with kActInStage).
  auto scales = [&](const uint32_t (&sv)[kNW], uint32_t (&ws2)[kNW][2], uint32_t (&wsx)[kNW][2]) {
    if constexpr (pow2_table(kMode, kNT, kNW))
      scale_regs_from_table<kNW>(sv, pow2_tab, ws2, wsx);
    else
      scale_regs<T, kMode, kNW>(sv, p.w_dec, ws2, wsx);
  };
  auto chunk = [&](const uint4 (&wv)[kNW], const uint32_t (&sv)[kNW], const uint4 (&x)[kNT][2], int b, int c,
                   bool next) {
    next = next && !P::kActInStage;
    uint32_t ws2[kNW][2], wsx[kNW][2];
    scales(sv, ws2, wsx);
    uint4 xh[kNT];
    if constexpr (P::kActChunkAhead) {
      if (next) {
        load_act_half(xv[b ^ 1], 0, c + 1);
        load_act_half(xv[b ^ 1], 1, c + 1);
      }
    }
#pragma unroll
    for (int j = 0; j < kNT; ++j) xh[j] = x[j][0];
    chunk_half<T, kMode, kNT, kNW, 0, kFmaShifts>(wv, ws2, wsx, xh, acc);
    // A half's registers are requested again only after the steps that read them have issued, so the
    // compiler needs no second copy of them (no moves, no spills).
    if (!P::kActChunkAhead && next) load_act_half(xv[b], 0, c + 1);
#pragma unroll
    for (int j = 0; j < kNT; ++j) xh[j] = x[j][1];
    chunk_half<T, kMode, kNT, kNW, 2, kFmaShifts>(wv, ws2, wsx, xh, acc);
    if (!P::kActChunkAhead && next) load_act_half(xv[b], 1, c + 1);
  };
  // Chunk c with its activations from the ring (slot ring_slot), each half read just before its steps.
  auto chunk_ring = [&](const uint4 (&wv)[kNW], const uint32_t (&sv)[kNW], int ring_slot) {
    uint32_t ws2[kNW][2], wsx[kNW][2];
    scales(sv, ws2, wsx);
    uint4 xh[kNT];
    ring_half(xh, ring_slot, 0);
    chunk_half<T, kMode, kNT, kNW, 0, kFmaShifts>(wv, ws2, wsx, xh, acc);
    ring_half(xh, ring_slot, 1);
    chunk_half<T, kMode, kNT, kNW, 2, kFmaShifts>(wv, ws2, wsx, xh, acc);
  };

  Stage st[kS];
  // The first kS - 1 stages of weights are requested before waiting for the previous kernel in the stream
  // (programmatic launch: it may still be writing the activations or reading y; otherwise pdl_wait returns at
  // once). The wait sits in a branch: straight-line, the compiler scheduled those loads after it in 10 of the
  // 20 bf16 kernels (SASS: LDG after ACQBULK), streaming nothing while the previous kernel ran.
#pragma unroll
  for (int s = 0; s + 1 < kS; ++s) load_weights(st[s], c0 + s * kU);
  float ft_token = 0.0f;
  if constexpr (kQuant) ft_token = prefetch_group_factors(p.x_factors);  // read after the wait
  setup();
  if (p.programmatic) pdl_wait();
  // The next kernel in the stream, if launched programmatically, may now be scheduled and stream its first
  // weights while this grid's last blocks run (it waits for this grid before it touches activations or y).
  // Not before our own wait: then at most one grid waits ahead of the running one.
  pdl_launch_dependents();
  if constexpr (kQuant) {
    const int quarters = (c1 - c0) * 16;  // of groups of 16; a group's four lanes are in or out together
    const int64_t kq = p.k / 4;
    const uint2* xr = static_cast<const uint2*>(p.x) + static_cast<int64_t>(c0) * 16;
    // Batches of kQuantBatch quarters per lane, every load of a batch issued before its arithmetic (one
    // round trip per batch: the shuffles kept the compiler from hoisting a later quarter's load), and the
    // batch's quarters computed whole, those past the range too (zeros, not stored), so that their chains
    // interleave: this runs between the grid-dependency wait and the first MMA.
    constexpr int kQuantBatch = 4;
    for (int q0 = 0; q0 < quarters; q0 += 32 * kQuantBatch) {
      uint2 raw[kQuantBatch];
#pragma unroll
      for (int b = 0; b < kQuantBatch; ++b) {
        const int q = q0 + 32 * b + lane;
        raw[b] = q < quarters && c0 * 16ll + q < kq ? xr[q] : make_uint2(0, 0);  // past K: zeros, never read
      }
      uint2 d[kQuantBatch];
#pragma unroll
      for (int b = 0; b < kQuantBatch; ++b)
        d[b] = quad_quant_dequant<T>(raw[b], p.x_gs, [&p](uint32_t s8) { return __ldg(p.x_factors + s8); });
#pragma unroll
      for (int b = 0; b < kQuantBatch; ++b)
        if (q0 + 32 * b + lane < quarters) qbuf[q0 + 32 * b + lane] = d[b];
    }
    group_factor_sink(ft_token, p.x_gs, reinterpret_cast<float*>(qbuf));
    __syncwarp();
    xq[0] = reinterpret_cast<const uint4*>(qbuf) + 2 * t;  // the lane's 16 values of chunk c at 8·(c - c0)
  }
  if constexpr (kRing > 0) {
#pragma unroll
    for (int r = 0; r + 1 < kRing; ++r) ring_issue(c0 + r, r);
  } else if (P::kActInStage) {
    load_stage_acts(st[0], c0);
  } else if (c0 < cm) {
    load_act_half(xv[0], 0, c0);
    load_act_half(xv[0], 1, c0);
  }
#pragma unroll
  for (int s = 1; s + 1 < kS; ++s) load_stage_acts(st[s], c0 + s * kU);
  for (int c = c0; c < cm; c += kTrip) {
#pragma unroll
    for (int i = 0; i < kTrip; i += kU) {
      const int s = (i / kU) % kS;
      load_weights(st[(s + kS - 1) % kS], c + i + (kS - 1) * kU);
      load_stage_acts(st[(s + kS - 1) % kS], c + i + (kS - 1) * kU);
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int ci = c + i + u;
        const int b = P::kActChunkAhead ? (i + u) & 1 : 0;
        if constexpr (kRing > 0) {
          if (ci < cm) {
            cp_async_wait<kRing - 2>();  // this lane's copies of chunk ci are in; the other lanes' after the sync
            __syncwarp();                // (which also orders every lane's reads of chunk ci - 1 before its reuse)
            ring_issue(ci + kRing - 1, (i + u + kRing - 1) % kRing);
            chunk_ring(st[s].wv[u], st[s].sv[u], (i + u) % kRing);
          }
        } else if (ci < cm) {
          chunk(st[s].wv[u], st[s].sv[u], P::kActInStage ? st[s].xs[u] : xv[b], b, ci, ci + 1 < cm);
        }
      }
    }
  }
  if constexpr (kRing > 0) cp_async_wait<0>();  // only empty groups are left
  if (cm < c1) {  // the chunk reaching past K (zero codes there; the activations past K must not be read)
    const int64_t off = static_cast<int64_t>(cm - c0) * kChunkStride;
    uint4 wv[kNW];
    uint32_t sv[kNW];
#pragma unroll
    for (int i = 0; i < kNW; ++i) {
      wv[i] = ld_stream(wp + off + 32 * i);
      sv[i] = sp[off + 32 * i];
    }
    const bool kin = cm * 64 + 16 * t < p.k;
#pragma unroll
    for (int j = 0; j < kNT; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) xv[0][j][h] = kin ? xq[j][8 * (cm - c0) + h] : make_uint4(0, 0, 0, 0);
    chunk(wv, sv, xv[0], 0, cm, false);
  }
}

// The tail split's last step for one tile group (GemmParams::split_parts; one warp, its block's sums of the
// group over K range `part` in acc): the sums go to the group's slot for that part, and the last part to arrive
// (a counter per group, the threadfence-reduction pattern) adds every part's slot in part order into acc, so the
// result does not depend on the order of arrival, resets the counter for the next call and returns true; the
// others return false.
template <int kNW, int kNT>
__device__ __forceinline__ bool finish_split(const GemmParams& p, int group, int part, float (&acc)[kNW][kNT][4]) {
  constexpr int kVals = kNW * kNT * 4;
  const int lane = threadIdx.x & 31;
  static_assert(split_slot_floats(kNW, kNT) == kVals * 32, "a slot holds every lane's accumulators");
  float* const slots = p.split_slots + static_cast<int64_t>(group) * p.split_parts * split_slot_floats(kNW, kNT) + lane;
  float* const a = &acc[0][0][0];  // acc[i][j][e] is a[(i·kNT + j)·4 + e]
#pragma unroll
  for (int v = 0; v < kVals; ++v) __stcg(slots + (part * kVals + v) * 32, a[v]);
  __threadfence();
  __syncwarp();
  unsigned arrived = 0;
  if (lane == 0) arrived = atomicAdd(p.split_count + group, 1u);
  arrived = __shfl_sync(0xFFFFFFFFu, arrived, 0);
  if (arrived + 1 != static_cast<unsigned>(p.split_parts)) return false;
  __threadfence();
#pragma unroll
  for (int v = 0; v < kVals; ++v) {
    float sum = __ldcg(slots + v * 32);
    for (int q = 1; q < p.split_parts; ++q) sum += __ldcg(slots + (q * kVals + v) * 32);
    a[v] = sum;
  }
  if (lane == 0) p.split_count[group] = 0;
  return true;
}

// Block: kWarps warps (8, or kWideWarps for the wide form); warp w handles kNW consecutive 16-row weight tiles
// (sharing the activation fragments) and one of p.wk K ranges; the wk partial sums of a tile group are added in a
// fixed order (deterministic). Grid: x = token tiles of 8·kNT (fastest, so blocks reading the same weights run
// together), y = tile groups. kEpi: the kernel that computes p.swiglu or p.residual's epilogue instead of storing y
// (has_epilogue_form); a template parameter rather than a branch, because the branch changed the register
// allocation of the kernels at their 80- and 128-register budgets (spills; 10240x8192 at M = 16 22.4 -> 25.6 µs,
// docs/PERF.md change 79).
template <typename T, int kMode, int kNT, int kNW, bool kLight, bool kQuant, int kWarps = 8, bool kEpi = false>
__global__ void __launch_bounds__(32 * kWarps, kWarps == 8 ? fused_blocks_per_sm(kNT, kNW, kLight) : 2)
    fused_gemm_kernel(const GemmParams p) {
  static_assert(kWarps == 8 || (kWarps == kWideWarps && has_wide_form(kNT, kNW, kLight)),
                "the wide form is the one-tile kernel's and the light 16-token kernel's");
  __shared__ float red[kWarps][kNW * kNT * 4][32];
  // kQuant: row_quant_smem_bytes; otherwise unused (p.dyn_smem caps occupancy)
  extern __shared__ __align__(16) uint2 row_smem[];
  constexpr bool kTable = pow2_table(kMode, kNT, kNW);  // one entry per scale byte, filled by threads 0-255
  __shared__ uint2 pow2_tab[kTable ? 256 : 1];
  // The table depends on the layer only. It is filled after each warp has requested its first weights (its fill
  // and barrier no longer delay them), before the wait for the previous kernel: 28672x4096 w4a4-vllm at M = 1
  // 29.5 -> 28.6-28.7 µs, M = 16 40.3-40.5 -> 39.5-39.6 (docs/PERF.md, change 78). The kernels that quantize the
  // row filled theirs first while they also filled a table of group factors (0.1-0.2 µs faster then); with those
  // made at load (GemmParams::x_factors), late is faster there too: w4a4-vllm at M = 1 6144x4096 9.5-9.6 -> 9.2-9.3,
  // 4096x4096 7.3 -> 6.9 (change 100).
  auto setup = [&] {
    if constexpr (kTable) {
      if (kWarps == 8 || threadIdx.x < 256) pow2_tab[threadIdx.x] = pow2_table_entry<T>(threadIdx.x, p.w_dec);
      __syncthreads();
    }
  };
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int wk = kWarps == 8 ? p.wk : kWarps, wn = warp / wk, kk = warp % wk;
  // A block of the tail split (GemmParams::split_parts) is part `part` of block row yb: chunks kr0 .. kr0 + kn - 1.
  int yb = blockIdx.y, part = -1;
  if (p.split_parts > 1 && yb >= p.split_from) {
    const int s = yb - p.split_from;
    part = s % p.split_parts;
    yb = p.split_from + s / p.split_parts;
  }
  const int kr0 = part < 0 ? 0 : part * p.kc / p.split_parts;
  const int kn = part < 0 ? p.kc : (part + 1) * p.kc / p.split_parts - kr0;  // chunks of the block's K range
  const int tile0 = (yb * (kWarps / wk) + wn) * kNW;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * 8 * kNT;
  const bool active = tile0 < p.n16;

  float acc[kNW][kNT][4];
#pragma unroll
  for (int i = 0; i < kNW; ++i)
#pragma unroll
    for (int j = 0; j < kNT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  // With a table, every warp runs accumulate (an empty K range where it has no tile) so that all reach setup's
  // barrier at the same point.
  if (active || kTable) {
    const int per = (kn + wk - 1) / wk;
    // 8 warps: ranges of ceil(kn / wk) chunks (the last shorter); the wide form: kk·kn / wk .. (kk + 1)·kn / wk,
    // at most per chunks each and none empty (kn >= kWideWarps), so the chunk past K is the last warp's alone
    // (a split layer has none: its K is a multiple of 64).
    const int c0 = !active ? 0 : kr0 + (kWarps == 8 ? kk * per : kk * kn / wk);
    const int c1 = !active ? 0 : kWarps == 8 ? min(kr0 + kn, c0 + per) : kr0 + (kk + 1) * kn / wk;
    // dynamic shared memory: the warp's K range of the row (kQuant) or its activation ring (act_ring_bytes)
    constexpr int kRing = act_ring_chunks(kNT, kNW, kMode);
    uint2* wsm = row_smem + (kRing > 0 ? warp * kRing * 256 : warp * per * 16);
    accumulate<T, kMode, kNT, kNW, kLight, kQuant, fma_shifts(kMode, kNT, kNW, kWarps)>(
        p, pow2_tab, wsm, tile0, m0, c0, c1, acc, setup);
  } else {
    pdl_wait();  // y is written below: not before the previous kernel is done with it
    pdl_launch_dependents();
  }

  auto acc_to_slot = [&] {  // this warp's sums into its slot of red
#pragma unroll
    for (int i = 0; i < kNW; ++i)
#pragma unroll
      for (int j = 0; j < kNT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) red[warp][(i * kNT + j) * 4 + e][lane] = acc[i][j][e];
  };
  if (wk > 1) {
    acc_to_slot();
    __syncthreads();
    if (kk == 0) {
      for (int w = 1; w < wk; ++w)
#pragma unroll
        for (int i = 0; i < kNW; ++i)
#pragma unroll
          for (int j = 0; j < kNT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] += red[warp + w][(i * kNT + j) * 4 + e][lane];
    }
  }
  if (kk != 0 || !active) return;
  // A part of a split block row: the last of its parts to arrive adds them all and stores.
  if (part >= 0 && !finish_split<kNW, kNT>(p, (static_cast<int>(blockIdx.x) * p.split_rows + yb - p.split_from) *
                                                  (kWarps / wk) + wn, part, acc))
    return;
  if constexpr (kEpi) {  // through the warp's own slot of red, which no other warp reads
    acc_to_slot();
    __syncwarp();
    return store_epilogue_tiles<T, kNT, kNW>(p, tile0, m0, red[warp]);
  }
  store_tiles<T, kNT, kNW>(p, tile0, m0, acc);
}

template <typename T, int kMode, int kNT, int kNW, bool kLight, bool kQuant, int kWarps, bool kEpi>
void launch_kernel(const GemmParams& p, cudaStream_t stream) {
  if constexpr (kWarps == 8) {
    NVFP4_CHECK(p.k % 64 == 0 || (p.wk - 1) * ceil_div(p.kc, p.wk) < p.kc,
                "fused kernel: a K split of " + std::to_string(p.kc) + " chunks (the last partial) over " +
                    std::to_string(p.wk) + " warps leaves a warp without chunks");
  } else {
    NVFP4_CHECK(p.wk == kWarps && p.kc >= kWarps, "fused kernel: the wide form splits K over its " +
                                                      std::to_string(kWarps) + " warps, got a split of " +
                                                      std::to_string(p.wk) + " over " + std::to_string(p.kc) +
                                                      " chunks");
  }
  const int groups_per_block = kWarps / p.wk;
  const int64_t rows = ceil_div(ceil_div(p.n16, kNW), groups_per_block);
  NVFP4_CHECK(p.split_parts == 1 || (p.split_slots && p.split_count && p.k % 64 == 0 && p.split_from >= 0 &&
                                     p.split_rows == rows - p.split_from && p.split_rows > 0 &&
                                     p.kc / p.split_parts >= 2 * (kWarps == 8 ? p.wk : kWarps)),
              "fused kernel: a tail split needs its workspace, K a multiple of 64, the last block rows of the grid "
              "and >= 2 chunks per warp in each part");
  dim3 grid(static_cast<unsigned>(ceil_div(p.m, 8 * kNT)),
            static_cast<unsigned>(p.split_parts == 1 ? rows : p.split_from + p.split_rows * p.split_parts));
  constexpr auto kernel = fused_gemm_kernel<T, kMode, kNT, kNW, kLight, kQuant, kWarps, kEpi>;
  if (p.dyn_smem > 0) raise_dynamic_smem_limit<kernel>(p.dyn_smem);
  launch_maybe_programmatic(p.programmatic, kernel, grid, dim3(32 * kWarps), static_cast<size_t>(p.dyn_smem), stream,
                            p);
}

// A variant in blocks of 8 warps, or in its wide form (p.wk = kWideWarps) where it has one (has_wide_form).
template <typename T, int kMode, int kNT, int kNW, bool kLight, bool kQuant, bool kEpi>
void launch_blocks(const GemmParams& p, cudaStream_t stream) {
  if constexpr (has_wide_form(kNT, kNW, kLight)) {
    if (p.wk == kWideWarps) return launch_kernel<T, kMode, kNT, kNW, kLight, kQuant, kWideWarps, kEpi>(p, stream);
  }
  launch_kernel<T, kMode, kNT, kNW, kLight, kQuant, 8, kEpi>(p, stream);
}
// ... in its epilogue form where p asks for an epilogue (launch_fused_gemm checked that the variant has one).
template <typename T, int kMode, int kNT, int kNW, bool kLight, bool kQuant>
void launch_variant(const GemmParams& p, cudaStream_t stream) {
  if constexpr (has_epilogue_form(kNT, kMode)) {
    if (p.custom_epilogue()) return launch_blocks<T, kMode, kNT, kNW, kLight, kQuant, true>(p, stream);
  }
  launch_blocks<T, kMode, kNT, kNW, kLight, kQuant, false>(p, stream);
}

template <typename T, int kMode, int kNT, bool kQuant = false>
void launch_nt(const GemmParams& p, int nw, bool light, cudaStream_t stream) {
  switch (nw) {
    case 1:
      if constexpr (kNT == 2) {
        if (light) return launch_variant<T, kMode, kNT, 1, true, kQuant>(p, stream);
      }
      return launch_variant<T, kMode, kNT, 1, false, kQuant>(p, stream);
    case 2:
      if constexpr (kNT == 1) {
        if (light) return launch_variant<T, kMode, kNT, 2, true, kQuant>(p, stream);
      }
      return launch_variant<T, kMode, kNT, 2, false, kQuant>(p, stream);
    default:
      if constexpr (kNT < 4) launch_variant<T, kMode, kNT, 4, false, kQuant>(p, stream);
      break;
  }
}

template <typename T, int kMode>
void launch_mode(const GemmParams& p, int nt, int nw, bool light, cudaStream_t stream) {
  switch (nt) {
    case 1:
      if (p.x_gs > 0.0f)
        launch_nt<T, kMode, 1, true>(p, nw, light, stream);
      else
        launch_nt<T, kMode, 1>(p, nw, light, stream);
      break;
    case 2:
      launch_nt<T, kMode, 2>(p, nw, light, stream);
      break;
    default:
      launch_nt<T, kMode, 4>(p, std::min(nw, 2), false, stream);
      break;
  }
}

template <typename T>
void launch_t(const GemmParams& p, Mode mode, int nt, int nw, bool light, cudaStream_t stream) {
  if (mode == Mode::Exact)
    launch_mode<T, 0>(p, nt, nw, light, stream);
  else if (mode == Mode::Vllm)
    launch_mode<T, 1>(p, nt, nw, light, stream);
  else
    launch_mode<T, 2>(p, nt, nw, light, stream);
}

// Fragment blocks (one tile's 16 rows x one chunk's 64 K) dequantized as the decode kernel's MMA operands
// (dequant_step: exact modes e2m1·S·2^-c, the caller's GEMM factor carrying 2^c; vLLM T(e2m1·f32(S·D_w)),
// times 2^τ in the power-of-two form),
// kDeqBlocks per warp: the lane's rows g and g+8 (K 16t .. 16t+15) go through shared memory, and the warp
// writes each block's 16 rows as whole 128-byte segments (4 rows per store).
constexpr int kDeqBlocks = 2;
template <typename T, int kMode>
__global__ void __launch_bounds__(256) dequant_weight_kernel(const GemmParams p, int n0, int rows,
                                                             T* __restrict__ out) {
  __shared__ uint4 stage[8][16][9];  // [warp][row][16-byte piece]; 144-byte rows: no bank conflicts either way
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int blocks = rows / 16 * p.kc;  // < 2^31: launch_dequant_weight
  const int b0 = (static_cast<int>(blockIdx.x) * 8 + warp) * kDeqBlocks;
  uint4 wv[kDeqBlocks];
  uint32_t sv[kDeqBlocks][1];
#pragma unroll
  for (int u = 0; u < kDeqBlocks; ++u) {
    if (b0 + u >= blocks) break;
    const int64_t at = fragment_block(n0 / 16 + (b0 + u) / p.kc, (b0 + u) % p.kc, p.kc) * 32 + lane;
    wv[u] = ld_stream(p.wq + at);
    sv[u][0] = p.ws[at];
  }
#pragma unroll
  for (int u = 0; u < kDeqBlocks; ++u) {
    if (b0 + u >= blocks) break;
    uint32_t ws2[1][2], wsx[1][2];
    scale_regs<T, kMode, 1>(sv[u], p.w_dec, ws2, wsx);
    uint32_t r[2][8];  // rows g, g+8: K 16t .. 16t+15 in pairs
    const uint32_t q[4] = {wv[u].x, wv[u].y, wv[u].z, wv[u].w};
#pragma unroll
    for (int st = 0; st < 4; ++st) {
      uint32_t a[4];
      dequant_step<T, kMode>(q[st], ws2[0], wsx[0], a);  // a[p]: p = 0/2 row g, 1/3 row g+8; K 4s+0/1, 4s+2/3
      r[0][2 * st] = a[0];
      r[0][2 * st + 1] = a[2];
      r[1][2 * st] = a[1];
      r[1][2 * st + 1] = a[3];
    }
    __syncwarp();  // the previous block's rows have been read
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      stage[warp][g + 8 * h][2 * t] = make_uint4(r[h][0], r[h][1], r[h][2], r[h][3]);
      stage[warp][g + 8 * h][2 * t + 1] = make_uint4(r[h][4], r[h][5], r[h][6], r[h][7]);
    }
    __syncwarp();
    const int64_t nt = n0 / 16 + (b0 + u) / p.kc;
    const int c = (b0 + u) % p.kc;
    const int piece = lane & 7, k = c * 64 + 8 * piece;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = 4 * i + (lane >> 3);
      const int64_t n = nt * 16 + row;
      if (n < p.n && k < p.k)
        *reinterpret_cast<uint4*>(out + (n - n0) * p.k + k) = stage[warp][row][piece];
    }
  }
}

template <typename T>
__global__ void add_bias_kernel(T* __restrict__ y, const float* __restrict__ bias, int64_t m, int n) {
  using A = Act<T>;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= m * n) return;
  y[idx] = A::one(__fadd_rn(A::back(y[idx]), bias[idx % n]));
}

}  // namespace

void launch_fused_gemm(const GemmParams& p, DType act, Mode mode, int nt, int nw, bool light, cudaStream_t stream) {
  NVFP4_CHECK(p.x_gs == 0.0f ||
                  (nt == 1 && p.m == 1 && p.x_factors && p.dyn_smem >= row_quant_smem_bytes(p.kc, p.wk)),
              "fused kernel: quantizing the activations in the kernel needs M = 1, one token tile, the group factor "
              "table and " + std::to_string(row_quant_smem_bytes(p.kc, p.wk)) + " bytes of shared memory");
  const int ring_bytes = act_ring_bytes(nt, nw, static_cast<int>(mode), p.wk);
  NVFP4_CHECK(p.dyn_smem >= ring_bytes,
              "fused kernel: this kernel needs " + std::to_string(ring_bytes) +
                  " bytes of shared memory for its warps' activation rings, got " + std::to_string(p.dyn_smem));
  NVFP4_CHECK(ring_bytes == 0 || p.m * p.k < (int64_t{1} << 31),
              "fused kernel: the activation ring's 32-bit source offsets need M·K < 2^31, got M = " +
                  std::to_string(p.m) + ", K = " + std::to_string(p.k));
  NVFP4_CHECK(!p.swiglu || p.n % 16 == 0, "fused kernel: the SwiGLU epilogue needs gate and up rows interleaved in "
                                           "blocks of 8 (N a multiple of 16), got N = " + std::to_string(p.n));
  NVFP4_CHECK(!(p.swiglu && p.residual), "fused kernel: one epilogue at a time (SwiGLU or the residual)");
  NVFP4_CHECK(!p.custom_epilogue() || has_epilogue_form(nt, static_cast<int>(mode)),
              "fused kernel: the SwiGLU and residual epilogues exist for one token tile (M <= 8) and the exact and "
              "power-of-two weight modes only");
  NVFP4_CHECK(p.wk != kWideWarps || has_wide_form(nt, nw, light),
              "fused kernel: the wide form (K split over " + std::to_string(kWideWarps) +
                  " warps) exists only for one weight tile per warp with one token tile, or two on the light kernel");
  if (act == DType::BF16)
    launch_t<__nv_bfloat16>(p, mode, nt, nw, light, stream);
  else
    launch_t<__half>(p, mode, nt, nw, light, stream);
  NVFP4_CUDA_CHECK(cudaGetLastError());
}

namespace {
template <typename T>
void launch_dequant_typed(const GemmParams& p, Mode mode, int n0, int rows, void* out, unsigned blocks,
                          cudaStream_t stream) {
  T* o = static_cast<T*>(out);
  if (mode == Mode::Exact)
    dequant_weight_kernel<T, 0><<<blocks, 256, 0, stream>>>(p, n0, rows, o);
  else if (mode == Mode::Vllm)
    dequant_weight_kernel<T, 1><<<blocks, 256, 0, stream>>>(p, n0, rows, o);
  else
    dequant_weight_kernel<T, 2><<<blocks, 256, 0, stream>>>(p, n0, rows, o);
}
}  // namespace

void launch_dequant_weight(const GemmParams& p, DType act, Mode mode, int n0, int rows, void* out,
                           cudaStream_t stream) {
  const int64_t frags = static_cast<int64_t>(rows / 16) * p.kc;
  NVFP4_CHECK(frags < (1ll << 31) - 16 * kDeqBlocks, "dequantize weight: a tile of " + std::to_string(rows) +
                                                         " rows x K " + std::to_string(p.k) + " is too large");
  const unsigned blocks = static_cast<unsigned>(ceil_div(ceil_div(frags, kDeqBlocks), 8));
  if (act == DType::BF16)
    launch_dequant_typed<__nv_bfloat16>(p, mode, n0, rows, out, blocks, stream);
  else
    launch_dequant_typed<__half>(p, mode, n0, rows, out, blocks, stream);
  NVFP4_CUDA_CHECK(cudaGetLastError());
}

void launch_add_bias(void* y, const float* bias, int64_t m, int n, DType act, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>(ceil_div(m * n, 256));
  if (act == DType::BF16)
    add_bias_kernel<__nv_bfloat16><<<blocks, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(y), bias, m, n);
  else
    add_bias_kernel<__half><<<blocks, 256, 0, stream>>>(static_cast<__half*>(y), bias, m, n);
  NVFP4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace nvfp4::cuda::detail
