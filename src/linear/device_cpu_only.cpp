// The device/build description of a CPU-only build (no NVFP4_HAVE_CUDA): no GPU, no CUDA code. In a CUDA
// build these functions come from backends/cuda/device/device_info.cu instead.
#include "backends/cuda/device/device_info.h"

#ifndef NVFP4_HAVE_CUDA
namespace nvfp4 {

static const char* kNoCuda = "this binary was built without CUDA";

int cuda_device_count(std::string* why) {
  if (why) *why = kNoCuda;
  return 0;
}

DeviceInfo query_device(int) { return DeviceInfo::cpu(kNoCuda); }

BuildInfo query_build() { return BuildInfo{}; }

bool programmatic_launch_supported(int) { return false; }

}  // namespace nvfp4
#endif
