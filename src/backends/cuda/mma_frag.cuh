// Device helpers shared by the fused GEMM kernels (gemm.cu, gemm_wgmma.cu): the m16n8k16 MMA, streaming
// loads, the in-register FP4 dequantization of weight_layout.h's fragments and the epilogue.
#pragma once
#include <type_traits>

#include "backends/cuda/cuda_util.cuh"
#include "backends/cuda/gemm.cuh"
#include "backends/cuda/weight_layout.h"

namespace nvfp4::cuda::detail {

template <typename T>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Streaming 16-byte load (weights are read once per call: keep them out of L1).
__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Shared-memory addresses and accesses at a shared::cta address (no generic-to-shared conversion per access).
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ uint4 lds128(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}
// Asynchronous 16-byte copy global -> shared (sm_80+), its groups and the wait for all but the
// kPending most recent groups of this thread (other lanes' copies: then __syncwarp).
// src_bytes 16, or 0 (nothing read, zeros written).
// Through L1 (.ca): the same times as L2 only (.cg) where measured (docs/PERF.md, change 81).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// prmt.b32 in its generic mode: each selector nibble picks a byte (bits 0-2) of {b, a} and, with bit 3 set,
// replicates that byte's sign bit instead.
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}

// The 16-bit pair s2 (both halves) as a register holding its low half twice and one holding its high half twice.
__device__ __forceinline__ void split_pair(uint32_t s2, uint32_t& lo, uint32_t& hi) {
  lo = prmt(s2, 0u, 0x1010u);
  hi = prmt(s2, 0u, 0x3232u);
}

// The two exact-mode scale registers of a weight chunk (the lane's 16-bit scale pair: row g in the low byte,
// row g+8 in the high byte), each S · 2^kScaleShift in both halves, with integer ops and exact T products
// instead of two f32 conversions: the e4m3 sign goes to bit 15 and its exponent/mantissa bits into T's
// exponent/mantissa fields, which reads as S · 2^-120 (bf16) or S · 2^-8 (f16), e4m3 subnormals becoming
// T subnormals, exact; power-of-two products then give S · 2^kScaleShift (bf16: 2^119 twice, f16: 2^15).
// Finite scales only (0x7F/0xFF would read as 480: weights with NaN scales are refused at load).
template <typename T>
__device__ __forceinline__ void exact_scale_pair(uint32_t sv, uint32_t& s_lo, uint32_t& s_hi) {
  using A = Act<T>;
  using T2 = typename A::T2;
  const uint32_t x = prmt(sv, 0u, 0x9180u);  // [S_g, sign(S_g) x8, S_g8, sign(S_g8) x8]
  T2 v;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    v = from_u32<T2>((x << 4) & 0x87F087F0u);
    const T2 k = from_u32<T2>(0x7B007B00u);  // 2^119
    v = __hmul2(__hmul2(v, k), k);
  } else {
    v = from_u32<T2>((x << 7) & 0xBF80BF80u);
    v = __hmul2(v, from_u32<T2>(0x78007800u));  // 2^15
  }
  static_assert(Act<__nv_bfloat16>::kScaleShift == 118 && Act<__half>::kScaleShift == 7,
                "exact_scale_pair's power-of-two factors assume these scale shifts");
  split_pair(as_u32(v), s_lo, s_hi);
}

// The multipliers (8, 4) of dequant_bits.h's reg_bits_mul, read from constant memory: with a literal power of two
// the compiler turns the multiplies back into shifts.
static __constant__ uint32_t kShiftMultipliers[2] = {8u, 4u};

// dequant_bits.h's reg_bits on the device; kFmaShifts: its reg_bits_mul form, which moves 2 of the bf16 layout's
// 10 integer operations per step word from the ALU pipe, which the decode kernels keep busy at the issue rate, to
// the FMA pipe (docs/PERF.md, change 93).
template <bool kBf16, bool kFmaShifts>
__device__ __forceinline__ uint32_t reg_bits_dev(int p, uint32_t w) {
  if constexpr (kFmaShifts) return reg_bits_mul(kBf16, p, w, kShiftMultipliers[0], kShiftMultipliers[1]);
  return reg_bits(kBf16, p, w);
}

