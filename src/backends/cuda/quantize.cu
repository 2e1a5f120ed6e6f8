// Run-time activation quantizer (SPEC §4), bit-exact with format/quant.h's quantize_activations: every
// f32 operation is an explicitly rounded intrinsic (no FMA contraction), the reciprocals are IEEE
// divisions, and E2M1/E4M3 rounding is done in software (sm_90 has no FP4 convert instruction).
#include "backends/cuda/cuda_util.cuh"
// (cuda_util.cuh first: it makes format/swizzle.h's inline functions callable from device code.)
#include "backends/cuda/quantize.cuh"
#include "backends/cuda/weight_layout.h"

namespace nvfp4::cuda::detail {
namespace {

template <typename T, bool kSwizzled, bool kFragment>
__global__ void __launch_bounds__(256) quantize_kernel(const T* __restrict__ x, int64_t m, int64_t k,
                                                       float gs, float inv_gs, uint8_t* __restrict__ codes,
                                                       uint8_t* __restrict__ scales, int64_t rows_p,
                                                       int64_t cols_p) {
  using A = Act<T>;
  const int64_t groups = k / 16;
  const int64_t gcols = kSwizzled ? cols_p : groups;       // groups per row covered by the grid
  const int64_t rows = kSwizzled ? rows_p : m;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * gcols) return;
  const int64_t r = idx / gcols, grp = idx % gcols;
  if (r >= m || grp >= groups) {  // swizzled padding: written 0
    if (kSwizzled) scales[swizzled_offset(r, grp, cols_p)] = 0;
    return;
  }
  const uint4* src = reinterpret_cast<const uint4*>(x + r * k + grp * 16);
  uint4 raw[2] = {src[0], src[1]};
  const typename A::T2* v2 = reinterpret_cast<const typename A::T2*>(raw);
  float v[16];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    v[2 * i] = A::to_f32(v2[i], 0);
    v[2 * i + 1] = A::to_f32(v2[i], 1);
  }
  float vmax = 0.0f;
#pragma unroll
  for (int i = 0; i < 16; ++i) vmax = fmaxf(vmax, fabsf(v[i]));
  const float prod = __fmul_rn(gs, __fmul_rn(vmax, __uint_as_float(0x3E2AAAABu)));
  const uint32_t s8 = e4m3_from_f32_pos(fminf(prod, 448.0f));
  const float s8f = e4m3_to_f32(s8);
  const float os = s8 == 0 ? 0.0f : __fdiv_rn(1.0f, __fmul_rn(s8f, inv_gs));
  uint32_t w[2] = {0, 0};
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const uint32_t c = e2m1_from_f32(__fmul_rn(v[i], os));
    if (kFragment) {
      w[activation_word(i)] |= c << (4 * activation_slot(i));
    } else {
      w[i / 8] |= c << (4 * (i % 8));
    }
  }
  *reinterpret_cast<uint2*>(codes + r * (k / 2) + grp * 8) = make_uint2(w[0], w[1]);
  if (kSwizzled) scales[swizzled_offset(r, grp, cols_p)] = static_cast<uint8_t>(s8);
  else scales[r * groups + grp] = static_cast<uint8_t>(s8);
}

template <typename T>
void launch_t(const void* x, int64_t m, int64_t k, float gs, uint8_t* codes, uint8_t* scales, ScaleLayout layout,
              CodeOrder order, cudaStream_t stream) {
  const float inv_gs = 1.0f / gs;
  const int64_t groups = k / 16;
  const bool sw = layout == ScaleLayout::Swizzled128x4;
  const int64_t rows_p = sw ? swizzled_rows(m) : m, cols_p = sw ? swizzled_cols(groups) : groups;
  const int64_t total = rows_p * cols_p;
  const int threads = 256;
  const unsigned blocks = static_cast<unsigned>(ceil_div(total, threads));
  const T* xt = static_cast<const T*>(x);
  if (order == CodeOrder::Fragment) {
    quantize_kernel<T, false, true><<<blocks, threads, 0, stream>>>(xt, m, k, gs, inv_gs, codes, scales, m, groups);
  } else if (sw) {
    quantize_kernel<T, true, false><<<blocks, threads, 0, stream>>>(xt, m, k, gs, inv_gs, codes, scales, rows_p,
                                                                    cols_p);
  } else {
    quantize_kernel<T, false, false><<<blocks, threads, 0, stream>>>(xt, m, k, gs, inv_gs, codes, scales, m,
                                                                     groups);
  }
  NVFP4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

bool has_kernel_image(int device) {
  int prev = 0;
  if (cudaGetDevice(&prev) != cudaSuccess || cudaSetDevice(device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  cudaFuncAttributes attr{};
  const cudaError_t e = cudaFuncGetAttributes(
      &attr, reinterpret_cast<const void*>(&quantize_kernel<__nv_bfloat16, false, false>));
  cudaSetDevice(prev);
  cudaGetLastError();
  return e == cudaSuccess;
}

void launch_quantize(const void* x, DType act, int64_t m, int64_t k, float gs_enc, uint8_t* codes,
                     uint8_t* scales, ScaleLayout layout, CodeOrder order, cudaStream_t stream) {
  if (act == DType::BF16) launch_t<__nv_bfloat16>(x, m, k, gs_enc, codes, scales, layout, order, stream);
  else launch_t<__half>(x, m, k, gs_enc, codes, scales, layout, order, stream);
}

}  // namespace nvfp4::cuda::detail

namespace nvfp4::cuda {

void quantize_activations(const void* x, DType act, int64_t m, int64_t k, float gs_enc, uint8_t* codes,
                          uint8_t* scales, ScaleLayout layout, void* stream) {
  NVFP4_CHECK(act == DType::BF16 || act == DType::F16,
              std::string("cuda quantize_activations: activation dtype ") + dtype_name(act) +
                  ", expected BF16 or F16");
  NVFP4_CHECK(m >= 0, "cuda quantize_activations: negative row count " + std::to_string(m));
  NVFP4_CHECK(k > 0 && k % 16 == 0,
              "cuda quantize_activations: k = " + std::to_string(k) + ", expected a positive multiple of 16");
  NVFP4_CHECK(gs_enc > 0.0f && gs_enc < 3.4e38f,
              "cuda quantize_activations: input global scale " + std::to_string(gs_enc) +
                  ", expected a finite positive value");
  if (m == 0) return;
  NVFP4_CHECK(x && codes && scales, "cuda quantize_activations: null pointer argument");
  NVFP4_CHECK(reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(codes) % 8 == 0,
              "cuda quantize_activations: x must be 16-byte and codes 8-byte aligned");
  detail::launch_quantize(x, act, m, k, gs_enc, codes, scales, layout, detail::CodeOrder::Linear,
                          static_cast<cudaStream_t>(stream));
}

}  // namespace nvfp4::cuda
