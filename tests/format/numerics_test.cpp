// Exhaustive tests of the number formats (SPEC §1): every E2M1 and E4M3 code, every E2M1 tie and its f32
// neighbours, E4M3 saturation and subnormals, bf16/fp16 rounding against brute-force oracles.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "format/numerics.h"

namespace nvfp4 {
namespace {

// Oracle: the nearest E2M1 value to y (clamped to ±6), ties to the even code, sign kept. Independent of the
// interval table in numerics.cpp: it searches the 8 magnitudes.
uint8_t e2m1_oracle(float y) {
  const float a = std::fmin(std::fabs(y), 6.0f);
  int best = 0;
  for (int i = 1; i < 8; ++i) {
    const float d = std::fabs(kE2M1Values[i] - a), db = std::fabs(kE2M1Values[best] - a);
    if (d < db || (d == db && (i % 2) == 0 && (best % 2) == 1)) best = i;
  }
  return static_cast<uint8_t>((std::signbit(y) ? 8 : 0) | best);
}

// Oracle: the nearest finite e4m3 value (codes 0x00..0x7E), ties to the even code.
uint8_t e4m3_oracle(float x) {
  const float a = std::fmin(std::fabs(x), 448.0f);
  int best = 0;
  double bd = 1e30;
  for (int c = 0; c <= 0x7E; ++c) {
    const double d = std::fabs(static_cast<double>(e4m3_decode(static_cast<uint8_t>(c))) - a);
    if (d < bd || (d == bd && c % 2 == 0)) {
      bd = d;
      best = c;
    }
  }
  return static_cast<uint8_t>((std::signbit(x) ? 0x80 : 0) | best);
}

TEST(E2M1, EveryCodeRoundTrips) {
  for (int c = 0; c < 16; ++c) {
    const float v = e2m1_decode(static_cast<uint8_t>(c));
    EXPECT_EQ(e2m1_encode(v), c) << "code " << c;
    EXPECT_EQ(std::signbit(v), c >= 8) << "code " << c;
  }
  EXPECT_EQ(e2m1_decode(7), 6.0f);
  EXPECT_EQ(e2m1_decode(0xF), -6.0f);
}

TEST(E2M1, EveryTieAndItsNeighbours) {
  // Tie points between grid values and the code each must give (ties to the even code).
  const struct { float tie; uint8_t code; } ties[] = {{0.25f, 0}, {0.75f, 2}, {1.25f, 2}, {1.75f, 4},
                                                      {2.5f, 4},  {3.5f, 6},  {5.0f, 6}};
  for (const auto& t : ties) {
    for (float sgn : {1.0f, -1.0f}) {
      const float y = sgn * t.tie;
      const uint8_t s = sgn < 0 ? 8 : 0;
      EXPECT_EQ(e2m1_encode(y), s | t.code) << y;
      const float up = std::nextafter(t.tie, 100.0f), down = std::nextafter(t.tie, 0.0f);
      EXPECT_EQ(e2m1_encode(sgn * up), s | (e2m1_oracle(up) & 7)) << up;
      EXPECT_EQ(e2m1_encode(sgn * down), s | (e2m1_oracle(down) & 7)) << down;
      EXPECT_NE(e2m1_oracle(up) & 7, e2m1_oracle(down) & 7) << "a tie separates two codes: " << t.tie;
    }
  }
}

// Every bf16 value (as the f32 it widens to: a sample of every binade, both signs, subnormals, ±inf) against the
// oracle; every NaN, whatever its sign or payload bits, encodes as 0.
TEST(E2M1, EncoderEqualsTheOracleOnEveryBf16Value) {
  int mismatches = 0;
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const float y = f32_from_bits(b << 16);
    const uint8_t want = std::isnan(y) ? 0 : e2m1_oracle(y);
    if (e2m1_encode(y) != want && ++mismatches <= 5)
      ADD_FAILURE() << "bf16 0x" << std::hex << b << ": code " << int(e2m1_encode(y)) << ", expected " << int(want);
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(e2m1_encode(f32_from_bits(0xFFC00001u)), 0);  // a negative NaN
  EXPECT_EQ(e2m1_encode(f32_from_bits(0x7F800001u)), 0);  // a signalling NaN
}

TEST(E2M1, SignedZeroAndSaturation) {
  EXPECT_EQ(e2m1_encode(0.0f), 0x0);
  EXPECT_EQ(e2m1_encode(-0.0f), 0x8);
  EXPECT_EQ(e2m1_encode(-0.1f), 0x8);  // a negative value that rounds to zero keeps its sign
  EXPECT_EQ(e2m1_encode_unsigned_zero(-0.0f), 0x0);  // compressed-tensors: torch.sign(-0.0) == 0
  EXPECT_EQ(e2m1_encode_unsigned_zero(-0.1f), 0x8);
  EXPECT_EQ(e2m1_encode_unsigned_zero(-2.6f), e2m1_encode(-2.6f));
  EXPECT_EQ(e2m1_encode(1e30f), 0x7);
  EXPECT_EQ(e2m1_encode(-1e30f), 0xF);
  EXPECT_EQ(e2m1_encode(std::numeric_limits<float>::infinity()), 0x7);
}

TEST(E2M1, MatchesOracleOnRandomValues) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-7.0f, 7.0f);
  for (int i = 0; i < 200000; ++i) {
    const float y = d(rng);
    ASSERT_EQ(e2m1_encode(y), e2m1_oracle(y)) << y;
  }
}

