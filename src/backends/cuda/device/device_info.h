// What this process runs on: the device (a CUDA GPU or the CPU) and the build (which CUDA architectures this
// binary carries code for, which CUDA runtime and cuBLASLt it runs with). Filled at run time; plain C++ (no
// CUDA headers), so linear/select.h can take these as plain values and be tested as a table without a GPU.
//
// In a CUDA build the functions below live in backends/cuda/device/device_info.cu (CUDA runtime +
// cublasLtGetVersion); in a CPU-only build (no NVFP4_HAVE_CUDA) linear/ provides them and they answer
// "no GPU" with the reason "built without CUDA".
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace nvfp4 {

struct DeviceInfo {
  bool is_gpu = false;        // false: the CPU (no usable CUDA device, or the CPU was asked for)
  int index = -1;             // CUDA device ordinal; -1 for the CPU
  std::string name = "CPU";   // "NVIDIA H200", "NVIDIA B200", "CPU"
  int cc_major = 0;           // compute capability, e.g. 9 / 0 for sm_90
  int cc_minor = 0;
  int sm_count = 0;           // streaming multiprocessors (0 for the CPU)
  int64_t memory_bytes = 0;   // total device memory (0 for the CPU)
  // Run-time probe of this binary's kernels on this device (cudaFuncGetAttributes on a kernel of ours):
  //   -1 not probed (table tests, CPU), 0 the binary has no image that runs here, else the binaryVersion
  //   of the image the driver picked (e.g. 90 for sm_90a code on an H200).
  int image_sm = -1;
  std::string note;           // for the CPU: why no GPU is used ("built without CUDA", "no CUDA device: ...")

  int cc() const { return cc_major * 10 + cc_minor; }  // 90 for 9.0, 100 for 10.0, 120 for 12.0
  std::string cc_string() const;                        // "9.0"
  std::string sm_name() const;                          // "sm_90", "sm_100"; "cpu" for the CPU
  std::string describe() const;                         // "NVIDIA H200 (9.0)" or "CPU"

  static DeviceInfo cpu(const std::string& note = "");
  // A GPU described by hand (table tests): image_sm stays -1, so the build's architecture list decides.
  static DeviceInfo gpu(const std::string& name, int cc_major, int cc_minor, int sm_count = 0,
                        int64_t memory_bytes = 0);
};

// One CUDA architecture this binary carries code for.
struct CudaArch {
  int sm = 0;             // 80, 90, 100, 120
  char variant = 0;       // 0 generic (sm_80), 'a' arch-specific (sm_90a), 'f' family-specific (sm_100f)
  bool ptx = false;       // PTX (JIT-compilable on newer devices) rather than SASS
  std::string name() const;  // "sm_90a", "compute_80"
};

struct BuildInfo {
  bool cuda = false;                // built with CUDA (NVFP4_HAVE_CUDA)
  std::vector<CudaArch> cuda_archs; // what was compiled (from __CUDA_ARCH_LIST__ and the build's arch list)
  int cudart_version = 0;           // cudaRuntimeGetVersion, e.g. 13000 (major*1000 + minor*10); 0 if none
  int driver_version = 0;           // cudaDriverGetVersion, same encoding; 0 if none
  int64_t cublaslt_version = 0;     // cublasLtGetVersion, e.g. 130100 (major*10000 + minor*100 + patch)
  std::string archs_string() const; // "sm_80,sm_90a,sm_100,sm_120" or "none"
};

// Human-readable versions: cudart 12080 -> "12.8"; cuBLASLt 120803 -> "12.8.3".
std::string cudart_version_string(int v);
std::string cublaslt_version_string(int64_t v);

// True when code in `archs` can run on a device of compute capability cc (e.g. 90):
//   generic SASS sm_XY runs on X.Z for Z >= Y; arch-specific sm_XYa only on X.Y exactly; family-specific
//   sm_XYf on X.Z for Z >= Y; PTX compute_XY (generic) JIT-compiles for any cc >= XY.
bool archs_run_on(const std::vector<CudaArch>& archs, int cc);

// Number of CUDA devices usable by this process (0 in a CPU-only build or without a driver/device).
// Never throws; *why (may be null) says why there are none.
int cuda_device_count(std::string* why = nullptr);
// Describes device `index`; a CPU-only build, a missing driver or an index out of range returns
// DeviceInfo::cpu(note) with the reason in note. Never throws.
DeviceInfo query_device(int index);
// Describes this binary and the CUDA runtime / cuBLASLt it runs with. Never throws.
BuildInfo query_build();
// Whether this binary's kernels may be launched programmatically (programmatic stream serialization) on device
// `index`: the device is sm_90+ and the image the driver runs there was compiled for sm_90+, so the kernels wait
// for the kernel before them (cuda_util.cuh's pdl_wait). Code compiled for sm_80 and JIT-compiled from its PTX for
// a newer GPU has no such wait and is launched in plain stream order. Asked of the driver once per device; never
// throws; false in a CPU-only build.
bool programmatic_launch_supported(int index);

// ---- small pure helpers (inline so that every layer can use them without a link dependency) -----------
inline std::string DeviceInfo::cc_string() const { return std::to_string(cc_major) + "." + std::to_string(cc_minor); }
inline std::string DeviceInfo::sm_name() const { return is_gpu ? "sm_" + std::to_string(cc()) : "cpu"; }
inline std::string DeviceInfo::describe() const { return is_gpu ? name + " (" + cc_string() + ")" : std::string("CPU"); }
inline DeviceInfo DeviceInfo::cpu(const std::string& note) {
  DeviceInfo d;
  d.note = note;
  return d;
}
inline DeviceInfo DeviceInfo::gpu(const std::string& name, int cc_major, int cc_minor, int sm_count,
                                  int64_t memory_bytes) {
  DeviceInfo d;
  d.is_gpu = true;
  d.index = 0;
  d.name = name;
  d.cc_major = cc_major;
  d.cc_minor = cc_minor;
  d.sm_count = sm_count;
  d.memory_bytes = memory_bytes;
  return d;
}
inline std::string CudaArch::name() const {
  std::string s = (ptx ? "compute_" : "sm_") + std::to_string(sm);
  if (variant) s += variant;
  return s;
}
inline std::string BuildInfo::archs_string() const {
  if (cuda_archs.empty()) return "none";
  std::string s;
  for (const auto& a : cuda_archs) s += (s.empty() ? "" : ",") + a.name();
  return s;
}
inline std::string cudart_version_string(int v) {
  if (v <= 0) return "none";
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}
inline std::string cublaslt_version_string(int64_t v) {
  if (v <= 0) return "none";
  return std::to_string(v / 10000) + "." + std::to_string((v % 10000) / 100) + "." + std::to_string(v % 100);
}
inline bool archs_run_on(const std::vector<CudaArch>& archs, int cc) {
  for (const auto& a : archs) {
    const bool same_major = a.sm / 10 == cc / 10;
    if (a.variant == 'a') {
      if (a.sm == cc) return true;                    // arch-specific: this exact device only
    } else if (a.variant == 'f') {
      if (same_major && cc >= a.sm) return true;      // family-specific: same major, newer minor
    } else if (a.ptx) {
      if (cc >= a.sm) return true;                    // generic PTX is JIT-compiled forward
    } else if (same_major && cc >= a.sm) {
      return true;                                    // generic SASS: same major, newer minor
    }
  }
  return false;
}

}  // namespace nvfp4
