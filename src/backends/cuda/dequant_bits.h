// The bit-level FP4 dequantization of the CUDA GEMM kernels, as constexpr functions (used by the kernels
// through nvcc --expt-relaxed-constexpr, and checked exhaustively on the host by the tests).
//
// Two E2M1 codes become the two halves of a bf16x2 / f16x2 register when their sign bits sit at bits 15 / 31
// and their 3 magnitude bits (e1 e0 m) in the low exponent / top mantissa bits of each half (bf16: 8 7 6,
// f16: 11 10 9): the value is exactly e2m1 · 2^kNibbleExp (code 1 = 0.5 becomes a subnormal of T, exact).
// Multiplying by the scale register S · 2^kScaleShift (exact in T for every finite E4M3 S) gives
// e2m1 · S · 2^-kProductShift, exact in T (at most 6 significant bits, no overflow, no underflow below T's
// subnormal spacing).
//
// The weight layout (weight_layout.h) stores the 8 codes of a lane's step word (fragment registers p = 0..3,
// values j = 0, 1) at the bit positions code_bits(bf16, p, j), chosen per activation type so that reg_bits
// brings register p into place with few integer operations: per step word 10 (bf16) or 9 (f16) instead of
// the 15-16 of a plain nibble layout, one mask for p = 0, a shift and a mask for p = 1, a mask, a multiply
// by 2^a + 2^b (two shifted copies whose bits never overlap, so the sum is their union) and a mask for the
// others (bf16 p = 3: two rotations and two masks).
#pragma once
#include <cstdint>
#include <cstring>
#include <cmath>

#include "common/dtype.h"

