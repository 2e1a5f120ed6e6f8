// Block-scale layouts (SPEC §2). "linear" is [R, C] row-major with C = K/16 (what checkpoints store);
// "swizzled 128x4" is what cuBLASLt / CUTLASS block-scaled FP4 GEMMs read. This file is the one definition
// of the swizzle formula; every backend that needs it calls these functions.
#pragma once
#include <cstddef>
#include <cstdint>

// The inline functions below are also called from CUDA kernels (the activation quantizer writes swizzled
// scales); under nvcc they are compiled for host and device. In plain C++ the macro is empty.
#if defined(__CUDACC__)
#define NVFP4_HOST_DEVICE __host__ __device__
#else
#define NVFP4_HOST_DEVICE
#endif

namespace nvfp4 {

NVFP4_HOST_DEVICE inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Padded sizes of the swizzled layout: rows to a multiple of 128, scale columns to a multiple of 4.
NVFP4_HOST_DEVICE inline int64_t swizzled_rows(int64_t rows) { return round_up(rows, 128); }
NVFP4_HOST_DEVICE inline int64_t swizzled_cols(int64_t cols) { return round_up(cols, 4); }
NVFP4_HOST_DEVICE inline int64_t swizzled_bytes(int64_t rows, int64_t cols) { return swizzled_rows(rows) * swizzled_cols(cols); }

// Byte offset of entry (r, c) in the swizzled layout whose padded column count is cols_padded.
NVFP4_HOST_DEVICE inline int64_t swizzled_offset(int64_t r, int64_t c, int64_t cols_padded) {
  return ((r / 128) * (cols_padded / 4) + c / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + (c % 4);
}

// linear: (rows, cols) e4m3, row-major  ->  swizzled: swizzled_bytes(rows, cols) bytes, padding zero.
void swizzle_scales(const uint8_t* linear, int64_t rows, int64_t cols, uint8_t* swizzled);
// Inverse: reads the (rows, cols) entries back out of a swizzled buffer.
void unswizzle_scales(const uint8_t* swizzled, int64_t rows, int64_t cols, uint8_t* linear);

}  // namespace nvfp4
