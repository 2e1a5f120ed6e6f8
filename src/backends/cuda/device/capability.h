// The capability rules of SPEC §6, as pure functions of (device, build): can native FP4 (cuBLASLt block-scaled
// E2M1 GEMM) run, can this project's CUDA kernels run. One definition, used by linear/select (the dispatch
// table) and by backends/cublaslt (which refuses to build a layer where the rule says no).
#pragma once
#include <cstdint>
#include <string>

#include "backends/cuda/device/device_info.h"

namespace nvfp4 {

// Minimum compute capability of this project's CUDA kernels (backends/cuda: mma.sync bf16, cp.async).
constexpr int kMinCudaKernelsCC = 80;
// Native FP4 (SPEC §6 rule 3): device >= 10.0, CUDA runtime and cuBLASLt >= 12.8.
constexpr int kMinNativeFp4CC = 100;
constexpr int kMinNativeFp4Cudart = 12080;         // cudaRuntimeGetVersion encoding
constexpr int64_t kMinNativeFp4Cublaslt = 120800;  // cublasLtGetVersion encoding

// The answer of a capability rule. ok, or why not: `brief` for the one-line fallback warning ("sm_90 <
// sm_100"), `full` a sentence for errors ("cublaslt needs compute capability >= 10.0; this device is ...").
struct Capability {
  bool ok = true;
  std::string brief, full;
  static Capability no(std::string b, std::string f) { return {false, std::move(b), std::move(f)}; }
};

// Does this binary carry code that runs on `dev`? The run-time probe (DeviceInfo::image_sm) decides when it
// ran; otherwise (devices described by hand) the build's architecture list.
inline bool binary_runs_on(const DeviceInfo& dev, const BuildInfo& build) {
  if (!build.cuda) return false;
  if (dev.image_sm >= 0) return dev.image_sm > 0;
  return archs_run_on(build.cuda_archs, dev.cc());
}

inline Capability native_fp4_capability(const DeviceInfo& dev, const BuildInfo& build) {
  if (!dev.is_gpu) {
    const std::string n = dev.note.empty() ? "no CUDA device" : dev.note;
    return Capability::no(n, "cublaslt needs a CUDA device of compute capability >= 10.0; running on the CPU (" +
                                 n + ")");
  }
  if (dev.cc() < kMinNativeFp4CC)
    return Capability::no(dev.sm_name() + " < sm_100",
                          "cublaslt needs compute capability >= 10.0; this device is " + dev.describe());
  if (!build.cuda)
    return Capability::no("built without CUDA", "cublaslt needs a CUDA build; this binary was built without CUDA");
  if (build.cudart_version < kMinNativeFp4Cudart)
    return Capability::no("CUDA runtime " + cudart_version_string(build.cudart_version) + " < 12.8",
                          "cublaslt needs CUDA runtime >= 12.8; this process runs with " +
                              cudart_version_string(build.cudart_version));
  if (build.cublaslt_version < kMinNativeFp4Cublaslt)
    return Capability::no("cuBLASLt " + cublaslt_version_string(build.cublaslt_version) + " < 12.8",
                          "cublaslt needs cuBLASLt >= 12.8 (FP4 block-scaled GEMM); this process loaded cuBLASLt " +
                              cublaslt_version_string(build.cublaslt_version));
  if (!binary_runs_on(dev, build))
    return Capability::no("this binary has no " + dev.sm_name() + " code",
                          "cublaslt needs this binary to carry code for " + dev.sm_name() +
                              " (its activation quantizer runs there); it was built for " + build.archs_string() +
                              " (rebuild with -DNVFP4_CUDA_ARCHS including " + std::to_string(dev.cc() / 10 * 10) +
                              ")");
  return {};
}

inline Capability cuda_kernels_capability(const DeviceInfo& dev, const BuildInfo& build) {
  if (!dev.is_gpu) {
    const std::string n = dev.note.empty() ? "no CUDA device" : dev.note;
    return Capability::no(n, "the cuda executor needs a CUDA device; running on the CPU (" + n + ")");
  }
  if (!build.cuda)
    return Capability::no("built without CUDA",
                          "the cuda executor needs a CUDA build; this binary was built without CUDA");
  if (dev.cc() < kMinCudaKernelsCC)
    return Capability::no(dev.sm_name() + " < sm_80",
                          "the cuda executor's kernels need compute capability >= 8.0; this device is " +
                              dev.describe());
  if (!binary_runs_on(dev, build))
    return Capability::no("this binary has no " + dev.sm_name() + " code",
                          "the cuda executor needs this binary to carry code for " + dev.sm_name() +
                              "; it was built for " + build.archs_string());
  return {};
}

// The cuda executor's Hopper kernel for M > 32, and M > 16 on layers of >= kWgmmaFrom17MinWeights weights (the
// executor's default_wgmma_from moves that M to 17 or 65 on smaller layers where its estimates say so)
// (backends/cuda/gemm_wgmma.cu: wgmma needs the arch-specific sm_90a target): the cuda kernels run, the device is
// 9.0 and this binary carries sm_90a SASS. Elsewhere M > 16 runs the decode kernel's 32-token tiles
// (docs/BACKENDS.md, "Kernel paths"). At run time the executor also probes the device once (a kernel that reports
// whether its sm_90a code ran). The weight bound: the executor's default_wgmma_from (docs/PERF.md, change 110).
constexpr int64_t kWgmmaFrom17MinWeights = 20ll << 20;
inline Capability wgmma_kernel_capability(const DeviceInfo& dev, const BuildInfo& build) {
  const Capability k = cuda_kernels_capability(dev, build);
  if (!k.ok) return k;
  if (dev.cc() != 90)
    return Capability::no(dev.sm_name() + " is not sm_90",
                          "the wgmma kernel runs on Hopper (9.0) only; this device is " + dev.describe());
  for (const auto& a : build.cuda_archs)
    if (a.sm == 90 && a.variant == 'a' && !a.ptx) return {};
  return Capability::no("this binary has no sm_90a code",
                        "the wgmma kernel needs sm_90a code; this binary was built for " + build.archs_string() +
                            " (rebuild with -DNVFP4_CUDA_ARCHS including 90a)");
}

}  // namespace nvfp4