// Fragment register p of step word q (dequant_bits.h), dequantized with its row's scale registers s2, sx
// (scale_regs): exact e2m1·S·2^-c; vLLM per weight T(e2m1 · f32(S·D_w)) in f32 (sx: the f32's bits); vLLM
// power-of-two form (vllm_weights.h) fma(v, Y, E·C) with v the code's value and E = v without its top
// mantissa bit (s2 = Y, sx = C). kFmaShifts: reg_bits_dev's form.
template <typename T, int kMode, bool kFmaShifts>
__device__ __forceinline__ uint32_t deq_reg(uint32_t q, int p, uint32_t s2, uint32_t sx) {
  using A = Act<T>;
  using T2 = typename A::T2;
  const T2 r = from_u32<T2>(reg_bits_dev<A::kBf16, kFmaShifts>(p, q));
  if constexpr (kMode == static_cast<int>(Mode::Exact)) {
    return as_u32(__hmul2(r, from_u32<T2>(s2)));
  } else {
    const T2 v = __hmul2(r, from_u32<T2>(A::nib_unit_bits()));  // e2m1, exact
    if constexpr (kMode == static_cast<int>(Mode::Vllm)) {
      const float f = __uint_as_float(sx);
      return as_u32(A::pack(__fmul_rn(A::to_f32(v, 0), f), __fmul_rn(A::to_f32(v, 1), f)));
    } else {
      const T2 e = from_u32<T2>(as_u32(v) & ~(A::kBf16 ? kBf16TopMantissa : kF16TopMantissa));
      return as_u32(__hfma2(v, from_u32<T2>(s2), __hmul2(e, from_u32<T2>(sx))));
    }
  }
}

// Power-of-two form (vllm_weights.h) of the two scale bytes of sv (row g low, g+8 high): with f = S·D_w·2^σ
// (w_dec = D_w·2^(σ+120): the scale enters as e4m3_field_f32, S·2^-120), a = T(f32(f)) and b2 = T(f32(3·f)),
// y = b2 - 2a and c = 3a - b2 as T pairs (row g in the low half), both exact.
template <typename T>
__device__ __forceinline__ void pow2_pair(uint32_t sv, float w_dec, uint32_t& y, uint32_t& c) {
  using A = Act<T>;
  using T2 = typename A::T2;
  const float f0 = __fmul_rn(e4m3_field_f32(sv), w_dec);
  const float f1 = __fmul_rn(e4m3_field_f32(sv >> 8), w_dec);
  const T2 a = A::pack(f0, f1);
  const T2 b2 = A::pack(__fmul_rn(f0, 3.0f), __fmul_rn(f1, 3.0f));
  const T2 two = from_u32<T2>(0x40004000u);                              // 2 in bf16 and f16
  const T2 three = from_u32<T2>(A::kBf16 ? 0x40404040u : 0x42004200u);  // 3
  y = as_u32(__hfma2(__hneg2(a), two, b2));    // b2 - 2a, exact
  c = as_u32(__hfma2(a, three, __hneg2(b2)));  // 3a - b2, exact
}

// One entry of a power-of-two table: the scale registers (y, c; both halves the same) of scale byte s8.
template <typename T>
__device__ __forceinline__ uint2 pow2_table_entry(uint32_t s8, float w_dec) {
  uint2 e;
  pow2_pair<T>(s8 | (s8 << 8), w_dec, e.x, e.y);
  return e;
}

// The scale registers of kNW weight tiles of one chunk (sv: the lane's 16-bit scale pairs, row g low, g+8 high),
// per row (index 0: g, 1: g+8): exact mode, S·2^kScaleShift in both halves of ws2; vLLM per weight, the bits
// of f32(S·w_dec) in wsx (w_dec = D_w); power-of-two form, pow2_pair's Y = b2 - 2a in ws2 and C = 3a - b2 in
// wsx, both halves.
template <typename T, int kMode, int kNW>
__device__ __forceinline__ void scale_regs(const uint32_t (&sv)[kNW], float w_dec, uint32_t (&ws2)[kNW][2],
                                           uint32_t (&wsx)[kNW][2]) {
  using A = Act<T>;
  using T2 = typename A::T2;
#pragma unroll
  for (int i = 0; i < kNW; ++i) {
    if constexpr (kMode == static_cast<int>(Mode::Exact)) {
      exact_scale_pair<T>(sv[i], ws2[i][0], ws2[i][1]);
      wsx[i][0] = wsx[i][1] = 0;
    } else if constexpr (kMode == static_cast<int>(Mode::Vllm)) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        ws2[i][h] = 0;
        wsx[i][h] = __float_as_uint(__fmul_rn(e4m3_to_f32((sv[i] >> (8 * h)) & 0xFF), w_dec));
      }
    } else {
      uint32_t y, c;
      pow2_pair<T>(sv[i], w_dec, y, c);
      split_pair(y, ws2[i][0], ws2[i][1]);
      split_pair(c, wsx[i][0], wsx[i][1]);
    }
  }
}

// The power-of-two form's scale registers from a block's table of them (pow2_table_entry for every scale byte,
// in shared memory): two 8-byte loads per tile instead of pow2_pair's conversions and products.
template <int kNW>
__device__ __forceinline__ void scale_regs_from_table(const uint32_t (&sv)[kNW], const uint2* tab,
                                                      uint32_t (&ws2)[kNW][2], uint32_t (&wsx)[kNW][2]) {
#pragma unroll
  for (int i = 0; i < kNW; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint2 e = tab[(sv[i] >> (8 * h)) & 0xFF];
      ws2[i][h] = e.x;
      wsx[i][h] = e.y;
    }
  }
}

