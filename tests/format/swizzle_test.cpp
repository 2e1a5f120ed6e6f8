// The 128x4 scale swizzle (SPEC §2) at awkward shapes: round trip, a bijection onto the padded buffer,
// padding written as zero even over a dirty buffer, and the byte positions of a few hand-derived entries.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "format/swizzle.h"

namespace nvfp4 {
namespace {

TEST(Swizzle, RoundTripAndZeroPaddingAtAwkwardShapes) {
  for (int64_t rows : {1, 127, 128, 129, 300}) {
    for (int64_t cols : {1, 3, 4, 5}) {
      std::vector<uint8_t> lin(static_cast<size_t>(rows * cols));
      for (size_t i = 0; i < lin.size(); ++i) lin[i] = static_cast<uint8_t>(1 + (i * 37) % 254);  // never 0
      std::vector<uint8_t> sw(static_cast<size_t>(swizzled_bytes(rows, cols)), 0xCD);  // dirty
      swizzle_scales(lin.data(), rows, cols, sw.data());
      std::vector<uint8_t> back(lin.size(), 0);
      unswizzle_scales(sw.data(), rows, cols, back.data());
      ASSERT_EQ(back, lin) << rows << "x" << cols;
      // Every entry lands on a distinct byte inside the buffer; all other bytes are zero padding.
      std::set<int64_t> used;
      const int64_t cp = swizzled_cols(cols);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t off = swizzled_offset(r, c, cp);
          ASSERT_GE(off, 0);
          ASSERT_LT(off, swizzled_bytes(rows, cols));
          ASSERT_TRUE(used.insert(off).second) << "two entries at byte " << off;
        }
      for (int64_t b = 0; b < swizzled_bytes(rows, cols); ++b)
        if (!used.count(b)) {
          ASSERT_EQ(sw[b], 0) << "padding byte " << b << " of " << rows << "x" << cols;
        }
    }
  }
}

TEST(Swizzle, HandDerivedPositions) {
  // 256 rows x 8 scale columns: two row tiles of 128, two column tiles of 4; each (tile, tile) block is 512 B.
  const int64_t cp = 8;
  EXPECT_EQ(swizzled_offset(0, 0, cp), 0);
  EXPECT_EQ(swizzled_offset(0, 3, cp), 3);
  EXPECT_EQ(swizzled_offset(1, 0, cp), 16);     // rows 0..31 step 16 bytes
  EXPECT_EQ(swizzled_offset(32, 0, cp), 4);     // rows 32..63 sit 4 bytes over
  EXPECT_EQ(swizzled_offset(96, 1, cp), 13);
  EXPECT_EQ(swizzled_offset(0, 4, cp), 512);    // next column tile
  EXPECT_EQ(swizzled_offset(128, 0, cp), 1024); // next row tile comes after both column tiles
  EXPECT_EQ(swizzled_offset(255, 7, cp), 1024 + 512 + 31 * 16 + 3 * 4 + 3);
  EXPECT_EQ(swizzled_bytes(129, 5), 256 * 8);
}

}  // namespace
}  // namespace nvfp4
