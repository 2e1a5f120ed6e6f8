// Dispatch of a quantized linear (SPEC §6): two choices made once per layer at load time,
//   semantics: what is computed (w4a16, w4a4 native numerics, w4a4-vllm emulation numerics), and
//   executor:  where it runs (cuda = this project's kernels, cublaslt = native FP4 GEMM on Blackwell, cpu).
// select_linear() is a pure function of (device, build, layer scheme, overrides): no environment, no CUDA
// calls, so the rules are tested as a table without a GPU (tests/linear/select_test.cpp). The environment
// is read in exactly one place, overrides_from_env(); flags are merged over it with merge_overrides().
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "backends/cuda/device/capability.h"
#include "backends/cuda/device/device_info.h"
#include "common/log.h"
#include "format/quant.h"

namespace nvfp4 {

enum class Executor : uint8_t { Cpu, Cuda, Cublaslt };
const char* executor_name(Executor e);                       // "cpu", "cuda", "cublaslt"
bool executor_from_name(const std::string& s, Executor* out);

enum class EmulationFlavor : uint8_t { Native, Vllm };       // -> Semantics::W4A4 / W4A4_VLLM
const char* flavor_name(EmulationFlavor f);                  // "native", "vllm"
bool flavor_from_name(const std::string& s, EmulationFlavor* out);

// What the checkpoint stores for one layer: W4A4 (NVFP4: weights and an input global scale) or W4A16
// (NVFP4A16: weights only).
enum class LayerScheme : uint8_t { W4A4, W4A16 };
inline LayerScheme scheme_of(const LinearWeights& w) { return w.has_input_scale ? LayerScheme::W4A4 : LayerScheme::W4A16; }

// --device cpu | cuda | cuda:N
struct DeviceRequest {
  bool cpu = false;  // true: the CPU
  int index = -1;    // CUDA ordinal; -1 = "cuda" without an index (device 0)
  std::string str() const;  // "cpu", "cuda", "cuda:1"
};
// Parses "cpu", "cuda", "cuda:N"; throws nvfp4::UsageError naming `source` and the valid values.
DeviceRequest parse_device_request(const std::string& s, const std::string& source);

// Things the user named explicitly. Each set field remembers where it came from (`*_from`: "--linear-backend",
// "NVFP4_LINEAR_BACKEND", "option", ...) so that errors can say which setting cannot be honoured.
struct Overrides {
  std::optional<Executor> executor;         std::string executor_from;
  std::optional<bool> emulation;            std::string emulation_from;   // W4A4 numerics on our kernels
  std::optional<EmulationFlavor> flavor;    std::string flavor_from;      // only used when emulation is on
  std::optional<DeviceRequest> device;      std::string device_from;
  std::optional<Semantics> semantics;       std::string semantics_from;   // library option only
};

// The one place the environment is read. Variables:
//   NVFP4_USE_EMULATION=0|1|true|false|yes|no|on|off   (alias: vLLM's VLLM_USE_NVFP4_CT_EMULATIONS; when both
//                                                        are set they must agree)
//   NVFP4_EMULATION_FLAVOR=native|vllm
//   NVFP4_LINEAR_BACKEND=cpu|cuda|cublaslt
//   NVFP4_DEVICE=cpu|cuda|cuda:N
// Empty values count as unset. Invalid values throw nvfp4::UsageError listing the valid ones.
// `getenv` is injectable for tests (default: std::getenv).
using GetEnvFn = std::function<const char*(const char*)>;
Overrides overrides_from_env(const GetEnvFn& getenv = nullptr);

// Field by field: a set field of `flags` wins over `env`.
Overrides merge_overrides(const Overrides& flags, const Overrides& env);

// Parses a boolean setting value ("1", "true", "yes", "on" / "0", "false", "no", "off", any case);
// throws nvfp4::UsageError naming `source` and the valid values.
bool parse_bool_setting(const std::string& s, const std::string& source);

struct Selection {
  Semantics semantics = Semantics::W4A16;
  Executor executor = Executor::Cpu;
  int device = -1;        // CUDA ordinal for cuda/cublaslt; -1 for cpu
  std::string reason;     // one line: why this semantics and executor, e.g. "default: no native FP4 on ..."
  std::string warning;    // non-empty for the W4A4 -> W4A16 fallback (log once per process, not per layer)
  std::string str() const;  // "w4a16 on cuda:0 (reason)"
};

// The thresholds (kMinNativeFp4CC, kMinCudaKernelsCC, ...) and the rules themselves are in
// backends/cuda/device/capability.h.
// Whether native FP4 (cuBLASLt block-scaled E2M1 GEMM) can run on `dev` with `build`; *why says why not
// (e.g. "sm_90 < sm_100"). Pure.
bool native_fp4_possible(const DeviceInfo& dev, const BuildInfo& build, std::string* why);
// Whether this project's CUDA kernels can run on `dev` with `build`; *why says why not. Pure.
bool cuda_kernels_possible(const DeviceInfo& dev, const BuildInfo& build, std::string* why);

// The rules of SPEC §6. `dev` is the device the layer would run on (already resolved from --device by the
// caller, see detect_device()). Throws nvfp4::Error when something named explicitly cannot run here or
// contradicts the checkpoint (message says which setting and why), nvfp4::UsageError for contradictory
// settings. Pure: same inputs, same answer.
Selection select_linear(const DeviceInfo& dev, const BuildInfo& build, LayerScheme scheme, const Overrides& ov);

// Resolves the device a layer runs on from overrides.device: "cpu" -> DeviceInfo::cpu; "cuda:N" ->
// query_device(N) (throws nvfp4::Error if it is not usable); unset -> device 0 when a CUDA device is usable,
// else the CPU. Not pure (queries the CUDA runtime).
DeviceInfo detect_device(const Overrides& ov);

// Logs a selection: the warning at most once per process (same text), the decision as an Info line once per
// distinct (semantics, executor, reason). Thread-safe.
void report_selection(const Selection& sel, const Reporter& rep);

// A multi-line explanation of the environment and the rules applied, for `inspect --explain-device`.
std::string explain_dispatch(const DeviceInfo& dev, const BuildInfo& build, const Overrides& ov);

}  // namespace nvfp4