// The four A-fragment registers of MMA step s from that step's code word q of one tile (kFmaShifts: see
// reg_bits_dev).
template <typename T, int kMode, bool kFmaShifts = false>
__device__ __forceinline__ void dequant_step(uint32_t q, const uint32_t (&ws2)[2], const uint32_t (&wsx)[2],
                                             uint32_t (&a)[4]) {
#pragma unroll
  for (int pp = 0; pp < 4; ++pp) a[pp] = deq_reg<T, kMode, kFmaShifts>(q, pp, ws2[pp & 1], wsx[pp & 1]);
}

// The output of every GEMM kernel: y[tok, n] = T(T(sum · out_scale) + bias[n]) (y_value: that value; store_y
// writes it).
template <typename T>
__device__ __forceinline__ T y_value(const GemmParams& p, int n, float sum) {
  using A = Act<T>;
  T out = A::one(__fmul_rn(sum, p.out_scale));
  if (p.bias) out = A::one(__fadd_rn(A::back(out), p.bias[n]));
  return out;
}
template <typename T>
__device__ __forceinline__ void store_y(const GemmParams& p, int64_t tok, int n, float sum) {
  static_cast<T*>(p.y)[tok * p.n + n] = y_value<T>(p, n, sum);
}

// Epilogue of one tile group: store_y for the rows and tokens inside the output.
template <typename T, int kNT, int kNW>
__device__ __forceinline__ void store_tiles(const GemmParams& p, int tile0, int64_t m0,
                                            const float (&acc)[kNW][kNT][4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int i = 0; i < kNW; ++i)
#pragma unroll
    for (int j = 0; j < kNT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int n = (tile0 + i) * 16 + g + 8 * (e >> 1);
        const int64_t tok = m0 + 8 * j + 2 * t + (e & 1);
        if (tile0 + i >= p.n16 || n >= p.n || tok >= p.m) continue;
        store_y<T>(p, tok, n, acc[i][j][e]);
      }
}

// The epilogues other than storing y (format/quant.h's Epilogue) of one tile group whose sums the warp has put in
// shared memory, slot[(i·kNT + j)·4 + e][lane] for acc[i][j][e], in a loop that is not unrolled, so that the f64 silu
// runs with few registers live (the kernels are at their 80- and 128-register budgets).
//   p.swiglu: rows of gate and up interleaved in blocks of 8 (interleave_linear_outputs), so a lane holds row g of
//     a tile, the gate of feature 8·tile + g, and row g + 8, its up; y (m, N/2) gets swiglu_value of the two outputs;
//   p.residual: residual[tok, n] = residual_value(residual[tok, n], y value).
template <typename T, int kNT, int kNW>
__device__ __forceinline__ void store_epilogue_tiles(const GemmParams& p, int tile0, int64_t m0,
                                                     const float (*slot)[32]) {
  using A = Act<T>;
  const auto round_t = [](float x) { return A::back(A::one(x)); };
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  if (p.swiglu) {
#pragma unroll 1
    for (int q = 0; q < kNW * kNT * 2; ++q) {
      const int i = q / (2 * kNT), j = q / 2 % kNT, e = q % 2;
      const int row = (tile0 + i) * 16 + g;  // the gate's row; its up 8 rows further (p.n % 16 == 0)
      const int64_t tok = m0 + 8 * j + 2 * t + e;
      if (tile0 + i >= p.n16 || tok >= p.m) continue;
      const float gate = A::back(y_value<T>(p, row, slot[(i * kNT + j) * 4 + e][lane]));
      const float up = A::back(y_value<T>(p, row + 8, slot[(i * kNT + j) * 4 + e + 2][lane]));
      static_cast<T*>(p.y)[tok * (p.n / 2) + (tile0 + i) * 8 + g] = A::one(swiglu_value(gate, up, round_t));
    }
    return;
  }
#pragma unroll 1
  for (int q = 0; q < kNW * kNT * 4; ++q) {
    const int i = q / (4 * kNT), j = q / 4 % kNT, e = q % 4;
    const int n = (tile0 + i) * 16 + g + 8 * (e >> 1);
    const int64_t tok = m0 + 8 * j + 2 * t + (e & 1);
    if (tile0 + i >= p.n16 || n >= p.n || tok >= p.m) continue;
    float& r = p.residual[tok * p.n + n];
    r = residual_value(r, A::back(y_value<T>(p, n, slot[q][lane])), round_t);
  }
}

}  // namespace nvfp4::cuda::detail
