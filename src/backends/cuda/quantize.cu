// Run-time activation quantizer (SPEC §4), bit-exact with format/quant.h's quantize_activations (the
// arithmetic: quantize_dev.cuh).
#include "backends/cuda/cuda_util.cuh"
#include "backends/cuda/quantize.cuh"
#include "backends/cuda/quantize_dev.cuh"

namespace nvfp4::cuda::detail {
namespace {

// Quantizes one group of 16 values: returns the E4M3 scale byte and the two code words (linear nibble order).
template <typename T>
__device__ __forceinline__ uint32_t quantize_group(const uint4 (&raw)[2], float gs, float inv_gs, uint32_t (&w)[2]) {
  float v[16];
  to_f32s<T>(raw, v);
  float vmax = 0.0f;
#pragma unroll
  for (int i = 0; i < 16; ++i) vmax = fmaxf(vmax, fabsf(v[i]));
  float os;
  const uint32_t s8 = group_scale(vmax, gs, inv_gs, os);
  w[0] = 0;
  w[1] = 0;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    w[i / 8] |= e2m1_encode_bits(__fmul_rn(v[i], os)) << (4 * (i % 8));
  }
  return s8;
}

// Two consecutive groups at src (four 16-byte vectors, all loaded before the arithmetic): their 16 code bytes
// in w; returns their two scale bytes, the first in the low byte.
template <typename T>
__device__ __forceinline__ uint32_t quantize_pair(const uint4* src, float gs, float inv_gs, uint4& w) {
  const uint4 raw[2][2] = {{src[0], src[1]}, {src[2], src[3]}};
  uint32_t w0[2], w1[2];
  const uint32_t s0 = quantize_group<T>(raw[0], gs, inv_gs, w0);
  const uint32_t s1 = quantize_group<T>(raw[1], gs, inv_gs, w1);
  w = make_uint4(w0[0], w0[1], w1[0], w1[1]);
  return s0 | (s1 << 8);
}

// One group at src (two 16-byte vectors): its 8 code bytes in w; returns its scale byte.
template <typename T>
__device__ __forceinline__ uint32_t quantize_one(const uint4* src, float gs, float inv_gs, uint2& w) {
  const uint4 raw[2] = {src[0], src[1]};
  uint32_t ww[2];
  const uint32_t s8 = quantize_group<T>(raw, gs, inv_gs, ww);
  w = make_uint2(ww[0], ww[1]);
  return s8;
}

// Linear scales: each thread quantizes two consecutive groups of the flattened (m·k/16) group sequence (x,
// codes and scales are all contiguous in it). wide: codes 16-byte and scales 2-byte aligned. 40 registers, 6
// blocks per SM, as the swizzled kernel below.
template <typename T>
__global__ void __launch_bounds__(256, 6) quantize_linear_kernel(const T* __restrict__ x, int64_t total, float gs,
                                                                 float inv_gs, uint8_t* __restrict__ codes,
                                                                 uint8_t* __restrict__ scales, bool wide) {
  const int64_t g0 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 2;
  if (g0 >= total) return;
  const uint4* src = reinterpret_cast<const uint4*>(x) + g0 * 2;
  if (g0 + 2 <= total && wide) {
    uint4 w;
    const uint32_t s2 = quantize_pair<T>(src, gs, inv_gs, w);
    *reinterpret_cast<uint4*>(codes + g0 * 8) = w;
    *reinterpret_cast<uint16_t*>(scales + g0) = static_cast<uint16_t>(s2);
    return;
  }
  for (int gi = 0; gi < 2 && g0 + gi < total; ++gi) {  // tail, or unaligned outputs
    uint2 w;
    const uint32_t s8 = quantize_one<T>(src + 2 * gi, gs, inv_gs, w);
    *reinterpret_cast<uint2*>(codes + (g0 + gi) * 8) = w;
    scales[g0 + gi] = static_cast<uint8_t>(s8);
  }
}

// Swizzled scales: block (r, y) covers row r of the padded layout, group columns 512y .. 512y+511; its thread i
// quantizes groups c = 512y + 2i and c + 1 (a pair inside one 4-column quad of the layout) as the linear kernel
// does and writes their two scale bytes as one 16-bit store at their swizzled place; rows m .. rows_p-1 and
// columns groups .. cols_p-1 (the padding) get scale 0. Capped at 40 registers (6 blocks per SM, the linear
// kernel's occupancy). 8192x8192 bf16: 68.8-68.9 µs (2.50 TB/s) against 74.5-74.9 for the earlier kernel (a
// block per 128 rows and 8 columns, 4 groups per thread, the scale bytes gathered into whole 512-byte blocks in
// shared memory: 69 registers, 3 blocks per SM), 69.9-70.2 without the cap (56 registers), 70.1-70.4 with
// 8-row blocks that gather whole 32-byte scale sectors in shared memory (docs/PERF.md, change 57). wide: codes
// 16-byte aligned with rows of a multiple of 16 bytes (k % 32 == 0) and scales 2-byte aligned.
template <typename T>
__global__ void __launch_bounds__(256, 6) quantize_swizzled_kernel(const T* __restrict__ x, int64_t m, int64_t k,
                                                                   float gs, float inv_gs, uint8_t* __restrict__ codes,
                                                                   uint8_t* __restrict__ scales, int64_t cols_p,
                                                                   bool wide) {
  const int64_t c = 2 * (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x);
  if (c >= cols_p) return;
  const int64_t r = blockIdx.x, groups = k / 16;
  uint8_t* sdst = scales + swizzled_offset(r, c, cols_p);
  if (wide && r < m && c + 1 < groups) {
    uint4 w;
    const uint32_t s2 = quantize_pair<T>(reinterpret_cast<const uint4*>(x + r * k + c * 16), gs, inv_gs, w);
    *reinterpret_cast<uint4*>(codes + r * (k / 2) + c * 8) = w;
    *reinterpret_cast<uint16_t*>(sdst) = static_cast<uint16_t>(s2);
    return;
  }
#pragma unroll
  for (int gi = 0; gi < 2; ++gi) {  // padding (scale 0), the tail, or unaligned outputs
    uint32_t s8 = 0;
    if (r < m && c + gi < groups) {
      uint2 w;
      s8 = quantize_one<T>(reinterpret_cast<const uint4*>(x + r * k + (c + gi) * 16), gs, inv_gs, w);
      *reinterpret_cast<uint2*>(codes + r * (k / 2) + (c + gi) * 8) = w;
    }
    sdst[gi] = static_cast<uint8_t>(s8);
  }
}

// Quantize-dequantize for the W4A4 GEMMs: each thread quantizes kG consecutive groups of the flattened group
// sequence exactly as above and writes their dequantized values in T, (m, k) row-major:
//   exact (w4a4): e2m1 · sx, exact in T (<= 6 significant bits, |v| <= 2688, >= 2^-10);
//   vLLM flavour: T(e2m1 · f32(sx / gs)).
template <typename T, bool kVllm, int kG>
__global__ void __launch_bounds__(256) quantize_dequant_kernel(const T* __restrict__ x, int64_t total, float gs,
                                                               float inv_gs, T* __restrict__ out) {
  pdl_launch_dependents();  // the GEMM that reads `out` may start loading its weights (it waits for us)
  const int64_t g0 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kG;
  if (g0 >= total) return;
  const uint4* src = reinterpret_cast<const uint4*>(x) + g0 * 2;
  uint4 raw[kG][2];
#pragma unroll
  for (int gi = 0; gi < kG; ++gi)
    if (g0 + gi < total) {
      raw[gi][0] = src[2 * gi];
      raw[gi][1] = src[2 * gi + 1];
    }
#pragma unroll
  for (int gi = 0; gi < kG; ++gi) {
    if (g0 + gi >= total) break;
    uint32_t w[2];
    const float sc = dequant_factor<kVllm>(quantize_group<T>(raw[gi], gs, inv_gs, w), gs);
    alignas(16) T vals[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) vals[i] = dequant_value<T>(w[i / 8] >> (4 * (i % 8)), sc);
    uint4* dst = reinterpret_cast<uint4*>(out + (g0 + gi) * 16);
    dst[0] = reinterpret_cast<const uint4*>(vals)[0];
    dst[1] = reinterpret_cast<const uint4*>(vals)[1];
  }
}

// The same for decode sizes, where the quantizer's latency is what the GEMM waits for: four lanes per group,
// four values each (quad_quant_dequant, the factors computed per group: a table filled first, as the decode
// kernel's own quantization once did, made this kernel 0.25-0.45 µs slower at M = 16, where it is launched normally
// and the filling is on the critical path, change 64; the layer's table read through L1 instead, 0-0.1 µs slower,
// change 100; docs/PERF.md).
// Launched programmatically (decode sizes with a per-stream output buffer): it waits for the kernel before it
// (which may write x, or still read `out` as the previous layer's GEMM), and only then lets the GEMM after it
// start, so that at most one grid waits ahead of the running one.
template <typename T, bool kVllm>
__global__ void __launch_bounds__(256) quantize_dequant_quad_kernel(const T* __restrict__ x, int64_t total,
                                                                    float gs, float inv_gs, T* __restrict__ out) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // quarter-group
  const bool in = q < total * 4;  // a group's four lanes are in or out together (the shuffles need them all)
  const uint2 raw = in ? reinterpret_cast<const uint2*>(x)[q] : make_uint2(0, 0);
  const uint2 vals =
      quad_quant_dequant<T>(raw, gs, [gs, inv_gs](uint32_t s8) { return group_factors<kVllm>(s8, gs, inv_gs); });
  if (in) reinterpret_cast<uint2*>(out)[q] = vals;
}

