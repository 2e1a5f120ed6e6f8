// Device side of the CUDA GEMM paths. Host code (cuda_linear.cu) fills GemmParams and calls the launchers.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/dequant_bits.h"
#include "common/dtype.h"

namespace nvfp4::cuda::detail {

struct GemmParams {
  const uint4* wq = nullptr;        // FragmentWeights::codes on device
  const uint16_t* ws = nullptr;     // FragmentWeights::scales on device (2 bytes per lane and chunk)
  const void* x = nullptr;          // (m, K) T
  void* y = nullptr;                // (m, N) T
  const float* bias = nullptr;      // (N,) values of T, or null
  int64_t m = 0;
  int n = 0, k = 0;                 // logical N, K (K % 16 == 0)
  int n16 = 0, kc = 0;              // tiles of 16 rows, chunks of 64 K
  float out_scale = 1.0f;           // f32 factor applied to the accumulator before rounding to T
  float w_dec = 1.0f;               // vLLM flavour: D_w (Mode::VllmPow2: D_w·2^σ)
  int wk = 8;                       // warps of a block splitting K (1, 2, 4, 8); 8 / wk weight tiles per block;
                                    // kWideWarps: the decode kernel's wide form (decode_block_warps)
  bool programmatic = false;        // programmatic launch after the previous kernel in the stream (sm_90+)
  int dyn_smem = 0;                 // decode kernel: dynamic shared memory per block (unused; > 0 caps the
                                    // blocks resident per SM)
  int splits = 1;                   // wgmma kernel: blocks splitting K of each split row block
  int wgmma_rows = 256;             // wgmma kernel: weight rows per block (256; 192 or 128: 4/3 or twice the blocks)
  int split_rb0 = 0;                // wgmma kernel: first split row block (of wgmma_rows); those before it whole
  int split_parts = 1;              // decode kernel, tail split (> 1): block rows split_from .. split_from +
  int split_from = 0;               // split_rows - 1 (the grid's last) each run as split_parts blocks over
  int split_rows = 0;               // consecutive K ranges; their sums meet in split_slots (a slot of
  float* split_slots = nullptr;     // kNW·kNT·4·32 f32 per tile group and part, groups numbered token tile
  unsigned* split_count = nullptr;  // first) and the last part to arrive adds them (split_count: one counter per
                                    // such group, 0 between calls)
  float* partial = nullptr;         // (splits, m, N - wgmma_rows·split_rb0) f32 when splits > 1
  bool wgmma_raw_x = false;         // wgmma kernel, blocks of 128 rows and 64 tokens (wgmma_raw_x_fits): x is the
                                    // row-major (m, K) input, which a warpgroup of the kernel permutes itself
  float x_gs = 0.0f;                // > 0 (decode kernel, m = 1, one token tile, W4A4): x is the raw row, which
                                    // each warp quantizes and dequantizes itself over its own K range (global
                                    // scale x_gs, the weight mode's flavour) into shared memory,
  const float2* x_factors = nullptr;  // with the group factors of this table (launch_group_factor_table for x_gs
                                      // and the flavour; kGroupFactors entries, device memory)
  bool swiglu = false;              // decode kernel (has_epilogue_form): rows of gate and up interleaved in
                                    // blocks of 8 (interleave_linear_outputs; N % 16 == 0); y is (m, N/2) T of
                                    // swiglu_value(gate, up) per feature instead of (m, N)
  float* residual = nullptr;        // decode kernel (has_epilogue_form): instead of y, this (m, N) f32 buffer
                                    // of T values becomes T(residual + y) (Epilogue::AddToResidual)
  // Whether the kernel computes one of those epilogues instead of storing y.
  bool custom_epilogue() const { return swiglu || residual != nullptr; }
};

// Warps per block of the decode kernel's wide form: one weight tile per block, K split over all of them, for
// grids of one-tile blocks that fill at most 2 blocks per SM (more warps in flight per SM than 2 blocks of 8).
// A K split over kWideWarps warps is that form; every other split runs in blocks of 8 warps.
constexpr int kWideWarps = 12;
constexpr int decode_block_warps(int wk) { return wk == kWideWarps ? kWideWarps : 8; }
// f32 values in one tail-split slot (GemmParams::split_slots: one per tile group and part): the accumulators of nw
// weight tiles times nt token tiles, 4 per lane.
constexpr int split_slot_floats(int nw, int nt) { return nw * nt * 4 * 32; }
// The decode kernel variants that have a wide form: one weight tile per warp, with one token tile on the one-tile
// kernel, or two on the light 16-token kernel (both 80 registers: 2 blocks of 12 warps per SM).
constexpr bool has_wide_form(int nt, int nw, bool light) {
  return nw == 1 && (nt == 1 ? !light : nt == 2 && light);
}

// The decode kernel variants that also come in a form computing GemmParams::swiglu's or ::residual's epilogue: one
// token tile (M <= 8: the decoder's one-token steps), the exact and power-of-two weight modes (the vLLM flavour's
// per-weight rounding, a fallback, has none).
constexpr bool has_epilogue_form(int nt, int mode) { return nt == 1 && mode != static_cast<int>(Mode::Vllm); }

// Shared memory of the decode kernel's own quantization (GemmParams::x_gs): each of a block's warps holds its K
// range of at most ceil(kc / wk) chunks of 64 dequantized T values.
constexpr int64_t row_quant_smem_bytes(int64_t kc, int wk) {
  return decode_block_warps(wk) * ((kc + wk - 1) / wk) * 64 * 2;
}

// Chunks of activations in each warp's shared-memory ring in the decode kernel of 16-token tiles and four weight
// tiles per warp in the vLLM flavour's modes (filled one chunk ahead of its use), and the dynamic shared memory those
// rings take per block (2 KB per chunk: 16 token rows of 64 T values). Every other kernel loads its activations from
// global memory into registers: a ring made them slower (docs/PERF.md, change 81), and these faster.
constexpr int act_ring_chunks(int nt, int nw, int mode) {
  return nt == 2 && nw == 4 && mode != static_cast<int>(Mode::Exact) ? 2 : 0;
}
constexpr int act_ring_bytes(int nt, int nw, int mode, int wk) {
  return decode_block_warps(wk) * act_ring_chunks(nt, nw, mode) * 2048;
}

// Blocks of 8 warps per SM the fused kernel for token tiles of 8·nt and nw weight tiles per warp is
// compiled to fit (its register budget: 80 registers for one weight tile per warp with one token tile, or for
// the light variants, 128 otherwise); the host's grid rules count block slots with it. light: the variants with
// shorter register stages that fit 3 blocks per SM (16 tokens and one tile per warp, 8 tokens and two; for grids
// that the 2-block kernel runs in more than one wave).
constexpr int fused_blocks_per_sm(int nt, int nw, bool light = false) {
  return (nt == 1 && nw == 1) || light ? 3 : 2;
}

// Fused mixed-input GEMM, tokens in tiles of 8·nt (nt = 1, 2 or 4), nw = 1, 2 or 4 weight tiles per warp
// (nt = 4 uses at most 2); light: fused_blocks_per_sm's light variant (nt = 2 with nw = 1, nt = 1 with nw = 2).
// p.wk = kWideWarps (has_wide_form, kc >= kWideWarps): the wide form, blocks of 12 warps on one tile each, the K
// chunks spread over them as evenly as they divide (2 blocks per SM).
void launch_fused_gemm(const GemmParams& p, DType act, Mode mode, int nt, int nw, bool light, cudaStream_t stream);

// Hopper GEMM for M > 32, or > 16 on large layers (gemm_wgmma.cu, sm_90a; where wgmma_available: the device is sm_90
// and runs this binary's sm_90a code, asked once per device): blocks of p.wgmma_rows (256, 192 or 128) weight rows x
// tile_tokens (64 or 128) tokens; a producer warpgroup streams each K chunk's codes, scales and activation tile into a
// shared-memory ring with bulk copies, two to four consumer warpgroups dequantize (as the decode kernel) and multiply
// with wgmma, the dequantized weights as the register A operand. p.x: the activations as launch_permute_activations
// writes them (wgmma_x_bytes(m, kc, tile_tokens) bytes: permuted into the MMA column order, in token tiles, zero past M
// and K), or with p.wgmma_raw_x the row-major (m, K) input itself. Row blocks from p.split_rb0 on are split over
// p.splits blocks along K (p.partial holds their f32 sums of columns wgmma_rows·split_rb0 .. N - 1 and a second
// kernel adds them in order); 0: all of them; p.splits = 1: none.
bool wgmma_available(int device);
// Whether a K split from row block split_rb0 (blocks of `rows` weight rows) starts inside a layer of n rows
// (splits == 1: no split, always): the one rule the host's forcing, its per-call choice and the launcher check.
inline bool wgmma_split_inside(int splits, int split_rb0, int rows, int64_t n) {
  return splits == 1 || (split_rb0 >= 0 && static_cast<int64_t>(split_rb0) * rows < n);
}
// Block rows of a wgmma launch over row_blocks blocks of weight rows: those before split_rb0 once, each later one
// once per K range (splits of them); splits == 1: row_blocks. The launcher's grid and the host's grid estimates.
inline int64_t wgmma_grid_rows(int64_t row_blocks, int splits, int split_rb0) {
  return splits > 1 ? split_rb0 + (row_blocks - split_rb0) * splits : row_blocks;
}
inline int64_t wgmma_x_bytes(int64_t m, int kc, int tile_tokens) {
  return (m + tile_tokens - 1) / tile_tokens * tile_tokens * kc * 128;
}
// x_gs > 0 (W4A4): the activations quantized and dequantized on the way (global scale x_gs, the group factors of
// x_factors: launch_group_factor_table's), bit-identical to permuting launch_quantize_dequant's output.
void launch_permute_activations(const void* x, DType act, int64_t m, int k, int kc, int tile_tokens, float x_gs,
                                const float2* x_factors, void* out, bool programmatic, cudaStream_t stream);
// Whether the wgmma kernel has the form that permutes row-major activations itself (a warpgroup that loads each
// chunk's tile and stores it permuted into the stage): blocks of 128 rows with 64-token tiles.
constexpr bool wgmma_raw_x_fits(int rows, int tile_tokens) { return rows == 128 && tile_tokens == 64; }
// consumers: 2 consumer warpgroups of two row blocks each, or 4 of one (more warps dequantizing at once); blocks
// of 192 rows: 3 of one; of 128 rows: 2 of one (wgmma_consumers_fit).
constexpr bool wgmma_consumers_fit(int rows, int consumers) {
  return rows == 256 ? consumers == 2 || consumers == 4 : (rows == 192 || rows == 128) && consumers == rows / 64;
}
void launch_wgmma_gemm(const GemmParams& p, DType act, Mode mode, int tile_tokens, int consumers,
                       cudaStream_t stream);

// Large-M helpers. Dequantize rows [n0, n0+rows) of the prepared weight to T, (rows, K) row-major (rows
// past N not written):
//   exact modes: e2m1·S·2^-c (c of dequant_bits.h's product_unshift: the decode kernel's exact operands);
//   vLLM: T(e2m1 · f32(S·w_dec)) (Mode::VllmPow2: times 2^τ).
void launch_dequant_weight(const GemmParams& p, DType act, Mode mode, int n0, int rows, void* out,
                           cudaStream_t stream);
// y (m, N) T: y = T(y + bias) in place.
void launch_add_bias(void* y, const float* bias, int64_t m, int n, DType act, cudaStream_t stream);

}  // namespace nvfp4::cuda::detail
