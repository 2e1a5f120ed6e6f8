// Helpers of the CUDA executor tests: GPU skip, device buffers, random NVFP4 layers and activations.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_linear.h"
#include "format/numerics.h"
#include "format/quant.h"

namespace nvfp4::cuda::test {

#define NVFP4_REQUIRE_GPU()                                                  \
  do {                                                                       \
    std::string why_;                                                        \
    if (!::nvfp4::cuda::kernels_available(0, &why_)) GTEST_SKIP() << why_;   \
  } while (0)

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr << ": " << cudaGetErrorString(cudaGetLastError())

// Device buffer of bytes.
struct DeviceBytes {
  void* p = nullptr;
  size_t n = 0;
  explicit DeviceBytes(size_t bytes) : n(bytes) {
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) p = nullptr;
  }
  ~DeviceBytes() { cudaFree(p); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  template <typename U> U* as() const { return static_cast<U*>(p); }
  // Both wait until the bytes are on the device: cudaMemset and a copy from pageable memory may return before
  // then, ordered only on the legacy stream, and tests also run layers on non-blocking streams.
  void fill(uint8_t b) {
    cudaMemset(p, b, n);
    cudaDeviceSynchronize();
  }
  void upload(const void* src, size_t bytes) {
    cudaMemcpy(p, src, bytes, cudaMemcpyHostToDevice);
    cudaDeviceSynchronize();
  }
  void download(void* dst, size_t bytes) const { cudaMemcpy(dst, p, bytes, cudaMemcpyDeviceToHost); }
};

// Activations (m, k) as T bits, normal-ish values scaled by `amp`, with a few exact zeros, negative zeros,
// and group outliers.
inline std::vector<uint16_t> random_activations(DType t, int64_t m, int64_t k, float amp, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 99);
  std::vector<uint16_t> x(static_cast<size_t>(m * k));
  for (auto& v : x) {
    const int r = pick(rng);
    float f = nd(rng) * amp;
    if (r == 0) f = 0.0f;
    else if (r == 1) f = -0.0f;
    else if (r == 2) f *= 30.0f;
    v = to_bits16(t, f);
  }
  return x;
}

// Small integers in [-lim, lim] (exactly representable, used by the exact-arithmetic tests).
inline std::vector<uint16_t> integer_activations(DType t, int64_t m, int64_t k, int lim, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(-lim, lim);
  std::vector<uint16_t> x(static_cast<size_t>(m * k));
  for (auto& v : x) v = to_bits16(t, static_cast<float>(d(rng)));
  return x;
}

// A layer with uniformly random codes (every nibble, -0 included) and scales drawn from `scale_codes`.
inline LinearWeights random_layer(int64_t n, int64_t k, const std::vector<uint8_t>& scale_codes, float w_enc,
                                  bool input_scale, float x_enc, bool bias, DType t, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<size_t> sc(0, scale_codes.size() - 1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  LinearWeights w;
  w.name = "test.linear";
  w.weight.resize(n, k);
  for (auto& c : w.weight.codes) c = static_cast<uint8_t>(byte(rng));
  for (auto& s : w.weight.scales) s = scale_codes[sc(rng)];
  w.weight.global = GlobalScale::from_enc(w_enc);
  w.has_input_scale = input_scale;
  if (input_scale) w.input_global = GlobalScale::from_enc(x_enc);
  if (bias) {
    w.bias.resize(static_cast<size_t>(n));
    for (auto& b : w.bias) b = round_to(t, nd(rng));
  }
  return w;
}

inline std::vector<uint8_t> scale_range(uint8_t lo, uint8_t hi) {
  std::vector<uint8_t> v;
  for (int c = lo; c <= hi; ++c) v.push_back(static_cast<uint8_t>(c));
  return v;
}

}  // namespace nvfp4::cuda::test
