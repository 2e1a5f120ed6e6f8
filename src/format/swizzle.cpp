#include "format/swizzle.h"

#include <cstring>

namespace nvfp4 {

void swizzle_scales(const uint8_t* linear, int64_t rows, int64_t cols, uint8_t* swizzled) {
  const int64_t cp = swizzled_cols(cols);
  std::memset(swizzled, 0, static_cast<size_t>(swizzled_bytes(rows, cols)));  // padding is zero, always
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) swizzled[swizzled_offset(r, c, cp)] = linear[r * cols + c];
}

void unswizzle_scales(const uint8_t* swizzled, int64_t rows, int64_t cols, uint8_t* linear) {
  const int64_t cp = swizzled_cols(cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) linear[r * cols + c] = swizzled[swizzled_offset(r, c, cp)];
}

}  // namespace nvfp4
