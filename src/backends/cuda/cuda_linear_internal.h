// Internals of the CUDA executor that the benchmark and tests use; not part of interface (b).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "backends/cuda/cuda_linear.h"
#include "backends/cuda/device/capability.h"
#include "backends/cuda/dequant_bits.h"
#include "backends/cuda/weight_layout.h"

namespace nvfp4::cuda {

// create() from an already prepared weight (w supplies shape, scalars and bias; its codes are not read).
std::unique_ptr<CudaLinear> create_prepared(const LinearWeights& w, const FragmentWeights& f, Semantics s,
                                            DType act, int device);

// Path selection override: M <= fused_max_m runs the fused kernel, larger M the dequantize + cuBLAS path.
// A negative value restores the default crossover.
void set_fused_max_m(CudaLinear& l, int64_t fused_max_m);

// Rows per dequantized weight tile of the large-M path (a multiple of 16; 0 restores the default, 64 MB per
// tile).
void set_weight_tile_rows(CudaLinear& l, int rows);

// Grid rule of the fused kernel (weight tiles per warp, K split): -1 default, 0 the earlier rule (tiles per
// warp halved until >= 2 blocks per SM), 1 (M <= 16) tiles per warp kept while the largest K split fills >= 90%
// of one wave, 2 (M <= 16) as 1 counting each kernel's own blocks per SM, always the largest K split;
// 3: as 2, and from default_wgmma_from's M (33; 17 or 65 on some layers) on the Hopper
// wgmma kernel where the device runs it (rules 0-2, and other devices, run the decode kernel with 32-token tiles
// there); 4, 5: as 3 with blocks of 256 rows and 4 or 2 consumer warpgroups
// in the wgmma kernel;
// 6: as 3 with half the weight tiles per warp at M <= 16; 7: as 3, and grids of 2 tiles per warp
// that end in a short second wave run the light two-tile kernel at M <= 8 (all but the vLLM flavour's per-weight
// rounding) and 1 tile per warp at M = 9-16, and grids of 1-2 waves (of the 2-block kernel with 2 or 4 tiles per
// warp, or of the light 16-token kernel in the exact-weight modes) split K half as much where that fills one
// wave; 8: as 7 with the light kernels wherever they exist at M <= 16; 9: as 7 with the wgmma kernel's blocks of
// 128 rows wherever it runs; 10: as 7 with the decode kernel's wide form (decode_grid) at M <= 8 where it
// applies; 11: as 10, and the wide form of the light 16-token kernel at M = 9-16; 12: as 11 with the wgmma kernel's
// blocks of 192 rows wherever it runs; 13: as 11 with the decode kernel's tail split (decode_grid); 14: as 13, and
// a decode grid of more than two waves (M <= 16) takes the smaller K split (a power of two) at which its blocks make
// one wave of >= 80% of the slots, where there is one (docs/PERF.md); 15: as 14 where rule 13's warps have at most
// kLongBlockMaxWarpChunks chunks each, else as 13. The default: 14 or 15 by default_grid_rule.
void set_fused_grid_rule(CudaLinear& l, int rule);
// W4A4: the GEMM quantizes the activations itself (true, the default) where it can, the decode kernel at M = 1
// where row_quant_pays and the wgmma kernel's activation permutation always, or a quantizer kernel runs before it
// as at the other decode sizes (false; measurements, tests).
void set_own_quant(CudaLinear& l, bool on);
// Whether a call of m rows quantizes its activations in the GEMM (W4A4 on the fused path, set_own_quant on; M = 1:
// row_quant_pays; else on the wgmma kernel).
bool own_quant_active(const CudaLinear& l, int64_t m);
// The parts a decode call of m rows splits its tail block rows into (decode_grid's tail split, where the stream's
// workspace holds its slots); 1: none.
int tail_split_parts(const CudaLinear& l, int64_t m);
// The decode kernel's grid below default_wgmma_from's M on Hopper (any M under rules 0-2 and elsewhere) under
// a grid rule >= 0 (host rule, no device needed; mode: how the layer's weights are dequantized; partial_chunk: K % 64
// != 0): token tiles of 8·nt, nw weight tiles per warp, K split over wk warps of a block; light: the kernel variant
// that fits 3 blocks per SM with shorter register stages (16 tokens and one tile per warp, rule 3 on, where the 2-block
// one would need more than one wave; 8 tokens and two tiles, rule 7 on); blocks launched and block slots of the GPU
// (blocks per SM the kernel is compiled for x sms). wk = kWideWarps is the wide form (rules 10 and 11: one tile per
// warp, one token tile, or two on the light kernel under rule 11, at most 2 x sms tiles, >= 2 chunks per warp of 12:
// one tile per block of 12 warps splitting K, 2 blocks per SM). Rule 13, the tail split: a grid of one token tile row
// in one wave whose block rows leave r < sms/2 SMs one block more than the others (q·sms + r rows, q < blocks per SM)
// runs its last r rows as split_parts = min(4, sms / r) >= 2 blocks each over consecutive K ranges (>= 4 chunks per
// warp, K a multiple of 64), so that the r SMs' extra block becomes r·parts shorter ones spread over as many SMs
// (split_parts, split_rows; blocks counts the parts; GemmParams::split_parts).
struct DecodeGrid {
  int nt = 1, nw = 1, wk = 1;
  bool light = false;
  int64_t blocks = 0, slots = 0;
  int split_parts = 1;
  int64_t split_rows = 0;
};
DecodeGrid decode_grid(int64_t m, int64_t n16, int64_t kc, int sms, int rule,
                       detail::Mode mode = detail::Mode::Exact, bool partial_chunk = true);
// Whether the decode kernel of grid g (M = 1) quantizes the W4A4 activation row itself rather than behind a
// quantizer kernel (host rule): one token tile, the 8 warps' K ranges in at most 32 KB of shared memory, and at
// most 12288 values quantized per SM over all blocks (each block quantizes the whole row; measured crossover).
bool row_quant_pays(const DecodeGrid& g, int64_t kc, int sms);

// The grid rule a device runs by default (set_fused_grid_rule's numbering), from its memory bandwidth per SM
// (bytes/s: the memory clock's two transfers per cycle times the bus width, over the SMs; 0 when unknown): rule 14
// below kLongBlockMaxBandwidthPerSm, rule 15 at and above it. Rule 14's one wave of longer blocks was 7-17% faster on
// an H100 SXM (3.35 TB/s over 132 SMs: 25 GB/s per SM) on every layer it changes (docs/PERF.md, change 107). On an
// H200 (4.8 TB/s: 36 GB/s per SM) it was 5-18% faster where rule 13's warps have 8 chunks (57344x4096 at M = 1 40.5
// -> 38.3 µs, 128256x4096 85.7 -> 74.4) and 1.7-3.2% slower where they have 16 (57344x8192 at M = 1 71.2-71.7 ->
// 72.4-73.5), so rule 15 takes it only on the former (change 136). The bound lies between the two cards.
inline constexpr double kLongBlockMaxBandwidthPerSm = 30e9;
// Rule 15: the most chunks per warp of rule 13's grid at which a grid of more than two waves runs as one wave of
// longer blocks (see above: 8 measured faster on an H200, 16 slower at M = 1).
inline constexpr int64_t kLongBlockMaxWarpChunks = 8;
int default_grid_rule(double bytes_per_s_per_sm);

// Measurements: the decode kernel's grid forced for every call that runs it: nw weight tiles per warp (1, 2 or 4;
// at most 2 for 32-token tiles), K split over wk warps of a block (1, 2, 4, 8, or kWideWarps: the wide form), the
// light variant, and every block row split into `parts` blocks over consecutive K ranges (the tail split's
// finishing step, on all rows); nw = 0: the grid rule's. A call whose token tiles have no such kernel, or whose
// split the workspace or K cannot take, is refused with a one-line error.
struct ForcedDecodeGrid {
  int nw = 0, wk = 8;
  bool light = false;
  int parts = 1;
};
void set_forced_decode_grid(CudaLinear& l, const ForcedDecodeGrid& g);
// forced's grid for m rows (host rule, no device needed; throws where no kernel or split fits, as above).
DecodeGrid forced_decode_grid(int64_t m, int64_t n16, int64_t kc, int sms, const ForcedDecodeGrid& f,
                              bool partial_chunk);
// The decode grid of an m-row call, as "nt2 nw1 wk4 light split2x56" (token tiles, tiles per warp, K split, the
// light variant, parts x split block rows); "-" where m does not run the decode kernel.
std::string decode_grid_name(const CudaLinear& l, int64_t m);

// Default crossover (largest M on the fused kernel) for a layer of this shape and semantics, on a device
// that runs the wgmma kernel (from default_wgmma_from's M) or not.
int64_t default_fused_max_m(Semantics s, int64_t n, int64_t k, bool wgmma);
// Above that crossover, the largest M at which the wgmma kernel still runs where its grid fills its rounds
// (wgmma_round_fill >= kFullRoundFill); 0: none. Small layers, exact semantics: 1024 (docs/PERF.md, change 73).
int64_t default_full_round_max_m(Semantics s, int64_t n, int64_t k, bool wgmma);
inline constexpr double kFullRoundFill = 0.95;
// How fully the wgmma kernel's grid (wgmma_grid's) uses the SMs: the time of its work spread evenly over them
// (its blocks' chunks at the chunk time of a round of its rows) over wgmma_time_us's estimate for that grid; 1
// for whole rounds.
double wgmma_round_fill(int64_t m, int64_t n, int64_t n16, int64_t kc, int sms);
// Whether M runs the fused kernels rather than the dequantize + cuBLAS path: M <= fused_max_m, or M <=
// full_round_max_m where the wgmma grid fills its rounds (host rule, no device needed).
bool fused_kernel_at(int64_t m, int64_t fused_max_m, int64_t full_round_max_m, int64_t n, int64_t n16, int64_t kc,
                     int sms);
// w4a4-vllm: whether the kernels use the power-of-two form of the weights (vllm_weights.h) or round each weight.
bool vllm_weights_pow2(const CudaLinear& l);
// The layer's current crossover, and whether a call of M rows runs the fused kernels (fused_kernel_at with the
// layer's crossovers: set_fused_max_m's, or the defaults).
int64_t fused_max_m(const CudaLinear& l);
bool uses_fused_kernel(const CudaLinear& l, int64_t m);
// The wgmma kernel's grid (host rules, no device needed): token tile (64 for M <= 64, else 128), blocks of 256, 192
// or 128 weight rows (one per SM) and K split. A split covers the row blocks from split_rb0 on (0: all; those
// before it run whole), each over `splits` blocks of one K range. Estimated µs: the finish time of the blocks, each
// started in launch order on the first free SM, in chunks, x the measured time of one chunk of a round (0.55 /
// 0.74 µs for 64 / 128 tokens, H200; wgmma_rows_factor of that for blocks of 192 and 128 rows), plus, when split,
// the split columns' f32
// partial sums written and read
// (8·splits·M·cols bytes) and y written, at 5 TB/s where the partial sums take at most kWgmmaL2PartialBytes
// (they stay in L2) and 3 TB/s above, and the reduction's launch (2 µs). wgmma_split: the split
// (1-8, each >= 8 chunks of 64 when > 1; over as many trailing row blocks as the last partial round holds, then over
// all blocks) with the smallest estimate, a split only where it saves >= 5% over the best so far (in that order);
// with own_permutation, the estimates compared are wgmma_call_us's.
inline constexpr double kWgmmaL2PartialBytes = 32.0 * (1 << 20);
struct WgmmaSplit {
  int splits = 1;
  int split_rb0 = 0;
};
int wgmma_tile_tokens(int64_t m);
// Consumer warpgroups of the wgmma kernel for grid rule `rule` and blocks of `rows`: 128 rows 2 and 192 rows 3 (one
// row block each); 256 rows: rule 3 (the default) 4 at M <= 128, else 2; 4 and 5 force 4 and 2 (measurements and
// tests).
int wgmma_consumers(int64_t m, int rule, int rows = 256);
double wgmma_time_us(int64_t m, int64_t n, int64_t n16, int64_t kc, int sms, WgmmaSplit split, int rows = 256);
// What the permutation kernel adds in front of the wgmma kernel at M <= 64, in a CUDA graph: the same grid ran
// 1.1 µs faster on 6144x4096 at M = 33 and 64 with the kernel's own permutation (H100, docs/PERF.md, change 122),
// 1.3-1.8 µs on the 4096-row layers at M = 64 (change 120); the middle of that range (change 123: at 1.2 the
// credit left 6144x4096 at M = 44-56 on 192-row blocks, measured 0.1-0.8 µs slower than the 128-row grid).
inline constexpr double kWgmmaPermuteUs = 1.5;
// Blocks of at most this many chunks of 64 get that credit: grids chosen by it measured faster with blocks of 19-56
// chunks (4096x14336 at M = 44-56: 56) and slower with 64-74 (8192x8192 at M = 17-40, 5120x13824, 3584x18944;
// H100, docs/PERF.md, change 123).
inline constexpr int64_t kWgmmaOwnPermuteMaxChunks = 56;
// wgmma_time_us less kWgmmaPermuteUs where the call may permute its activations in the wgmma kernel
// (own_permutation: W4A16), the grid has that form (wgmma_raw_x_pays) and its longest block has at most
// kWgmmaOwnPermuteMaxChunks chunks: what wgmma_split and wgmma_grid compare.
double wgmma_call_us(int64_t m, int64_t n, int64_t n16, int64_t kc, int sms, WgmmaSplit split, int rows,
                     bool own_permutation);
WgmmaSplit wgmma_split(int64_t m, int64_t n, int64_t n16, int64_t kc, int sms, int rows = 256,
                       bool own_permutation = false);
// The chunk time of a round of blocks of `rows` rows over that of 256-row blocks (measured; wgmma_chunk_us).
double wgmma_rows_factor(int rows);
// Rows per block and K split: blocks of 128 rows where the estimate with their best split is below 256-row
// blocks' with theirs (twice the blocks, for grids that leave SMs idle), else 256; blocks of 192 rows (4/3 the
// blocks) instead where their estimate is at least 5% below both; each with wgmma_split's split. own_permutation
// (W4A16 calls): the estimates are wgmma_call_us's, which credit grids where the kernel permutes its own activations.
struct WgmmaGrid {
  int rows = 256;
  WgmmaSplit split;
};
WgmmaGrid wgmma_grid(int64_t m, int64_t n, int64_t n16, int64_t kc, int sms, bool own_permutation = false);
// Forces the wgmma kernel's K split (blocks per K range, at most the chunk count; from row block split_rb0
// on); splits 0 restores wgmma_split's.
void set_wgmma_splits(CudaLinear& l, int splits, int split_rb0 = 0);
// The smallest M that a layer of N x K runs on the wgmma kernel (grid rules 3 and up, sm_90a; below it the decode
// kernel; host rule): 17 for layers of at least kWgmmaFrom17MinWeights weights (capability.h; docs/PERF.md, change
// 110). Below that, where the decode grid at M = 32 is nt4 nw1 wk8 with no tail split (32-token tiles, one 16-row
// tile per warp, K split 8 ways): 17 where the wgmma estimate at M = 32 (wgmma_call_us of wgmma_grid's grid, with the
// kernel's own permutation for W4A16, plus kWgmmaCallUs) is below decode_nt4_grid_us (docs/PERF.md, change 125);
// else 65 where the decode grid at M = 64 has that form too, with at most kDecodeTo64MaxChunksPerWarp chunks per warp,
// and its estimate is below the wgmma one at 64 (change 126); else 33, as on layers whose decode grid at M = 32 has
// another form.
int64_t default_wgmma_from(Semantics s, int64_t n, int64_t k, int sms);
// The decode kernel's time on such a grid (nt4 nw1 wk8, one or two token tile rows; fitted on an H100, docs/PERF.md,
// change 124): waves of blocks (blocks over slots, rounded up) x (kDecodeWaveUs + kDecodeChunkUs per chunk of 64 per
// warp).
double decode_nt4_grid_us(const DecodeGrid& g, int64_t kc);
inline constexpr double kDecodeWaveUs = 2.9, kDecodeChunkUs = 0.87;
// The longest warps (chunks of 64 per warp) of a decode grid that keeps M = 33-64: at 2-4 the decode kernel measured
// faster than the wgmma kernel on all eight one-wave layers of change 126 (H200, both semantics); at 5 slower on two
// of four layers and mixed on a third (H100: 1280x2560 1.08-1.16x, 512x2560 1.05-1.07x, 2048x2560 0.93-1.08x,
// 768x2304 0.97-0.98x), at 6-7 level or slower on all five measured (H200: 1024x3072, 1024x2816 1.11-1.19x; H100:
// 2048x2816, 2048x3072 0.99-1.12x, 1536x3328 1.17-1.28x), where the estimates put it ahead on most of them.
inline constexpr int64_t kDecodeTo64MaxChunksPerWarp = 4;
// What a wgmma call of one 64-token tile takes beyond wgmma_call_us (launches, the permutation or quantization
// kernel's own time, the tile's fill): 3.7-4.9 µs on change 124's eight layers at M = 32 for W4A16 (H100), 3.9-5.6
// for W4A4 over the estimate without the permutation credit; their middle.
inline constexpr double kWgmmaCallUs = 4.4;
// Measurements and tests: the wgmma kernel from M = max(m, 17) on; m <= 0 restores default_wgmma_from.
void set_wgmma_from(CudaLinear& l, int64_t m);
// Whether a wgmma grid (blocks of `rows` rows, split sp, m tokens) runs the kernel's form that permutes the activations
// itself (detail::wgmma_raw_x_fits: blocks of 128 rows, 64-token tiles), without the permutation kernel: where the
// grid is one round of blocks (at most one per SM). Measured with the staging permuter at M = 64 on an H100
// (docs/PERF.md, change 118): one round faster (4096x4096, 128 blocks of 16 chunks, 10-14%; 4096x14336, 128 of 56,
// 5%); two rounds equal (10240x8192, 240 blocks of 43 chunks) or 3% slower (28672x4096, 224 of 64).
bool wgmma_raw_x_pays(int64_t m, int64_t n16, int sms, int rows, WgmmaSplit sp);
// -1: wgmma_raw_x_pays; 0: the permutation kernel always; 1: the kernel's own permutation wherever it has the form.
void set_wgmma_raw_x(CudaLinear& l, int mode);

// The fused paths launch their kernels programmatically (sm_90+): each may be scheduled while the previous
// kernel in the stream (the W4A4 quantizer, the kernel that wrote x, another layer) still runs, and streams
// its first weights before it waits for that kernel; false turns that off process-wide (measurements).
void set_programmatic_launch(bool on);

}  // namespace nvfp4::cuda
