// The executors' shared host-side pieces (device_buffer.cuh): the current-device guard.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include "backends/cuda/device_buffer.cuh"
#include "common/error.h"

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

}  // namespace
}  // namespace nvfp4::cuda::test
