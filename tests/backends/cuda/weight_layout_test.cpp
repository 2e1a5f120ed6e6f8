// Round trip of the CUDA kernels' private weight layout (CPU only; no GPU needed).
#include "backends/cuda/weight_layout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "backends/cuda/dequant_bits.h"
#include "common/error.h"
#include "format/numerics.h"

namespace nvfp4::cuda {
namespace {

Nvfp4Matrix random_matrix(int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  Nvfp4Matrix m;
  m.resize(n, k);
  for (auto& c : m.codes) c = static_cast<uint8_t>(byte(rng));
  for (auto& s : m.scales) s = static_cast<uint8_t>(byte(rng));
  return m;
}

// Step words (4 bytes, one per lane and MMA step) holding any set bit: a code's 4 bits lie in one word.
size_t nonzero_words(const FragmentWeights& f) {
  size_t n = 0;
  for (size_t i = 0; i + 4 <= f.codes.size(); i += 4)
    n += (f.codes[i] | f.codes[i + 1] | f.codes[i + 2] | f.codes[i + 3]) != 0;
  return n;
}

TEST(CudaWeightLayout, RoundTripsEveryShapeClass) {
  const int64_t shapes[][2] = {{1, 16}, {16, 64}, {17, 80}, {33, 208}, {72, 4096}, {130, 48}};
  for (DType act : {DType::BF16, DType::F16})
  for (const auto& s : shapes) {
    const Nvfp4Matrix m = random_matrix(s[0], s[1], static_cast<uint32_t>(s[0] * 1000 + s[1]));
    const FragmentWeights f = make_fragment_weights(m, act);
    EXPECT_EQ(f.act, act);
    EXPECT_EQ(f.n16, (s[0] + 15) / 16);
    EXPECT_EQ(f.kc, (s[1] + 63) / 64);
    const int64_t stored = (f.n16 + 3) / 4 * 4;  // tiles stored in groups of 4
    EXPECT_EQ(f.codes.size(), static_cast<size_t>(stored * f.kc * 32 * 16));
    EXPECT_EQ(f.scales.size(), static_cast<size_t>(stored * f.kc * 32 * 2));
    std::vector<uint8_t> codes, scales;
    unpack_fragment_weights(f, &codes, &scales);
    EXPECT_EQ(codes, m.codes) << s[0] << "x" << s[1] << " " << dtype_name(act);
    EXPECT_EQ(scales, m.scales) << s[0] << "x" << s[1] << " " << dtype_name(act);
  }
}

TEST(CudaWeightLayout, PaddingIsZero) {
  // 17 rows x 80 K (15 padded rows, 48 padded K), every code 0xF (4 set bits) and every scale nonzero: the
  // layout holds exactly the set bits and scales of the real values, the padding none.
  Nvfp4Matrix m;
  m.resize(17, 80);
  for (auto& c : m.codes) c = 0xFF;
  for (auto& sc : m.scales) sc = 0x38;
  for (DType act : {DType::BF16, DType::F16}) {
    const FragmentWeights f = make_fragment_weights(m, act);
    size_t bits = 0, scale_nonzero = 0;
    for (uint8_t b : f.codes)
      for (int i = 0; i < 8; ++i) bits += (b >> i) & 1;
    for (uint8_t b : f.scales) scale_nonzero += b != 0;
    EXPECT_EQ(bits, 17u * 80u * 4u) << dtype_name(act);
    EXPECT_EQ(scale_nonzero, 17u * 5u) << dtype_name(act);
  }
}

TEST(CudaWeightLayout, FirstLaneHoldsItsFragmentValues) {
  // Lane 0 (g = 0, t = 0), step 0: register 0 = row 0, k 0/1 -> values 0 and 1 of register 0 in word 0.
  Nvfp4Matrix m;
  m.resize(16, 64);
  m.codes[0] = 0x5A;  // row 0: k0 = 0xA, k1 = 0x5
  for (DType act : {DType::BF16, DType::F16}) {
    const FragmentWeights f = make_fragment_weights(m, act);
    const uint32_t w0 = f.codes[0] | (f.codes[1] << 8) | (f.codes[2] << 16) | (static_cast<uint32_t>(f.codes[3]) << 24);
    const bool bf16 = act == DType::BF16;
    EXPECT_EQ(code_at(bf16, 0, 0, w0), 0xAu);
    EXPECT_EQ(code_at(bf16, 0, 1, w0), 0x5u);
    EXPECT_EQ(w0, place_code(bf16, 0, 0, 0xA) | place_code(bf16, 0, 1, 0x5));
  }
}

TEST(CudaWeightLayout, TilesOfAGroupSitSideBySidePerChunk) {
  // 80 rows (5 tiles: one full group of 4, one group holding tile 4 and three zero tiles) x 128 K (2 chunks).
  Nvfp4Matrix m;
  m.resize(80, 128);
  m.codes[static_cast<size_t>(16 * 64 + 32)] = 0x0B;  // row 16 (tile 1, row 0), k 64 (chunk 1, k 0)
  m.codes[static_cast<size_t>(64 * 64 + 32)] = 0x0C;  // row 64 (tile 4, row 0), k 64 (chunk 1, k 0)
  const FragmentWeights f = make_fragment_weights(m, DType::BF16);
  ASSERT_EQ(f.codes.size(), static_cast<size_t>(8 * 2 * 32 * 16));
  auto word0 = [&](int64_t block) {
    const uint8_t* b = f.codes.data() + block * 32 * 16;  // lane 0
    return b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
  };
  // Group 0, chunk 1, tile 1 is block (0·2 + 1)·4 + 1 = 5; group 1, chunk 1, tile 0 is block (1·2 + 1)·4 = 12.
  EXPECT_EQ(fragment_block(1, 1, 2), 5);
  EXPECT_EQ(fragment_block(4, 1, 2), 12);
  EXPECT_EQ(code_at(true, 0, 0, word0(5)), 0xBu);
  EXPECT_EQ(code_at(true, 0, 0, word0(12)), 0xCu);
  EXPECT_EQ(nonzero_words(f), 2u);
}

// mma_column_k (the activation order the wgmma kernel permutes into) against the packing itself: a single
// code at row g, K = mma_column_k(s, c) must land in lane (g, t = (c % 8) / 2), step word s, register
// p = 2·(c / 8) (row g), value c % 2; and the 64 (s, c) pairs cover each K of a chunk once.
TEST(CudaWeightLayout, MmaColumnOrderMatchesThePacking) {
  std::vector<int> seen(64, 0);
  for (int s = 0; s < 4; ++s)
    for (int c = 0; c < 16; ++c) {
      const int k = mma_column_k(s, c);
      ASSERT_GE(k, 0);
      ASSERT_LT(k, 64);
      ++seen[static_cast<size_t>(k)];
      const int g = 5;
      Nvfp4Matrix m;
      m.resize(16, 64);
      m.codes[static_cast<size_t>(g * 32 + k / 2)] = static_cast<uint8_t>(k % 2 ? 0x90 : 0x09);  // code 9
      const FragmentWeights f = make_fragment_weights(m, DType::BF16);
      const int lane = 4 * g + (c % 8) / 2, p = 2 * (c / 8);
      const uint8_t* b = f.codes.data() + lane * 16 + 4 * s;
      const uint32_t word = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
      EXPECT_EQ(word, place_code(true, p, c % 2, 9)) << "step " << s << " column " << c;
      EXPECT_EQ(nonzero_words(f), 1u);
    }
  for (int k = 0; k < 64; ++k) EXPECT_EQ(seen[static_cast<size_t>(k)], 1) << "k " << k;
}

TEST(CudaWeightLayout, RejectsKNotMultipleOf16) {
  Nvfp4Matrix m;
  m.rows = 4;
  m.cols = 24;
  m.codes.resize(48);
  m.scales.resize(4);
  EXPECT_THROW(make_fragment_weights(m, DType::BF16), Error);
  Nvfp4Matrix ok;
  ok.resize(4, 32);
  EXPECT_THROW(make_fragment_weights(ok, DType::F32), Error);
}

// The kernels' register dequantization (dequant_bits.h), checked on the host for every E2M1 code in both
// halves and every finite E4M3 scale: the nibble bits decode to e2m1 · 2^exp, the scale register is exact in
// T, and their product e2m1 · S · 2^-shift is exactly representable in T (so the tensor-core operand, and
// the hardware multiply that forms it with round-to-nearest, are exact).
TEST(CudaDequantBits, ExactForEveryCodeAndScale) {
  struct Case {
    DType t;
    int nibble_exp, scale_shift;
  };
  const Case cases[] = {{DType::BF16, kBf16NibbleExp, kBf16ScaleShift}, {DType::F16, kF16NibbleExp, kF16ScaleShift}};
  for (const Case& c : cases) {
    const bool bf16 = c.t == DType::BF16;
    const double unshift = product_unshift(c.t);
    for (uint32_t code = 0; code < 16; ++code) {
      const uint32_t w = reg_bits(bf16, 0, place_code(bf16, 0, 0, code) | place_code(bf16, 0, 1, code));
      for (int half = 0; half < 2; ++half) {
        const float v = from_bits16(c.t, static_cast<uint16_t>(w >> (16 * half)));
        ASSERT_EQ(v, std::ldexp(e2m1_decode(static_cast<uint8_t>(code)), c.nibble_exp))
            << dtype_name(c.t) << " code " << code << " half " << half;
        ASSERT_EQ(std::signbit(v), (code & 8) != 0);
        for (int s8 = 0; s8 < 0x7F; ++s8) {
          const float reg = std::ldexp(e4m3_decode(static_cast<uint8_t>(s8)), c.scale_shift);
          ASSERT_TRUE(std::isfinite(reg));
          ASSERT_EQ(round_to(c.t, reg), reg) << dtype_name(c.t) << " scale " << s8;
          const double prod = static_cast<double>(v) * reg;
          ASSERT_EQ(prod * unshift, static_cast<double>(e2m1_decode(static_cast<uint8_t>(code))) *
                                        e4m3_decode(static_cast<uint8_t>(s8)));
          ASSERT_EQ(static_cast<double>(round_to(c.t, static_cast<float>(prod))), prod)
              << dtype_name(c.t) << " code " << code << " scale " << s8;
        }
      }
    }
  }
}

// The code bit layout of a step word (dequant_bits.h): for each activation type the 8 values' bits partition
// the 32 bits, and every register decodes both its values exactly (e2m1 · 2^exp, sign included) for every
// pair of codes, whatever the other registers' codes are (all 256 pairs x 64 random fillings of the rest), and the
// kernels' multiply form of the extraction (reg_bits_mul) gives the same bits.
TEST(CudaDequantBits, EveryRegisterOfAStepWordDecodesExactly) {
  std::mt19937 rng(11);
  for (DType t : {DType::BF16, DType::F16}) {
    const bool bf16 = t == DType::BF16;
    const int exp = bf16 ? kBf16NibbleExp : kF16NibbleExp;
    uint32_t all = 0;
    for (int p = 0; p < 4; ++p)
      for (int j = 0; j < 2; ++j) {
        const uint32_t bits = place_code(bf16, p, j, 0xF);
        EXPECT_EQ(bits & all, 0u) << dtype_name(t) << " register " << p << " value " << j << " overlaps";
        all |= bits;
      }
    EXPECT_EQ(all, 0xFFFFFFFFu) << dtype_name(t);
    for (int p = 0; p < 4; ++p) {
      const uint32_t own = place_code(bf16, p, 0, 0xF) | place_code(bf16, p, 1, 0xF);
      int64_t bad = 0;
      for (uint32_t c0 = 0; c0 < 16; ++c0)
        for (uint32_t c1 = 0; c1 < 16; ++c1)
          for (int r = 0; r < 64; ++r) {
            const uint32_t rest = (r == 0 ? 0u : r == 1 ? ~0u : static_cast<uint32_t>(rng())) & ~own;
            const uint32_t word = place_code(bf16, p, 0, c0) | place_code(bf16, p, 1, c1) | rest;
            ASSERT_EQ(code_at(bf16, p, 0, word), c0);
            ASSERT_EQ(code_at(bf16, p, 1, word), c1);
            const uint32_t w = reg_bits(bf16, p, word);
            // the kernels' multiply form
            ASSERT_EQ(reg_bits_mul(bf16, p, word, 8u, 4u), w) << dtype_name(t) << " register " << p;
            const float lo = from_bits16(t, static_cast<uint16_t>(w)), hi = from_bits16(t, static_cast<uint16_t>(w >> 16));
            const bool ok = lo == std::ldexp(e2m1_decode(static_cast<uint8_t>(c0)), exp) &&
                            hi == std::ldexp(e2m1_decode(static_cast<uint8_t>(c1)), exp) &&
                            std::signbit(lo) == ((c0 & 8) != 0) && std::signbit(hi) == ((c1 & 8) != 0);
            if (!ok && bad++ < 3)
              ADD_FAILURE() << dtype_name(t) << " register " << p << " codes " << c0 << ", " << c1 << " rest 0x"
                            << std::hex << rest << ": " << lo << ", " << hi;
          }
      EXPECT_EQ(bad, 0) << dtype_name(t) << " register " << p;
    }
  }
}

// The quantizer's integer E2M1 encoder against SPEC §1's comparison form: every f32 whose magnitude lies in
// [2^-3, 2^3) (all interval ends and ties), a stride through all other bit patterns, and the specials.
uint32_t e2m1_by_comparisons(float y) {
  const float a = std::fabs(y);
  const uint32_t m = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) + (a >= 3.5f) + (a > 5.0f);
  return m | ((std::signbit(y) && !std::isnan(y)) ? 8u : 0u);
}

// Those inputs where same(y) fails, each reported (the first five) with what(y); their count.
template <typename Same, typename What>
int64_t e2m1_mismatches(Same same, What what) {
  int64_t bad = 0;
  auto check = [&](uint32_t u) {
    float y;
    std::memcpy(&y, &u, 4);
    if (!same(y) && bad++ < 5) ADD_FAILURE() << "bits 0x" << std::hex << u << ": " << what(y);
  };
  for (uint32_t sign : {0u, 0x80000000u}) {
    for (uint32_t u = 0x3E000000u; u < 0x41000000u; ++u) check(sign | u);
    for (uint64_t u = 0; u <= 0x7FFFFFFFu; u += 9973) check(sign | static_cast<uint32_t>(u));
    for (uint32_t u : {0u, 1u, 0x007FFFFFu, 0x00800000u, 0x7F7FFFFFu, 0x7F800000u, 0x7F800001u, 0x7FC00000u, 0x7FFFFFFFu})
      check(sign | u);
  }
  return bad;
}

TEST(CudaDequantBits, E2M1EncoderMatchesComparisons) {
  EXPECT_EQ(e2m1_mismatches([](float y) { return e2m1_encode_bits(y) == e2m1_by_comparisons(y); },
                            [](float y) {
                              return std::to_string(e2m1_encode_bits(y)) + " vs " + std::to_string(e2m1_by_comparisons(y));
                            }),
            0);
}

// The code's value without the code (e2m1_round_f32) against the encoder and SPEC §1's decoder, bit for bit
// (signed zeros, NaN -> +0): the same inputs as above on the host (the GPU test covers all 2^32 on the device).
TEST(CudaDequantBits, E2M1RoundEqualsEncodeThenDecode) {
  auto bits = [](float v) {
    uint32_t b;
    std::memcpy(&b, &v, 4);
    return b;
  };
  auto want = [](float y) { return e2m1_decode(static_cast<uint8_t>(e2m1_encode_bits(y))); };
  EXPECT_EQ(e2m1_mismatches([&](float y) { return bits(e2m1_round_f32(y)) == bits(want(y)); },
                            [&](float y) { return std::to_string(e2m1_round_f32(y)) + " vs " + std::to_string(want(y)); }),
            0);
}

}  // namespace
}  // namespace nvfp4::cuda
