// The executors' shared host-side pieces (device_buffer.cuh, device_info.h): the current-device guard, the bias
// upload and the choice of programmatic launches.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstring>
#include <vector>

#include "backends/cuda/device/device_info.h"
#include "backends/cuda/device_buffer.cuh"
#include "common/error.h"
#include "cuda_test_util.h"
#include "format/numerics.h"

namespace nvfp4::cuda::test {
namespace {

// A device that cannot be made current is an error on any machine (no GPU: cudaGetDevice or cudaSetDevice
// fails), and leaves the caller's device current. With two GPUs the guard switches and restores.
TEST(CudaDeviceGuard, ThrowsForAMissingDeviceAndRestoresTheCallersDevice) {
  EXPECT_THROW(DeviceGuard g(999), Error);
  cudaGetLastError();
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    count = 0;
  }
  if (count < 1) return;
  int cur = -1;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_THROW(DeviceGuard g(count), Error);  // one past the last device
  cudaGetLastError();
  ASSERT_EQ(cudaGetDevice(&cur), cudaSuccess);
  EXPECT_EQ(cur, 0);
  if (count < 2) return;
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  {
    const DeviceGuard g(0);
    ASSERT_EQ(cudaGetDevice(&cur), cudaSuccess);
    EXPECT_EQ(cur, 0);
  }
  ASSERT_EQ(cudaGetDevice(&cur), cudaSuccess);
  EXPECT_EQ(cur, 1);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
}

// Launches carry the programmatic-serialization attribute only where the kernels wait for the kernel before
// them: the device is sm_90+ and the build carries sm_90+ code that runs on it (derived here from the build's
// architecture list, the function asks the driver which image it runs). A build whose only image for a Hopper
// GPU is compute_80 PTX, the way docs/TESTING.md runs the sm_80 code there, must say no: its kernels have no
// grid-dependency wait.
TEST(CudaProgrammaticLaunch, OnlyWhereTheRunningImageWasCompiledForSm90) {
  NVFP4_REQUIRE_GPU();
  const DeviceInfo d = query_device(0);
  const BuildInfo b = query_build();
  bool sm90_code = false;
  for (const CudaArch& a : b.cuda_archs)
    if (a.sm >= 90 && archs_run_on({a}, d.cc())) sm90_code = true;
  EXPECT_EQ(programmatic_launch_supported(0), d.cc_major >= 9 && sm90_code)
      << d.describe() << ", built for " << b.archs_string();
  EXPECT_FALSE(programmatic_launch_supported(999));  // no such device
}

// The uploaded bias is T(bias) as f32, bit for bit, for values that round differently in bf16 and fp16 (and
// one that fp16 overflows); an empty bias allocates nothing.
TEST(CudaUploadBias, RoundsEachValueToTheActivationType) {
  NVFP4_REQUIRE_GPU();
  const std::vector<float> bias = {1.0f + 0x1p-9f, -3.14159265f, 1e-6f, 0x1p-20f, 70000.0f, -0.0f, 0.1f, 1e-30f};
  for (DType t : {DType::BF16, DType::F16}) {
    DeviceBuffer<float> d;
    upload_bias(bias, t, d);
    ASSERT_NE(d.p, nullptr);
    ASSERT_EQ(d.bytes, bias.size() * sizeof(float));
    std::vector<float> got(bias.size());
    CUDA_OK(cudaMemcpy(got.data(), d.p, d.bytes, cudaMemcpyDeviceToHost));
    int64_t changed = 0;
    for (size_t i = 0; i < bias.size(); ++i) {
      const float want = round_to(t, bias[i]);
      changed += want != bias[i];
      EXPECT_EQ(std::memcmp(&got[i], &want, sizeof(float)), 0)
          << dtype_name(t) << " bias[" << i << "] = " << bias[i] << ": got " << got[i] << ", want " << want;
    }
    EXPECT_GE(changed, 4) << dtype_name(t) << ": the data does not exercise the rounding";
  }
  DeviceBuffer<float> none;
  upload_bias({}, DType::BF16, none);
  EXPECT_EQ(none.p, nullptr);
  EXPECT_EQ(none.bytes, 0u);
}

}  // namespace
}  // namespace nvfp4::cuda::test
