// The bit-level FP4 dequantization of the CUDA GEMM kernels, as constexpr functions (used by the kernels
// through nvcc --expt-relaxed-constexpr, and checked exhaustively on the host by the tests).
//
// Two E2M1 codes at bits 12..15 and 28..31 of a word become the two halves of a bf16x2 / f16x2 register by
// moving the 3 magnitude bits into the low exponent / top mantissa bits and keeping the sign bit: the value
// is exactly e2m1 · 2^kNibbleExp (code 1 = 0.5 becomes a subnormal of T, exact). Multiplying by the scale
// register S · 2^kScaleShift (exact in T for every finite E4M3 S) gives e2m1 · S · 2^-kProductShift, exact
// in T (at most 6 significant bits, no overflow, no underflow below T's subnormal spacing).
#pragma once
#include <cstdint>
#include <cstring>
#include <cmath>

#include "common/dtype.h"

namespace nvfp4::cuda {

constexpr uint32_t bf16x2_nibble_bits(uint32_t q) { return (q & 0x80008000u) | ((q & 0x70007000u) >> 6); }
constexpr uint32_t f16x2_nibble_bits(uint32_t q) { return (q & 0x80008000u) | ((q & 0x70007000u) >> 3); }

constexpr int kBf16NibbleExp = -126, kF16NibbleExp = -14;
constexpr int kBf16ScaleShift = 118, kF16ScaleShift = 7;
constexpr int kBf16ProductShift = kBf16ScaleShift + kBf16NibbleExp == -8 ? 8 : -1;
constexpr int kF16ProductShift = kF16ScaleShift + kF16NibbleExp == -7 ? 7 : -1;
static_assert(kBf16ProductShift == 8 && kF16ProductShift == 7, "product shift must match the two factors");

// 2^kProductShift of the activation type: the f32 factor that undoes the shift after accumulation.
constexpr float product_unshift(DType t) {
  return t == DType::BF16 ? static_cast<float>(1u << kBf16ProductShift) : static_cast<float>(1u << kF16ProductShift);
}

#ifdef __CUDACC__
#define NVFP4_HD __host__ __device__ __forceinline__
#else
#define NVFP4_HD inline
#endif

// SPEC §1 E2M1 encoding of an f32 (round to nearest even, |y| > 5 -> 6, NaN -> code 0), with integer
// operations instead of seven comparisons: |y| >= 1 rounds the f32 mantissa to one bit (the exponent and that
// bit, counted from 1.0, are the code); |y| < 1 is RNE(2|y|) in {0, 1, 2}, one f32 fma against 2^23.
// Checked against the comparison form for all 2^32 inputs by the host test.
NVFP4_HD uint32_t e2m1_encode_bits(float y) {
  uint32_t u;
  std::memcpy(&u, &y, 4);
  const uint32_t b = u & 0x7FFFFFFFu;
  const uint32_t r = (b + 0x1FFFFFu + ((b >> 22) & 1u)) >> 22;  // (exponent << 1 | mantissa bit), rounded
  const uint32_t hi = r - 252u < 7u ? r - 252u : 7u;               // 1.0 -> 2; clamp at 6 -> 7
  float lo_f;
#ifdef __CUDA_ARCH__
  lo_f = __fmaf_rn(__uint_as_float(b), 2.0f, 8388608.0f);
#else
  float a;
  std::memcpy(&a, &b, 4);
  lo_f = std::fma(a, 2.0f, 8388608.0f);
#endif
  uint32_t lo;
  std::memcpy(&lo, &lo_f, 4);
  lo -= 0x4B000000u;  // RNE(2|y|) for |y| < 1
  const uint32_t mag = b >= 0x3F800000u ? hi : lo;
  return b > 0x7F800000u ? 0u : (mag | ((u >> 28) & 8u));
}

}  // namespace nvfp4::cuda
