// Device functions of the run-time activation quantizer (SPEC §4) shared by its kernels (quantize.cu) and by
// the decode GEMM that quantizes a one-token row itself (gemm.cu). Every f32 operation is an explicitly
// rounded intrinsic (no FMA contraction), the reciprocals are IEEE divisions, E4M3 rounding is the convert
// instruction on sm_89+ (integer operations below) and E2M1 rounding is done in software (sm_90 has no FP4
// convert instruction): bit-exact with format/quant.h's quantize_activations.
#pragma once
#include "backends/cuda/cuda_util.cuh"
#include "backends/cuda/quantize.cuh"

namespace nvfp4::cuda::detail {

// The f32 values of kN consecutive T values (kN / 8 16-byte vectors, or one 8-byte vector for kN = 4); bf16 by
// one integer operation per value (the high half masked, not moved down and back up).
template <typename T, int kN, typename V>
__device__ __forceinline__ void to_f32s(const V* raw, float (&v)[kN]) {
  using A = Act<T>;
  const typename A::T2* v2 = reinterpret_cast<const typename A::T2*>(raw);
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) {
    if constexpr (A::kBf16) {
      const uint32_t w = as_u32(v2[i]);
      v[2 * i] = __uint_as_float(w << 16);
      v[2 * i + 1] = __uint_as_float(w & 0xFFFF0000u);
    } else {
      v[2 * i] = A::to_f32(v2[i], 0);
      v[2 * i + 1] = A::to_f32(v2[i], 1);
    }
  }
}

// A group's E4M3 scale byte from its largest magnitude vmax (NaNs ignored; SPEC §4 step 2).
__device__ __forceinline__ uint32_t group_scale_byte(float vmax, float gs) {
  const float prod = __fmul_rn(gs, __fmul_rn(vmax, __uint_as_float(0x3E2AAAABu)));
  return e4m3_from_f32_pos(fminf(prod, 448.0f));
}

// f32(1 / f32(s · inv_gs)) for a group's scale byte s8 (SPEC §4 step 3; 0 for a zero scale): the factor that
// takes the group's values to E2M1.
__device__ __forceinline__ float scale_reciprocal(uint32_t s8, float inv_gs) {
  return s8 == 0 ? 0.0f : __fdiv_rn(1.0f, __fmul_rn(e4m3_to_f32(s8), inv_gs));
}

// A group's scale byte, and os = scale_reciprocal of it.
__device__ __forceinline__ uint32_t group_scale(float vmax, float gs, float inv_gs, float& os) {
  const uint32_t s8 = group_scale_byte(vmax, gs);
  os = scale_reciprocal(s8, inv_gs);
  return s8;
}

// The dequantized value the W4A4 GEMMs multiply: exact e2m1 · sx, or the vLLM flavour's T(e2m1 · f32(sx / gs))
// (sc: dequant_factor's sx, or f32(sx / gs), of the group's scale byte s8).
template <bool kVllm>
__device__ __forceinline__ float dequant_factor(uint32_t s8, float gs) {
  const float s = e4m3_to_f32(s8);
  return kVllm ? __fdiv_rn(s, gs) : s;
}
template <typename T>
__device__ __forceinline__ T dequant_value(uint32_t code, float sc) {
  return Act<T>::one(__fmul_rn(e2m1_to_f32(code), sc));
}

// The two factors of every scale byte a group can get (0 .. 0x7F: the scale is non-negative; 0x7F is NaN):
// (os, sc) = (scale_reciprocal, dequant_factor). They depend on the layer's input global scale only, so a W4A4
// layer makes a table of them at load (launch_group_factor_table: 1 KB of device memory), which the decode kernel's
// own quantization (gemm.cu) reads through L1 instead of filling a table in shared memory before a barrier.
template <bool kVllm>
__device__ __forceinline__ float2 group_factors(uint32_t s8, float gs, float inv_gs) {
  return make_float2(scale_reciprocal(s8, inv_gs), dequant_factor<kVllm>(s8, gs));
}
// The calling warp asks for the table's 1 KB in L1 (issued before a grid-dependency wait, so that the reads after
// it hit). Returns a token that must reach group_factor_sink after the wait (a load whose value is never used is
// dropped). The same from `prefetch.global.L1` (no value) made the decode kernels 2-2.5x slower at M = 1
// (docs/PERF.md, change 100).
__device__ __forceinline__ float prefetch_group_factors(const float2* tab) {
  const unsigned lane = threadIdx.x & 31;
  float v;  // one f32 per 32-byte sector: lane i's sector i of the table's 1 KB
  asm volatile("ld.global.nc.f32 %0, [%1];" : "=f"(v) : "l"(tab + 4 * lane));
  return v;
}
// Keeps the token's load: a store that never happens (gs > 0), which the compiler cannot drop.
__device__ __forceinline__ void group_factor_sink(float token, float gs, float* never) {
  if (gs < 0.0f) *never = token;
}

// Quantize-dequantize, in place, of a group of 16 values spread over kLanes aligned consecutive lanes (lanes
// kLanes·i .. kLanes·i + kLanes - 1, kN = 16 / kLanes values each, in any order): each value becomes dequant_value
// of its code (e2m1_round_f32 gives the codes' values), with the group's factors from `factors(s8)`
// (group_factors, or a table of them). The group's largest magnitude is the maximum of the lanes' (fmaxf is exact
// and order-free on magnitudes, and NaNs are ignored either way), so scales and codes equal a one-lane
// quantization's. Every lane of the warp must call it (the shuffles); a group outside the data passes zeros (and
// gets zeros).
template <int kN, int kLanes, typename F>
__device__ __forceinline__ void lanes_quant_dequant(float (&v)[kN], float gs, F factors) {
  static_assert(kN * kLanes == 16, "a group is 16 values");
  float vmax = 0.0f;
#pragma unroll
  for (int i = 0; i < kN; ++i) vmax = fmaxf(vmax, fabsf(v[i]));
#pragma unroll
  for (int d = 1; d < kLanes; d <<= 1) vmax = fmaxf(vmax, __shfl_xor_sync(0xFFFFFFFFu, vmax, d));
  const float2 f = factors(group_scale_byte(vmax, gs));
#pragma unroll
  for (int i = 0; i < kN; ++i) v[i] = __fmul_rn(e2m1_round_f32(__fmul_rn(v[i], f.x)), f.y);
}

// The same on kN / 2 words of T pairs (kN values of one group per lane, kLanes lanes), returned in T.
template <typename T, int kN, int kLanes, typename F>
__device__ __forceinline__ void lanes_quant_dequant_words(uint32_t* words, float gs, F factors) {
  float v[kN];
  to_f32s<T>(reinterpret_cast<const uint32_t*>(words), v);
  lanes_quant_dequant<kN, kLanes>(v, gs, factors);
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) words[i] = as_u32(Act<T>::pack(v[2 * i], v[2 * i + 1]));
}

// Four values per lane, four lanes per group: this lane's four dequantized values.
template <typename T, typename F>
__device__ __forceinline__ uint2 quad_quant_dequant(uint2 raw, float gs, F factors) {
  uint32_t w[2] = {raw.x, raw.y};
  lanes_quant_dequant_words<T, 4, 4>(w, gs, factors);
  return make_uint2(w[0], w[1]);
}

}  // namespace nvfp4::cuda::detail