TEST(E4M3, EveryCodeRoundTrips) {
  int finite = 0;
  for (int c = 0; c < 256; ++c) {
    const float v = e4m3_decode(static_cast<uint8_t>(c));
    if ((c & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(v)) << c;
      EXPECT_EQ(e4m3_encode(v), kE4M3NaN);
      continue;
    }
    ++finite;
    EXPECT_EQ(e4m3_encode(v), c) << "code " << c << " value " << v;
  }
  EXPECT_EQ(finite, 254);
  EXPECT_EQ(e4m3_decode(0x7E), 448.0f);
  EXPECT_EQ(e4m3_decode(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(e4m3_decode(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_decode(0x07), 7.0f * std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_decode(0x20), 0.125f);
  EXPECT_EQ(e4m3_decode(0x38), 1.0f);
}

TEST(E4M3, SaturationAndSubnormals) {
  EXPECT_EQ(e4m3_encode(448.0f), 0x7E);
  EXPECT_EQ(e4m3_encode(449.0f), 0x7E);
  EXPECT_EQ(e4m3_encode(464.0f), 0x7E);   // torch would give NaN here without the clamp
  EXPECT_EQ(e4m3_encode(1e9f), 0x7E);
  EXPECT_EQ(e4m3_encode(-1e9f), 0xFE);
  EXPECT_EQ(e4m3_encode(std::numeric_limits<float>::infinity()), 0x7E);
  const float sub = std::ldexp(1.0f, -9);
  EXPECT_EQ(e4m3_encode(0.5f * sub), 0x00);    // tie between 0 and 2^-9: even code 0
  EXPECT_EQ(e4m3_encode(1.5f * sub), 0x02);    // tie between codes 1 and 2: even code 2
  EXPECT_EQ(e4m3_encode(2.5f * sub), 0x02);    // tie between 2 and 3: even code 2
  EXPECT_EQ(e4m3_encode(7.5f * sub), 0x08);    // tie between 7·2^-9 and 2^-6: even code 8 (smallest normal)
  EXPECT_EQ(e4m3_encode(std::nextafter(0.5f * sub, 1.0f)), 0x01);
  EXPECT_EQ(e4m3_encode(0.0f), 0x00);
  EXPECT_EQ(e4m3_encode(-0.0f), 0x80);
}

TEST(E4M3, MatchesOracleOnEveryMidpointAndRandomValues) {
  // Midpoints between consecutive codes and their f32 neighbours: the hardest inputs for rounding.
  for (int c = 0; c < 0x7E; ++c) {
    const float lo = e4m3_decode(static_cast<uint8_t>(c)), hi = e4m3_decode(static_cast<uint8_t>(c + 1));
    const float mid = 0.5f * (lo + hi);
    for (float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1000.0f)})
      ASSERT_EQ(e4m3_encode(v), e4m3_oracle(v)) << v;
  }
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> e(-14.0f, 10.0f);
  for (int i = 0; i < 100000; ++i) {
    const float v = std::exp2(e(rng)) * (i % 2 ? -1.0f : 1.0f);
    ASSERT_EQ(e4m3_encode(v), e4m3_oracle(v)) << v;
  }
}

// Oracle for 16-bit types: the nearest of the two neighbouring representable values (computed in double),
// ties to the even bit pattern.
template <class Dec>
uint16_t nearest16(float x, Dec dec, uint16_t guess) {
  uint16_t best = guess;
  for (int d = -2; d <= 2; ++d) {
    const uint16_t c = static_cast<uint16_t>(guess + d);
    const double dc = std::fabs(static_cast<double>(dec(c)) - x), db = std::fabs(static_cast<double>(dec(best)) - x);
    if (std::isnan(dec(c))) continue;
    if (dc < db || (dc == db && (c & 1) == 0)) best = c;
  }
  return best;
}

TEST(Half, Bf16RoundsToNearestEven) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<uint32_t> bits(0, 0xFFFFFFFFu);
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = bits(rng);
    float x;
    std::memcpy(&x, &u, 4);
    if (!std::isfinite(x) || std::fabs(x) > 3.0e38f) continue;
    const uint16_t b = f32_to_bf16(x);
    ASSERT_EQ(b, nearest16(x, bf16_to_f32, b)) << x;
    ASSERT_EQ(bf16_to_f32(f32_to_bf16(bf16_to_f32(b))), bf16_to_f32(b));
  }
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3F80);  // 1 + 2^-8: tie, even is 1.0
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3F82);  // 1 + 3·2^-8: tie, even is 1 + 2^-6
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
}

TEST(Half, Fp16RoundsToNearestEvenIncludingSubnormalsAndOverflow) {
  for (uint32_t h = 0; h < 0x10000; ++h) {  // every fp16 value round-trips
    const float v = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(v)) continue;
    ASSERT_EQ(f32_to_f16(v), h) << h;
  }
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> e(-26.0f, 16.5f);
  for (int i = 0; i < 200000; ++i) {
    const float x = std::exp2(e(rng)) * (i % 2 ? -1.0f : 1.0f);
    const uint16_t h = f32_to_f16(x);
    if (std::fabs(x) >= 65520.0f) {
      ASSERT_EQ(h & 0x7FFF, 0x7C00) << x;
      continue;
    }
    ASSERT_EQ(h, nearest16(x, f16_to_f32, h)) << x;
  }
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // tie between 0 and the smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);  // tie between 1 and 2 ulps: even
}

TEST(Packing, LowNibbleIsTheEvenElement) {
  const uint8_t row[2] = {pack_e2m1x2(0x3, 0xA), pack_e2m1x2(0xF, 0x0)};
  EXPECT_EQ(row[0], 0xA3);
  EXPECT_EQ(get_e2m1(row, 0), 0x3);
  EXPECT_EQ(get_e2m1(row, 1), 0xA);
  EXPECT_EQ(get_e2m1(row, 2), 0xF);
  EXPECT_EQ(get_e2m1(row, 3), 0x0);
}

}  // namespace
}  // namespace nvfp4
