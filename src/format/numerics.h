// Number formats of NVFP4 (SPEC §1): E2M1 (FP4) codes, E4M3 (FP8 e4m3fn) block scales, and host-side
// bf16/fp16 with IEEE round-to-nearest-even. Pure C++, no I/O, no CUDA. Every function here is exact.
#pragma once
#include <cstdint>
#include <cstring>

#include "common/dtype.h"

namespace nvfp4 {

// An f32's bit pattern and back.
inline uint32_t f32_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ---- E2M1 -------------------------------------------------------------------------------------------
// Magnitudes indexed by the low 3 bits of a code; bit 3 is the sign (0x8 is -0.0).
constexpr float kE2M1Values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
constexpr float kE2M1Max = 6.0f;

// Value of a 4-bit code (only the low nibble is read).
inline float e2m1_decode(uint8_t code) {
  const float m = kE2M1Values[code & 7];
  return (code & 8) ? -m : m;
}

// Clamp to [-6, 6], round to nearest on the grid with ties to the even code; the sign is kept (a negative
// value that rounds to zero gives 0x8). NaN encodes as 0 (callers validate before quantizing).
// The magnitude code counts the interval ends of SPEC §1 at or below |y|: a closed end (<=) belongs to the code
// with the even index, so that comparison is strict, an open end's is not. NaN compares false everywhere: code 0.
// Inline and without branches: the activation quantizer runs it on every value.
inline uint8_t e2m1_encode(float y) {
  const float a = y < 0.0f ? -y : y;
  const int m = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) + (a >= 3.5f) + (a > 5.0f);
  const int sign = (f32_bits(y) >> 31) != 0 && a == a ? 8 : 0;
  return static_cast<uint8_t>(sign | m);
}
// The checkpoint writers' cast: the same except that an exact zero of either sign gives +0 (code 0x0).
// compressed-tensors computes torch.sign(y) · round(|y|) and torch.sign(-0.0) is 0 (pinned by the golden
// files); ModelOpt takes the sign bit from (y < 0), which is false for -0.0.
inline uint8_t e2m1_encode_unsigned_zero(float y) { return y == 0.0f ? 0 : e2m1_encode(y); }

// ---- E4M3 (e4m3fn) ----------------------------------------------------------------------------------
constexpr float kE4M3Max = 448.0f;
constexpr uint8_t kE4M3NaN = 0x7F;

// Value of an e4m3fn byte; 0x7F/0xFF decode to NaN. A lookup in a table of the 256 values.
float e4m3_decode(uint8_t code);
// Clamp to [-448, 448], then round to nearest even. NaN encodes as 0x7F.
uint8_t e4m3_encode(float x);
inline bool e4m3_is_nan(uint8_t code) { return (code & 0x7F) == 0x7F; }

// ---- bf16 / fp16 (bit patterns in uint16_t) ---------------------------------------------------------
// RNE; NaN stays NaN (quiet, sign kept). Inline: it sits in hot loops of the CPU executor.
inline uint16_t f32_to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_to_f32(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t f32_to_f16(float x);   // RNE, overflow to inf, subnormals exact
float f16_to_f32(uint16_t h);

// T(x): round an f32 to the model dtype T and back (F32: identity). T must be F32, F16 or BF16.
inline float round_to(DType t, float x) {
  if (t == DType::BF16) return bf16_to_f32(f32_to_bf16(x));
  if (t == DType::F16) return f16_to_f32(f32_to_f16(x));
  return x;
}
// The output rule of every linear (SPEC §5): y = T(T(acc) + bias), or T(acc) when bias is null.
inline float round_linear_output(DType t, float acc, const float* bias) {
  const float r = round_to(t, acc);
  return bias ? round_to(t, r + *bias) : r;
}
// Bit pattern of T(x) for a 16-bit T (F16 or BF16), and back.
inline uint16_t to_bits16(DType t, float x) { return t == DType::F16 ? f32_to_f16(x) : f32_to_bf16(x); }
inline float from_bits16(DType t, uint16_t b) { return t == DType::F16 ? f16_to_f32(b) : bf16_to_f32(b); }

// ---- packing (SPEC §1): element 2j is the LOW nibble of byte j ---------------------------------------
inline uint8_t pack_e2m1x2(uint8_t lo, uint8_t hi) { return static_cast<uint8_t>((lo & 0xF) | (hi << 4)); }
inline uint8_t get_e2m1(const uint8_t* row, int64_t k) {
  const uint8_t b = row[k >> 1];
  return (k & 1) ? static_cast<uint8_t>(b >> 4) : static_cast<uint8_t>(b & 0xF);
}

}  // namespace nvfp4
