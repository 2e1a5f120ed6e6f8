#include "format/numerics.h"

#include <cmath>

namespace nvfp4 {

namespace {
// SPEC §1's e4m3fn value of one byte.
float e4m3_value(uint8_t code) {
  const int e = (code >> 3) & 0xF;
  const int m = code & 7;
  float v;
  if (e == 15 && m == 7) return std::nanf("");
  if (e == 0) v = std::ldexp(static_cast<float>(m), -9);  // subnormal: m · 2^-9
  else v = std::ldexp(1.0f + m / 8.0f, e - 7);
  return (code & 0x80) ? -v : v;
}
struct E4m3Table {
  float v[256];
  E4m3Table() {
    for (int c = 0; c < 256; ++c) v[c] = e4m3_value(static_cast<uint8_t>(c));
  }
};
}  // namespace

float e4m3_decode(uint8_t code) {
  static const E4m3Table table;  // built on first use: safe from other files' static initializers
  return table.v[code];
}

uint8_t e4m3_encode(float x) {
  if (std::isnan(x)) return kE4M3NaN;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  float a = std::fabs(x);
  if (a > kE4M3Max) a = kE4M3Max;
  if (a < 0.015625f) {  // below 2^-6: subnormal grid m · 2^-9 (q == 8 is the smallest normal, code 0x08)
    const float q = std::nearbyint(a * 512.0f);  // exact scaling, round half to even
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(q));
  }
  int e2;
  std::frexp(a, &e2);  // a = f · 2^e2, f in [0.5, 1)
  int exp = e2 - 1;    // a in [2^exp, 2^(exp+1))
  float mant = std::nearbyint((std::ldexp(a, -exp) - 1.0f) * 8.0f);  // exact, then RNE
  if (mant >= 8.0f) {
    mant = 0.0f;
    ++exp;
  }
  return static_cast<uint8_t>(sign | ((exp + 7) << 3) | static_cast<int>(mant));
}

uint16_t f32_to_f16(float x) {
  const uint32_t u = f32_bits(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const float a = std::fabs(x);
  if (std::isnan(x)) return static_cast<uint16_t>(sign | 0x7E00u);
  if (a >= 65520.0f) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds past 65504: inf
  if (a < 6.103515625e-05f) {                                       // below 2^-14: subnormal
    const float q = std::nearbyint(a * 16777216.0f);                // m · 2^-24, RNE
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(q));
  }
  const int e = static_cast<int>((u >> 23) & 0xFF) - 127;
  const uint32_t mant = u & 0x7FFFFFu;
  uint32_t h = (static_cast<uint32_t>(e + 15) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // carry into the exponent is correct
  return static_cast<uint16_t>(sign | h);
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const int e = (h >> 10) & 0x1F;
  const uint32_t m = h & 0x3FFu;
  if (e == 0) {
    const float v = std::ldexp(static_cast<float>(m), -24);
    return sign ? -v : v;
  }
  if (e == 31) return f32_from_bits(sign | 0x7F800000u | (m << 13));
  return f32_from_bits(sign | (static_cast<uint32_t>(e - 15 + 127) << 23) | (m << 13));
}

}  // namespace nvfp4
