// The operand images that backends/cublaslt hands to cuBLASLt's block-scaled FP4 GEMM, and a model of what
// that GEMM computes from them. Pure C++ (header-only, no CUDA), so the layout and padding rules are tested on
// any machine (tests/linear/cublaslt_layout_test.cpp), and the executor uploads exactly these bytes.
//
// cuBLASLt is column-major. We compute y (m, N) row-major = x (m, K) · Wᵀ as the column-major product
//   D (N x m, ld N) = op(A) · B,  A = weight codes seen as (Kp x N) col-major, ld Kp, TRANSA = T
//                                 B = activation codes seen as (Kp x m) col-major, ld Kp, TRANSB = N
// which is the "TN" layout cuBLASLt requires for FP4: both operands are K-contiguous rows, i.e. exactly the
// row-major (rows, Kp/2) byte arrays below, and D is y row-major (m, N).
//
// Block scales (CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3): one UE4M3 byte per 16 K-elements of each row, in
// the 128x4 swizzled layout of SPEC §2 (format/swizzle.h: rows padded to 128, scale columns to 4, zeros).
//
// Padding, chosen so that every dimension cuBLASLt sees is aligned whatever the checkpoint's shape:
//   K  -> Kp = round_up(K, 64): a multiple of 4 scale columns (the swizzle tile is 4 wide, so the scale
//         tensor already covers Kp) and code rows of Kp/2 bytes, a multiple of 32 bytes (16-byte alignment of
//         every row). Padded codes are 0 and their scales are 0, so they add exactly 0 to every dot product.
//   N  -> the weight image has round_up(N, 128) rows (the scale tile height); rows >= N are zero.
//   m  -> the activation workspace has round_up(m, 128) rows for the same reason (the quantizer writes the
//         padding scales as 0).
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "format/numerics.h"
#include "format/quant.h"
#include "format/swizzle.h"

namespace nvfp4::cublaslt {

constexpr int64_t kKAlign = 64;     // K padding (elements): 4 scale columns of 16
constexpr int64_t kRowAlign = 128;  // row padding of code images: the height of a swizzle tile

inline int64_t padded_k(int64_t k) { return round_up(k, kKAlign); }

// Host image of one FP4 operand as cuBLASLt reads it.
struct Fp4Operand {
  int64_t rows = 0, cols = 0;          // logical: rows, K (K % 16 == 0)
  int64_t rows_pad = 0, cols_pad = 0;  // round_up(rows, 128), round_up(K, 64)
  std::vector<uint8_t> codes;          // (rows_pad, cols_pad/2) e2m1x2, element 2j in the low nibble; zero padded
  std::vector<uint8_t> scales;         // swizzled_bytes(rows, K/16) == rows_pad * cols_pad/16 bytes, 128x4 layout
};

// codes: (rows, cols/2) e2m1x2 row-major; scales: (rows, cols/16) e4m3, linear. cols % 16 == 0 (throws).
inline Fp4Operand make_operand(const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t cols) {
  NVFP4_CHECK(rows > 0 && cols > 0 && cols % kGroupSize == 0,
              "cublaslt: operand shape (" + std::to_string(rows) + ", " + std::to_string(cols) +
                  ") invalid, expected rows > 0 and K a positive multiple of 16");
  Fp4Operand o;
  o.rows = rows;
  o.cols = cols;
  o.rows_pad = round_up(rows, kRowAlign);
  o.cols_pad = padded_k(cols);
  o.codes.assign(static_cast<size_t>(o.rows_pad * (o.cols_pad / 2)), 0);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(o.codes.data() + r * (o.cols_pad / 2), codes + r * (cols / 2), static_cast<size_t>(cols / 2));
  const int64_t groups = cols / kGroupSize;
  o.scales.resize(static_cast<size_t>(swizzled_bytes(rows, groups)));
  swizzle_scales(scales, rows, groups, o.scales.data());
  return o;
}

inline Fp4Operand make_weight_operand(const Nvfp4Matrix& w) {
  return make_operand(w.codes.data(), w.scales.data(), w.rows, w.cols);
}

// The per-call factor: alpha = f32(D_x · D_w) (SPEC §5, W4A4 native).
inline float native_alpha(const LinearWeights& w) { return linear_output_factor(w, Semantics::W4A4); }

// Reads an image back into canonical form (codes (rows, cols/2), linear scales). The inverse of make_operand.
inline Nvfp4Matrix read_operand(const Fp4Operand& o) {
  Nvfp4Matrix m;
  m.rows = o.rows;
  m.cols = o.cols;
  m.codes.resize(static_cast<size_t>(o.rows * (o.cols / 2)));
  for (int64_t r = 0; r < o.rows; ++r)
    std::memcpy(m.codes.data() + r * (o.cols / 2), o.codes.data() + r * (o.cols_pad / 2),
                static_cast<size_t>(o.cols / 2));
  m.scales.resize(static_cast<size_t>(o.rows * (o.cols / kGroupSize)));
  unswizzle_scales(o.scales.data(), o.rows, o.cols / kGroupSize, m.scales.data());
  return m;
}

// Model of the block-scaled GEMM over the padded images, the way the hardware sees them: every one of the
// Kp columns (padding included), each scale read through the swizzle formula at its padded position.
//   acc (m_rows, N) = Σ_{k < Kp} e2m1(act[i,k]) · S_act[i, k/16] · e2m1(w[j,k]) · S_w[j, k/16]   (f64, in k order)
// The caller multiplies by alpha and rounds. act.cols_pad must equal w.cols_pad.
inline void model_block_scaled_gemm(const Fp4Operand& w, const Fp4Operand& act, double* acc) {
  NVFP4_CHECK(w.cols_pad == act.cols_pad, "cublaslt model: K mismatch");
  const int64_t kp = w.cols_pad, cp = kp / kGroupSize;
  auto value = [kp, cp](const Fp4Operand& o, int64_t r, int64_t k) {
    const float q = e2m1_decode(get_e2m1(o.codes.data() + r * (kp / 2), k));
    const float s = e4m3_decode(o.scales[static_cast<size_t>(swizzled_offset(r, k / kGroupSize, cp))]);
    return static_cast<double>(q * s);  // exact: <= 2 significant bits times <= 4
  };
  for (int64_t i = 0; i < act.rows; ++i)
    for (int64_t j = 0; j < w.rows; ++j) {
      double sum = 0.0;
      for (int64_t k = 0; k < kp; ++k) sum += value(act, i, k) * value(w, j, k);
      acc[i * w.rows + j] = sum;
    }
}

}  // namespace nvfp4::cublaslt
