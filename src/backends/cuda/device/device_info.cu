// Run-time description of the CUDA device and of this binary (device_info.h), CUDA build.
// "Carries code for the device" is answered by the driver itself: cudaFuncGetAttributes on a kernel compiled
// into this library with the same -gencode list as every other kernel here fails when no image runs on the
// device, and otherwise reports the binaryVersion of the image it picked.
#include "backends/cuda/device/device_info.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdlib>
#include <sstream>
#include <string>

namespace nvfp4 {

namespace {

// Never launched: it exists so that cudaFuncGetAttributes can tell whether this binary has an image for a
// device (it is compiled for exactly the architectures of the other kernels of nvfp4_cuda).
__global__ void nvfp4_arch_probe_kernel(int* out) {
  if (out) *out = 1;
}

// What the driver says of the image of this binary it runs on device `index` (the probe kernel's attributes;
// the caller's device is restored). made_current false: the device could not be made current, nothing asked.
struct ImageProbe {
  bool made_current = false;
  cudaError_t e = cudaSuccess;
  cudaFuncAttributes attr{};
};
ImageProbe probe_image(int index) {
  ImageProbe r;
  int prev = 0;
  cudaGetDevice(&prev);
  if (cudaSetDevice(index) != cudaSuccess) {
    cudaGetLastError();
    return r;
  }
  r.made_current = true;
  r.e = cudaFuncGetAttributes(&r.attr, nvfp4_arch_probe_kernel);
  if (r.e != cudaSuccess) cudaGetLastError();
  cudaSetDevice(prev);
  return r;
}

std::string err_string(cudaError_t e) { return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e); }

// Why the runtime found no device, in the user's terms: an insufficient driver is usually no driver at all
// (a machine without an NVIDIA GPU), which the runtime's own message does not say.
std::string driver_problem(cudaError_t e) {
  if (e != cudaErrorInsufficientDriver) return err_string(e);
  const BuildInfo b = query_build();
  if (b.driver_version == 0) return "no NVIDIA driver is installed; " + std::string(cudaGetErrorName(e));
  return "the NVIDIA driver supports CUDA up to " + cudart_version_string(b.driver_version) + ", this build needs " +
         cudart_version_string(b.cudart_version) + "; " + cudaGetErrorName(e);
}

// Parses the build's architecture list, e.g. "80;90a;100;120;compute_100" (CMake's NVFP4_CUDA_ARCHS: an entry X
// compiled as -gencode=arch=compute_X,code=sm_X, SASS; an entry compute_X as PTX).
std::vector<CudaArch> parse_arch_list(const std::string& s) {
  std::vector<CudaArch> out;
  std::string item;
  std::stringstream ss(s);
  while (std::getline(ss, item, s.find(';') != std::string::npos ? ';' : ',')) {
    if (item.empty()) continue;
    CudaArch a;
    if (item.rfind("compute_", 0) == 0) {
      a.ptx = true;
      item = item.substr(8);
    }
    if (item.empty()) continue;
    a.sm = std::atoi(item.c_str());
    const char last = item.back();
    if (last == 'a' || last == 'f') a.variant = last;
    if (a.sm > 0) out.push_back(a);
  }
  return out;
}

#define NVFP4_STR2(...) #__VA_ARGS__
#define NVFP4_STR(...) NVFP4_STR2(__VA_ARGS__)

std::vector<CudaArch> compiled_archs() {
#if defined(NVFP4_CUDA_ARCHS_STR)
  // The exact list from the build system (keeps the 'a'/'f' suffixes).
  return parse_arch_list(NVFP4_CUDA_ARCHS_STR);
#elif defined(__CUDA_ARCH_LIST__)
  // nvcc's list of the architectures of this translation unit, e.g. 800,900,1000,1200. It drops the 'a'
  // suffix; the per-device probe (image_sm) is what decides at run time.
  std::vector<CudaArch> v = parse_arch_list(NVFP4_STR(__CUDA_ARCH_LIST__));
  for (auto& a : v) a.sm /= 10;
  return v;
#else
  return {};
#endif
}

}  // namespace

int cuda_device_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the error so later runtime calls do not report it
    if (why) *why = "no CUDA device (" + driver_problem(e) + ")";
    return 0;
  }
  if (n == 0 && why) *why = "no CUDA device";
  return n;
}

DeviceInfo query_device(int index) {
  std::string why;
  const int n = cuda_device_count(&why);
  if (n == 0) return DeviceInfo::cpu(why);
  if (index < 0 || index >= n)
    return DeviceInfo::cpu("CUDA device " + std::to_string(index) + " does not exist (" + std::to_string(n) +
                           " device" + (n == 1 ? "" : "s") + " visible)");
  cudaDeviceProp p{};
  cudaError_t e = cudaGetDeviceProperties(&p, index);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return DeviceInfo::cpu("cannot query CUDA device " + std::to_string(index) + " (" + err_string(e) + ")");
  }
  DeviceInfo d = DeviceInfo::gpu(p.name, p.major, p.minor, p.multiProcessorCount,
                                 static_cast<int64_t>(p.totalGlobalMem));
  d.index = index;

  // Probe: does this binary carry an image that runs on this device?
  const ImageProbe probe = probe_image(index);
  if (probe.made_current) {
    if (probe.e == cudaSuccess) {
      d.image_sm = probe.attr.binaryVersion;
    } else {
      d.image_sm = 0;
      d.note = "no kernel image for " + d.sm_name() + " in this binary (" + err_string(probe.e) + ")";
    }
  }
  return d;
}

bool programmatic_launch_supported(int index) {
  static std::atomic<int> known[64];  // per device: 0 not asked yet, 1 no, 2 yes
  if (index >= 0 && index < 64 && known[index].load(std::memory_order_relaxed) != 0)
    return known[index].load(std::memory_order_relaxed) == 2;
  bool yes = false;
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index) != cudaSuccess) {
    cudaGetLastError();  // a device that cannot be asked: no programmatic launches, nothing left pending
  } else if (major >= 9) {
    // The probe kernel has the -gencode list of every other kernel here: its ptxVersion is the architecture the
    // running image was compiled for (90 for sm_90a SASS, 80 for compute_80 PTX compiled by the driver).
    const ImageProbe probe = probe_image(index);  // clears its own errors
    yes = probe.made_current && probe.e == cudaSuccess && probe.attr.ptxVersion >= 90;
  }
  if (index >= 0 && index < 64) known[index].store(yes ? 2 : 1, std::memory_order_relaxed);
  return yes;
}

BuildInfo query_build() {
  BuildInfo b;
  b.cuda = true;
  b.cuda_archs = compiled_archs();
  int v = 0;
  if (cudaRuntimeGetVersion(&v) == cudaSuccess) b.cudart_version = v;
  v = 0;
  if (cudaDriverGetVersion(&v) == cudaSuccess) b.driver_version = v;
  cudaGetLastError();
  b.cublaslt_version = static_cast<int64_t>(cublasLtGetVersion());
  return b;
}

}  // namespace nvfp4
