// Kernel-private weight layout of the CUDA GEMM kernels, made once at load from the linear layout (SPEC §2),
// plus its inverse (for the round-trip test). Plain C++.
//
// The GEMM computes yᵀ = W · xᵀ with mma.sync m16n8k16: 16 weight rows are the A operand, 8 tokens the B
// operand. Within a K chunk of 64, lane (g = lane/4, t = lane%4) owns rows g and g+8 of the 16-row tile and
// the 16 consecutive K values [16t, 16t+16) (one scale group per row). Its MMA step s (0..3) uses
// k = 16t + 4s + {0,1,2,3}: the A/B fragment columns {2t, 2t+1, 2t+8, 2t+9} are mapped to those K values
// (the same permutation on both operands leaves the dot product unchanged).
//
// Tiles are stored in groups of kTileGroup = 4 (N16 rounded up to a multiple of 4, extra tiles zero), chunk by
// chunk, so that the tiles a warp multiplies together sit 512 bytes apart and one address serves them all:
// block (tile nt, chunk c) = fragment_block(nt, c, KC), each block 32 lanes.
// codes: [N16/4][KC][4 tiles][32 lanes] x 16 bytes (uint32 word s = step s). Word s holds the 8 codes of
//   the fragment registers p (p = 0: row g, k 4s+0/1; 1: row g+8, k 4s+0/1; 2: row g, k 4s+2/3; 3: row g+8,
//   k 4s+2/3), value j of register p with its bits at dequant_bits.h's code_bits(bf16, p, j): the layout
//   depends on the activation type the layer runs with (FragmentWeights::act).
// scales: [N16/4][KC][4 tiles][32 lanes] x 2 bytes: e4m3 of (row g, group 4c+t), (row g+8, group 4c+t).
// Padding (rows >= N, K >= in_features) is code 0 with scale 0.
#pragma once
#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "format/quant.h"

namespace nvfp4::cuda {

constexpr int kChunkK = 64;   // K per chunk
constexpr int kTileN = 16;    // weight rows per tile
constexpr int kTileGroup = 4; // tiles stored together

// Index of the 32-lane block of tile nt, chunk c (kc chunks per tile). constexpr: the kernels use it too.
constexpr int64_t fragment_block(int64_t nt, int64_t c, int64_t kc) {
  return ((nt / kTileGroup) * kc + c) * kTileGroup + nt % kTileGroup;
}
// Tiles stored (N16 rounded up to the tile group).
constexpr int64_t stored_tiles(int64_t n16) { return (n16 + kTileGroup - 1) / kTileGroup * kTileGroup; }

struct FragmentWeights {
  DType act = DType::BF16;    // activation type whose code bit layout `codes` uses
  int64_t n = 0, k = 0;       // logical shape
  int64_t n16 = 0, kc = 0;    // tiles of 16 rows, chunks of 64 K
  std::vector<uint8_t> codes;   // stored_tiles(n16) * kc * 32 * 16
  std::vector<uint8_t> scales;  // stored_tiles(n16) * kc * 32 * 2
};

// The K offset within a chunk that column c (0..15) of the A fragments of MMA step s (0..3) holds: lane t
// owns columns 2t, 2t+1 (registers 0, 1) and 2t+8, 2t+9 (registers 2, 3), i.e. K = 16t + 4s + {0,1} and
// 16t + 4s + {2,3}. The activations (the B operand) must be in the same order: the decode kernel loads each
// lane's 16 consecutive K values itself; the wgmma kernel reads B rows from shared memory, so its activations
// are first permuted so that position 16s + c of a chunk holds K = mma_column_k(s, c).
constexpr int mma_column_k(int s, int c) { return 16 * ((c % 8) / 2) + 4 * s + 2 * (c / 8) + c % 2; }
// The inverse at the granularity of K pairs: the 4-byte word (0..31) of a chunk's 128-byte row in that order that holds
// K pair p (K = 2p, 2p + 1 of the chunk): word 8s + c/2 holds K = mma_column_k(s, c) for even c.
constexpr int mma_word_of_pair(int p) { return 4 * (p % 8) + p / 8; }
constexpr bool mma_word_of_pair_inverts_mma_column_k() {
  for (int w = 0; w < 32; ++w)
    if (mma_word_of_pair(mma_column_k(w / 8, 2 * (w % 8)) / 2) != w) return false;
  return true;
}
static_assert(mma_word_of_pair_inverts_mma_column_k(), "mma_word_of_pair must invert mma_column_k");

// w: codes (n, k/2) and scales (n, k/16) linear; k % 16 == 0; act BF16 or F16 (throws nvfp4::Error otherwise).
FragmentWeights make_fragment_weights(const Nvfp4Matrix& w, DType act);
// Inverse: linear codes and scales of the logical (n, k) matrix.
void unpack_fragment_weights(const FragmentWeights& f, std::vector<uint8_t>* codes, std::vector<uint8_t>* scales);

}  // namespace nvfp4::cuda