namespace nvfp4::cuda {

namespace detail {
// How the GEMM kernels dequantize the weights (activations are T in all three).
enum class Mode : int {
  Exact = 0,     // e2m1·S, exact in T (w4a16, w4a4)
  Vllm = 1,      // T(e2m1 · f32(S·D_w)) (w4a4-vllm), rounded per weight in f32
  VllmPow2 = 2,  // the same values times 2^τ, from two T values per block (vllm_weights.h; where its plan fits)
};
}  // namespace detail

// Bit positions, in a lane's 32-bit step word, of the sign, e1, e0 and m bits of value j of fragment register p.
struct CodeBits {
  int sign, e1, e0, m;
};
constexpr CodeBits code_bits(bool bf16, int p, int j) {
  if (bf16) {
    switch (p) {
      case 0: return j ? CodeBits{31, 24, 23, 22} : CodeBits{15, 8, 7, 6};
      case 1: return j ? CodeBits{28, 21, 20, 19} : CodeBits{12, 5, 4, 3};
      case 2: return j ? CodeBits{30, 18, 17, 16} : CodeBits{14, 2, 1, 0};
      default: return j ? CodeBits{29, 11, 10, 9} : CodeBits{13, 27, 26, 25};
    }
  }
  switch (p) {
    case 0: return j ? CodeBits{31, 27, 26, 25} : CodeBits{15, 11, 10, 9};
    case 1: return j ? CodeBits{28, 24, 23, 22} : CodeBits{12, 8, 7, 6};
    case 2: return j ? CodeBits{29, 21, 20, 19} : CodeBits{13, 5, 4, 3};
    default: return j ? CodeBits{30, 18, 17, 16} : CodeBits{14, 2, 1, 0};
  }
}
// The 4-bit code (value j of register p) read from a step word, and the word bits that store a code there.
constexpr uint32_t code_at(bool bf16, int p, int j, uint32_t w) {
  const CodeBits b = code_bits(bf16, p, j);
  return ((w >> b.m) & 1u) | ((w >> b.e0) & 1u) << 1 | ((w >> b.e1) & 1u) << 2 | ((w >> b.sign) & 1u) << 3;
}
constexpr uint32_t place_code(bool bf16, int p, int j, uint32_t code) {
  const CodeBits b = code_bits(bf16, p, j);
  return (code & 1u) << b.m | ((code >> 1) & 1u) << b.e0 | ((code >> 2) & 1u) << b.e1 | ((code >> 3) & 1u) << b.sign;
}

constexpr uint32_t kBf16RegMask = 0x81C081C0u, kF16RegMask = 0x8E008E00u;  // sign and e1 e0 m of both halves
// T's top mantissa bit in both halves (where a code's m bit lands in reg_bits).
constexpr uint32_t kBf16TopMantissa = 0x00400040u, kF16TopMantissa = 0x02000200u;
constexpr uint32_t rotl32(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }
// Fragment register p (0..3) of step word w in T's bits: e2m1 · 2^kNibbleExp in both halves. p is a
// compile-time constant in the kernels (unrolled loops), so the switch folds away.
constexpr uint32_t reg_bits(bool bf16, int p, uint32_t w) {
  if (bf16) {
    switch (p) {
      case 0: return w & kBf16RegMask;
      case 1: return (w << 3) & kBf16RegMask;
      case 2: return ((w & 0x40074007u) * 66u) & kBf16RegMask;  // (x << 1) + (x << 6)
      default: return (rotl32(w, 2) & 0x80008000u) | (rotl32(w, 13) & 0x01C001C0u);
    }
  }
  switch (p) {
    case 0: return w & kF16RegMask;
    case 1: return (w << 3) & kF16RegMask;
    case 2: return ((w & 0x20382038u) * 68u) & kF16RegMask;   // (x << 2) + (x << 6)
    default: return ((w & 0x40074007u) * 514u) & kF16RegMask;  // (x << 1) + (x << 9)
  }
}

// reg_bits with the bf16 layout's left shifts of registers 1 and 3 written as multiplies by mul8 = 8 and mul4 = 4
// (mod 2^32 the same bits: what a shift pushes past bit 31 is masked out either way). The kernels pass the two
// multipliers from constant memory, so that the compiler keeps them as multiplies, which run on the FMA pipe,
// instead of turning them back into shifts on the integer pipe (mma_frag.cuh's reg_bits_dev). A separate function
// rather than factor parameters of reg_bits: the three ways tried (reg_bits's shifts as multiplies by a literal 8
// and 4) scheduled the same operations differently, in the 18 kernels that use the multiplies or in 53-74 of
// gemm.cu's 150 kernels and 24 of the 53 wgmma kernels; this form keeps every kernel's measured SASS.
constexpr uint32_t reg_bits_mul(bool bf16, int p, uint32_t w, uint32_t mul8, uint32_t mul4) {
  if (bf16 && p == 1) return (w * mul8) & kBf16RegMask;
  if (bf16 && p == 3) return ((w * mul4) & 0x80008000u) | (rotl32(w, 13) & 0x01C001C0u);
  return reg_bits(bf16, p, w);
}

constexpr int kBf16NibbleExp = -126, kF16NibbleExp = -14;
constexpr int kBf16ScaleShift = 118, kF16ScaleShift = 7;
constexpr int kBf16ProductShift = kBf16ScaleShift + kBf16NibbleExp == -8 ? 8 : -1;
constexpr int kF16ProductShift = kF16ScaleShift + kF16NibbleExp == -7 ? 7 : -1;
static_assert(kBf16ProductShift == 8 && kF16ProductShift == 7, "product shift must match the two factors");

// The vLLM flavour's power-of-two form (vllm_weights.h; mma_frag.cuh's deq_reg and scale_regs): the register
// e2m1 · 2^kNibbleExp times 2^-kNibbleExp (the e2m1 value itself, code 0.5 a normal number), the block values
// T(f32(S·D_w))·2^σ with σ chosen per layer so that the largest lies in [2^kVllmTopExp, 2^(kVllmTopExp+1)), or
// below where that σ would take the kernels' f32 factor D_w·2^(σ - kE4m3FieldExp) out of range (vllm_weights.cpp).
constexpr int kVllmTopExp = 9;
// An e4m3 byte's exponent and mantissa bits placed in an f32's (bits 20-26, its sign at bit 31) read as
// S · 2^kE4m3FieldExp, exact (e4m3 subnormals become f32 subnormals).
constexpr int kE4m3FieldExp = -120;

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

// The value of y's E2M1 code, e2m1 value of e2m1_encode_bits(y), without the code (the quantize-dequantize
// kernels need only the value): |y| clamped to 6 (a), rounded to the E2M1 grid by adding and subtracting
// c = 1.5·2^22·p, p = 2^j the largest power of two <= max(a, 1) (j = 0, 1, 2 below 2, below 4, above: f32 spacing
// 2^(j-1) there, and c a whole even number of spacings, so the f32 addition's ties to even are the grid's), the
// sign of y put back (-0 for a negative y that rounds to zero), NaN -> +0. p is max(a, 1) without its mantissa bits
// and both steps are fmas of p and 1.5·2^22 (p·1.5·2^22 is exact, so the first rounds once like a + c, and the
// second, t - c, is exact): 8 operations against the encoder's 12, the decoder's 6 and the 10 of choosing c by
// two comparisons. Checked against the encoder and e2m1_decode for every f32 by the tests.
NVFP4_HD float e2m1_round_f32(float y) {
  uint32_t u;
  std::memcpy(&u, &y, 4);
  const float a = fminf(fabsf(y), 6.0f);
  const float a1 = fmaxf(a, 1.0f);
  uint32_t pb;
  std::memcpy(&pb, &a1, 4);
  pb &= 0xFF800000u;
  float p;
  std::memcpy(&p, &pb, 4);
#ifdef __CUDA_ARCH__
  const float r = __fmaf_rn(-p, 0x1.8p22f, __fmaf_rn(p, 0x1.8p22f, a));
#else
  const float r = std::fma(-p, 0x1.8p22f, std::fma(p, 0x1.8p22f, a));
#endif
  uint32_t rb;
  std::memcpy(&rb, &r, 4);
  rb |= u & 0x80000000u;
  float out;
  std::memcpy(&out, &rb, 4);
  return y == y ? out : 0.0f;
}

}  // namespace nvfp4::cuda
