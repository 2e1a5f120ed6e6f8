// The device codecs that have a second, faster form, against their first form on the GPU, for every input
// of their domains: the E4M3 encoder by the convert instruction (sm_89+) against the integer one for every
// non-negative f32 up to 448 and every positive NaN pattern, and the E2M1 code's value (e2m1_round_f32)
// against the encoder followed by the decoder for all 2^32 f32 bit patterns, bit for bit (signed zeros too).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>

#include "backends/cuda/cuda_test_util.h"
#include "backends/cuda/cuda_util.cuh"

namespace nvfp4::cuda {
namespace {

using test::DeviceBytes;

// counts[0]: mismatches; counts[1]: the first mismatching input (bits), if any; counts[2]: inputs seen.
__device__ void record(unsigned long long* counts, uint32_t u, bool bad) {
  if (bad && atomicAdd(&counts[0], 1ull) == 0) counts[1] = u;
}

__global__ void e4m3_forms_kernel(unsigned long long* counts) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  uint64_t seen = 0;
  // [0, 448] (bits 0 .. 0x43E00000), then the NaN patterns 0x7F800001 .. 0x7FFFFFFF (the group scale is clamped
  // to 448 first, so nothing else reaches the encoder)
  constexpr uint64_t kTop = 0x43E00000ull, kEnd = kTop + 0x800000ull;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < kEnd; i += stride) {
    const uint32_t u = static_cast<uint32_t>(i <= kTop ? i : 0x7F800000ull + (i - kTop));
    const float x = __uint_as_float(u);
    record(counts, u, detail::e4m3_from_f32_pos(x) != detail::e4m3_from_f32_pos_int(x));
    ++seen;
  }
  atomicAdd(&counts[2], seen);
}

__global__ void e2m1_round_kernel(unsigned long long* counts) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  uint64_t seen = 0;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i <= 0xFFFFFFFFull; i += stride) {
    const uint32_t u = static_cast<uint32_t>(i);
    const float y = __uint_as_float(u);
    const float want = detail::e2m1_to_f32(e2m1_encode_bits(y));
    record(counts, u, __float_as_uint(e2m1_round_f32(y)) != __float_as_uint(want));
    ++seen;
  }
  atomicAdd(&counts[2], seen);
}

template <typename K>
void run_exhaustive(K kernel, unsigned long long expected, const char* what) {
  DeviceBytes d(3 * sizeof(unsigned long long));
  d.fill(0);
  kernel<<<132 * 8, 256>>>(d.as<unsigned long long>());
  CUDA_OK(cudaDeviceSynchronize());
  unsigned long long h[3];
  d.download(h, sizeof h);
  EXPECT_EQ(h[2], expected) << what << ": inputs seen";
  EXPECT_EQ(h[0], 0ull) << what << ": first mismatch at f32 bits 0x" << std::hex << h[1];
}

TEST(CudaCodecs, E4m3ConvertInstructionEqualsIntegerEncoder) {
  NVFP4_REQUIRE_GPU();
  run_exhaustive(e4m3_forms_kernel, 0x43E00001ull + 0x7FFFFFull, "e4m3");
}

TEST(CudaCodecs, E2m1RoundEqualsEncoderThenDecoderForEveryF32) {
  NVFP4_REQUIRE_GPU();
  run_exhaustive(e2m1_round_kernel, 1ull << 32, "e2m1");
}

}  // namespace
}  // namespace nvfp4::cuda
