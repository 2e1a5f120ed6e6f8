// Shared device-side helpers of the CUDA executor: error checks (cuda_check.h), the NVFP4 codecs as bit
// operations, and format/swizzle.h (callable from device code).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "backends/cuda/dequant_bits.h"
#include "common/error.h"

#include "backends/cuda/cuda_check.h"
#include "format/swizzle.h"  // host/device inline functions under nvcc

namespace nvfp4::cuda::detail {

// e4m3 (e4m3fn) byte (the low 8 bits of code) -> S · 2^kE4m3FieldExp as an f32, exact (dequant_bits.h); NaN
// codes read as 480 · 2^kE4m3FieldExp.
__device__ __forceinline__ float e4m3_field_f32(uint32_t code) {
  static_assert(kE4m3FieldExp == -120, "the e4m3 fields start at f32 bit 20");
  return __uint_as_float(((code & 0x7F) << 20) | ((code & 0x80) << 24));
}

// e4m3 (e4m3fn) byte -> f32, exact; 0x7F/0xFF -> NaN (e4m3_field_f32, then the multiply restores the value).
__device__ __forceinline__ float e4m3_to_f32(uint32_t code) {
  const uint32_t c = code & 0x7F;
  float v = __fmul_rn(e4m3_field_f32(c), 0x1p120f);
  if (c == 0x7F) v = __uint_as_float(0x7FC00000u);
  return (code & 0x80) ? -v : v;
}

// Non-negative f32 (already clamped to <= 448) -> e4m3 with round to nearest even; NaN -> 0x7F. In integer
// operations (sm_80, which has no FP8 convert instruction; and the reference of the one below).
__device__ __forceinline__ uint32_t e4m3_from_f32_pos_int(float x) {
  if (!(x == x)) return 0x7F;
  if (x < 0.015625f) return static_cast<uint32_t>(__float2int_rn(__fmul_rn(x, 512.0f)));  // m · 2^-9
  const uint32_t b = __float_as_uint(x);
  const uint32_t r = (b + 0x7FFFFu + ((b >> 20) & 1u)) >> 20;
  return r - (120u << 3);
}
// The same, on sm_89+ by the convert instruction (round to nearest even, saturating to 448, NaN -> 0x7F: equal
// to the integer form for every non-negative f32 up to 448 and NaN, which a GPU test checks for each of them).
__device__ __forceinline__ uint32_t e4m3_from_f32_pos(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(x));  // x in the low byte
  return r & 0xFFu;
#else
  return e4m3_from_f32_pos_int(x);
#endif
}

// E2M1 encoding: e2m1_encode_bits (dequant_bits.h, checked on the host for every f32); the value of the code
// without the code: e2m1_round_f32 (likewise).

// E2M1 code (low 4 bits) -> f32, exact.
__device__ __forceinline__ float e2m1_to_f32(uint32_t code) {
  const float m = static_cast<float>((0xC8643210u >> (4 * (code & 7))) & 0xF) * 0.5f;
  return (code & 8) ? -m : m;
}