template <bool kVllm>
__global__ void __launch_bounds__(kGroupFactors) group_factor_table_kernel(float gs, float inv_gs, float2* tab) {
  tab[threadIdx.x] = group_factors<kVllm>(threadIdx.x, gs, inv_gs);
}

template <typename T>
void launch_t(const void* x, int64_t m, int64_t k, float gs, uint8_t* codes, uint8_t* scales, ScaleLayout layout,
              cudaStream_t stream) {
  const float inv_gs = 1.0f / gs;
  const int64_t groups = k / 16;
  const int threads = 256;
  const T* xt = static_cast<const T*>(x);
  if (layout == ScaleLayout::Swizzled128x4) {
    const int64_t rows_p = swizzled_rows(m), cols_p = swizzled_cols(groups);
    NVFP4_CHECK(rows_p <= 0x7FFFFFFF, "cuda quantize_activations: " + std::to_string(m) +
                                          " rows, more than the 2147483520 the swizzled quantizer takes in one call");
    const bool wide = reinterpret_cast<uintptr_t>(codes) % 16 == 0 && k % 32 == 0 &&
                      reinterpret_cast<uintptr_t>(scales) % 2 == 0;
    const dim3 grid(static_cast<unsigned>(rows_p), static_cast<unsigned>(ceil_div(cols_p / 2, threads)));
    quantize_swizzled_kernel<T><<<grid, threads, 0, stream>>>(xt, m, k, gs, inv_gs, codes, scales, cols_p, wide);
  } else {
    const int64_t total = m * groups;
    const bool wide = reinterpret_cast<uintptr_t>(codes) % 16 == 0 && reinterpret_cast<uintptr_t>(scales) % 2 == 0;
    const unsigned blocks = static_cast<unsigned>(ceil_div(ceil_div(total, 2), threads));
    quantize_linear_kernel<T><<<blocks, threads, 0, stream>>>(xt, total, gs, inv_gs, codes, scales, wide);
  }
  NVFP4_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_qd(const void* x, int64_t m, int64_t k, float gs, bool vllm, void* out, bool programmatic,
               cudaStream_t stream) {
  constexpr int kG = 2, threads = 256;
  const int64_t total = m * (k / 16);
  const unsigned blocks = static_cast<unsigned>(ceil_div(ceil_div(total, kG), threads));
  const T* xt = static_cast<const T*>(x);
  T* o = static_cast<T*>(out);
  if (m <= kQuadMaxRows) {  // four lanes per group (the decode kernel's M <= 32)
    const unsigned qblocks = static_cast<unsigned>(quantize_dequant_quad_blocks(m, k));
    const auto kernel = vllm ? quantize_dequant_quad_kernel<T, true> : quantize_dequant_quad_kernel<T, false>;
    launch_maybe_programmatic(programmatic, kernel, dim3(qblocks), dim3(threads), 0, stream, xt, total, gs,
                              1.0f / gs, o);
    NVFP4_CUDA_CHECK(cudaGetLastError());
    return;
  }
  if (vllm)
    quantize_dequant_kernel<T, true, kG><<<blocks, threads, 0, stream>>>(xt, total, gs, 1.0f / gs, o);
  else
    quantize_dequant_kernel<T, false, kG><<<blocks, threads, 0, stream>>>(xt, total, gs, 1.0f / gs, o);
  NVFP4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void launch_quantize(const void* x, DType act, int64_t m, int64_t k, float gs_enc, uint8_t* codes,
                     uint8_t* scales, ScaleLayout layout, cudaStream_t stream) {
  if (act == DType::BF16) launch_t<__nv_bfloat16>(x, m, k, gs_enc, codes, scales, layout, stream);
  else launch_t<__half>(x, m, k, gs_enc, codes, scales, layout, stream);
}

void launch_quantize_dequant(const void* x, DType act, int64_t m, int64_t k, float gs_enc, bool vllm, void* out,
                             bool programmatic, cudaStream_t stream) {
  if (act == DType::BF16) launch_qd<__nv_bfloat16>(x, m, k, gs_enc, vllm, out, programmatic, stream);
  else launch_qd<__half>(x, m, k, gs_enc, vllm, out, programmatic, stream);
}

void launch_group_factor_table(float gs_enc, bool vllm, float2* tab, cudaStream_t stream) {
  const auto kernel = vllm ? group_factor_table_kernel<true> : group_factor_table_kernel<false>;
  kernel<<<1, kGroupFactors, 0, stream>>>(gs_enc, 1.0f / gs_enc, tab);
  NVFP4_CUDA_CHECK(cudaGetLastError());
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
  detail::launch_quantize(x, act, m, k, gs_enc, codes, scales, layout, static_cast<cudaStream_t>(stream));
}

}  // namespace nvfp4::cuda
