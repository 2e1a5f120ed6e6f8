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

}  // namespace nvfp4::cuda