// ---- 16-bit activation types -----------------------------------------------------------------------
template <typename T> struct Act;
template <> struct Act<__nv_bfloat16> {
  using T2 = __nv_bfloat162;
  static constexpr bool kBf16 = true;  // reg_bits (dequant_bits.h) gives e2m1 · 2^-126
  static constexpr int kScaleShift = kBf16ScaleShift;  // scale register = S · 2^118 -> product e2m1·S·2^-8
  static __device__ __forceinline__ float to_f32(T2 v, int hi) {
    return hi ? __high2float(v) : __low2float(v);
  }
  static __device__ __forceinline__ T2 pack(float lo, float hi) { return __floats2bfloat162_rn(lo, hi); }
  static __device__ __forceinline__ __nv_bfloat16 one(float v) { return __float2bfloat16_rn(v); }
  static __device__ __forceinline__ float back(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ uint32_t nib_unit_bits() { return 0x7E807E80u; }  // (2^126, 2^126)
};
template <> struct Act<__half> {
  using T2 = __half2;
  static constexpr bool kBf16 = false;  // reg_bits gives e2m1 · 2^-14 (0.5 becomes the subnormal 2^-15, exact)
  static constexpr int kScaleShift = kF16ScaleShift;  // scale register = S · 2^7 -> product e2m1·S·2^-7 (<= 21)
  static __device__ __forceinline__ float to_f32(T2 v, int hi) {
    return hi ? __high2float(v) : __low2float(v);
  }
  static __device__ __forceinline__ T2 pack(float lo, float hi) { return __floats2half2_rn(lo, hi); }
  static __device__ __forceinline__ __half one(float v) { return __float2half_rn(v); }
  static __device__ __forceinline__ float back(__half v) { return __half2float(v); }
  static __device__ __forceinline__ uint32_t nib_unit_bits() { return 0x74007400u; }  // (2^14, 2^14)
};

__device__ __forceinline__ uint32_t as_u32(__nv_bfloat162 v) { return *reinterpret_cast<uint32_t*>(&v); }
__device__ __forceinline__ uint32_t as_u32(__half2 v) { return *reinterpret_cast<uint32_t*>(&v); }
template <typename T2> __device__ __forceinline__ T2 from_u32(uint32_t u) { return *reinterpret_cast<T2*>(&u); }

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The decoder's two elementwise steps that a linear's kernel can also apply to its outputs (format/quant.h's
// Epilogue), for values of T, with round_t rounding an f32 to T. The model's GPU ops (cuda_ops::silu_mul,
// residual_add) and the decode kernel's epilogues both compute them here, so the two give the same bits.
// SwiGLU of one feature, T(T(silu(g)) · u) (llama.h): silu in f64, rounded to f32, then to T.
template <typename Round>
__device__ __forceinline__ float swiglu_value(float g, float u, Round round_t) {
  const double gv = g;
  const float s = round_t(static_cast<float>(gv / (1.0 + exp(-gv))));
  return round_t(__fmul_rn(s, u));
}
// The residual stream's update T(x + y).
template <typename Round>
__device__ __forceinline__ float residual_value(float x, float y, Round round_t) {
  return round_t(__fadd_rn(x, y));
}

// Programmatic dependent launch (sm_90+; no-ops below): a kernel launched with the programmatic-serialization
// attribute may start while the previous kernel in the stream still runs, once every block of that kernel
// has called pdl_launch_dependents (or exited); pdl_wait blocks until the previous kernel has completed and
// its memory is visible. A kernel launched without the attribute returns from pdl_wait at once. Which launches
// carry the attribute: device_info.h's programmatic_launch_supported.
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Raises kKernel's dynamic shared-memory limit on the current device to `bytes` (launches above 48 KB need it)
// the first time a launch there asks for that much; later launches only read a per-device flag.
template <auto kKernel>
void raise_dynamic_smem_limit(int bytes) {
  static std::atomic<int> raised[64];  // per device: the limit set so far; zero-initialized (static storage)
  int dev = 0;
  NVFP4_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 64 && raised[dev].load(std::memory_order_acquire) >= bytes) return;
  NVFP4_CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  if (dev < 64) raised[dev].store(bytes, std::memory_order_release);
}

// kernel<<<grid, block, smem, stream>>>(args...), launched with the programmatic-serialization attribute when
// `programmatic` (sm_90+): the kernel must pdl_wait before it reads what earlier kernels write or writes what
// they read.
template <typename... P, typename... A>
void launch_maybe_programmatic(bool programmatic, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                               cudaStream_t stream, A&&... args) {
  if (!programmatic) {
    kernel<<<grid, block, smem, stream>>>(std::forward<A>(args)...);
    return;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  NVFP4_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...));
}

}  // namespace nvfp4::cuda::detail
