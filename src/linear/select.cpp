// Dispatch rules of SPEC §6 (see select.h). select_linear() is pure; the environment is read only in
// overrides_from_env().
#include "linear/select.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <mutex>
#include <set>
#include <sstream>

#include "common/error.h"

namespace nvfp4 {

// ---- names -------------------------------------------------------------------------------------------
const char* executor_name(Executor e) {
  switch (e) {
    case Executor::Cpu: return "cpu";
    case Executor::Cuda: return "cuda";
    case Executor::Cublaslt: return "cublaslt";
  }
  return "?";
}

bool executor_from_name(const std::string& s, Executor* out) {
  if (s == "cpu") *out = Executor::Cpu;
  else if (s == "cuda") *out = Executor::Cuda;
  else if (s == "cublaslt") *out = Executor::Cublaslt;
  else return false;
  return true;
}

const char* flavor_name(EmulationFlavor f) { return f == EmulationFlavor::Vllm ? "vllm" : "native"; }

bool flavor_from_name(const std::string& s, EmulationFlavor* out) {
  if (s == "native") *out = EmulationFlavor::Native;
  else if (s == "vllm") *out = EmulationFlavor::Vllm;
  else return false;
  return true;
}

std::string DeviceRequest::str() const {
  if (cpu) return "cpu";
  return index < 0 ? "cuda" : "cuda:" + std::to_string(index);
}

DeviceRequest parse_device_request(const std::string& s, const std::string& source) {
  DeviceRequest r;
  if (s == "cpu") {
    r.cpu = true;
    return r;
  }
  if (s == "cuda") return r;
  if (s.rfind("cuda:", 0) == 0 && s.size() > 5 && s.size() <= 9 &&
      std::all_of(s.begin() + 5, s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
    r.index = std::atoi(s.c_str() + 5);
    return r;
  }
  throw UsageError(source + ": invalid value '" + s + "' (valid: cpu, cuda, cuda:N)");
}

bool parse_bool_setting(const std::string& s, const std::string& source) {
  std::string l = s;
  for (auto& c : l) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (l == "1" || l == "true" || l == "yes" || l == "on") return true;
  if (l == "0" || l == "false" || l == "no" || l == "off") return false;
  throw UsageError(source + ": invalid value '" + s + "' (valid: 1, 0, true, false, yes, no, on, off)");
}

// ---- environment: the one place it is read -------------------------------------------------------------
Overrides overrides_from_env(const GetEnvFn& getenv_fn) {
  auto get = [&](const char* name) -> std::string {
    const char* v = getenv_fn ? getenv_fn(name) : std::getenv(name);
    return v ? std::string(v) : std::string();
  };
  Overrides o;
  const std::string emu = get("NVFP4_USE_EMULATION");
  const std::string vllm = get("VLLM_USE_NVFP4_CT_EMULATIONS");  // vLLM's name, honoured as an alias
  if (!emu.empty()) {
    o.emulation = parse_bool_setting(emu, "NVFP4_USE_EMULATION");
    o.emulation_from = "NVFP4_USE_EMULATION=" + emu;
  }
  if (!vllm.empty()) {
    const bool v = parse_bool_setting(vllm, "VLLM_USE_NVFP4_CT_EMULATIONS");
    if (o.emulation && *o.emulation != v)
      throw UsageError("NVFP4_USE_EMULATION=" + emu + " and VLLM_USE_NVFP4_CT_EMULATIONS=" + vllm +
                       " disagree (the second is an alias of the first; set one)");
    if (!o.emulation) {
      o.emulation = v;
      o.emulation_from = "VLLM_USE_NVFP4_CT_EMULATIONS=" + vllm;
    }
  }
  const std::string fl = get("NVFP4_EMULATION_FLAVOR");
  if (!fl.empty()) {
    EmulationFlavor f;
    if (!flavor_from_name(fl, &f))
      throw UsageError("NVFP4_EMULATION_FLAVOR: invalid value '" + fl + "' (valid: native, vllm)");
    o.flavor = f;
    o.flavor_from = "NVFP4_EMULATION_FLAVOR=" + fl;
  }
  const std::string be = get("NVFP4_LINEAR_BACKEND");
  if (!be.empty()) {
    Executor e;
    if (!executor_from_name(be, &e))
      throw UsageError("NVFP4_LINEAR_BACKEND: invalid value '" + be + "' (valid: cpu, cuda, cublaslt)");
    o.executor = e;
    o.executor_from = "NVFP4_LINEAR_BACKEND=" + be;
  }
  const std::string dev = get("NVFP4_DEVICE");
  if (!dev.empty()) {
    o.device = parse_device_request(dev, "NVFP4_DEVICE");
    o.device_from = "NVFP4_DEVICE=" + dev;
  }
  return o;
}

Overrides merge_overrides(const Overrides& flags, const Overrides& env) {
  Overrides o = env;
  if (flags.executor) { o.executor = flags.executor; o.executor_from = flags.executor_from; }
  if (flags.emulation) { o.emulation = flags.emulation; o.emulation_from = flags.emulation_from; }
  if (flags.flavor) { o.flavor = flags.flavor; o.flavor_from = flags.flavor_from; }
  if (flags.device) { o.device = flags.device; o.device_from = flags.device_from; }
  if (flags.semantics) { o.semantics = flags.semantics; o.semantics_from = flags.semantics_from; }
  return o;
}

// ---- capability checks (pure; the rules live in backends/cuda/device/capability.h) --------------------
namespace {

using Why = Capability;
Why native_fp4_why(const DeviceInfo& dev, const BuildInfo& build) { return native_fp4_capability(dev, build); }
Why cuda_kernels_why(const DeviceInfo& dev, const BuildInfo& build) { return cuda_kernels_capability(dev, build); }

const char* kHowToW4A4 = "Set NVFP4_USE_EMULATION=1 (or --emulation) for W4A4 numerics.";

std::string fallback_warning(const std::string& where, const std::string& why) {
  return "no native FP4 on " + where + " (" + why + "); running W4A4 checkpoint as W4A16 (FP4 weights, "
         "bf16/fp16 activations). " + kHowToW4A4;
}

}  // namespace

bool native_fp4_possible(const DeviceInfo& dev, const BuildInfo& build, std::string* why) {
  const Capability c = native_fp4_capability(dev, build);
  if (why) *why = c.full;
  return c.ok;
}

bool cuda_kernels_possible(const DeviceInfo& dev, const BuildInfo& build, std::string* why) {
  const Capability c = cuda_kernels_capability(dev, build);
  if (why) *why = c.full;
  return c.ok;
}

// ---- the rules --------------------------------------------------------------------------------------
Selection select_linear(const DeviceInfo& dev_in, const BuildInfo& build, LayerScheme scheme, const Overrides& ov) {
  // Device: --device cpu means the CPU whatever the machine has; --device cuda[:N] needs a GPU.
  DeviceInfo dev = dev_in;
  if (ov.device) {
    if (ov.device->cpu) {
      dev = DeviceInfo::cpu(ov.device_from);
    } else if (!dev.is_gpu) {
      throw Error(ov.device_from + " asks for a CUDA device, but " +
                  (dev.note.empty() ? std::string("none is usable") : dev.note));
    }
  }
  const Why native = native_fp4_why(dev, build);
  const Why kern = cuda_kernels_why(dev, build);
  const bool native_ok = native.ok;
  const bool kern_ok = kern.ok;

  Selection sel;
  std::vector<std::string> reasons;
  std::string warn_exec;  // a GPU is present but the layer runs on the CPU

  // Executor for paths that run on this project's code (cuda or cpu); `what` names the path for messages.
  auto own_executor = [&](const std::string& what) {
    if (ov.executor) {
      if (*ov.executor == Executor::Cuda) {
        if (!kern_ok) throw Error(ov.executor_from + ": " + kern.full);
        sel.executor = Executor::Cuda;
        reasons.push_back(ov.executor_from);
      } else if (*ov.executor == Executor::Cpu) {
        sel.executor = Executor::Cpu;
        reasons.push_back(ov.executor_from);
      } else {
        throw Error(ov.executor_from + ": cublaslt runs only native W4A4 (a W4A4 checkpoint without emulation "
                    "flavour vllm); this layer is " + what);
      }
      return;
    }
    if (kern_ok) {
      sel.executor = Executor::Cuda;
    } else {
      sel.executor = Executor::Cpu;
      if (dev.is_gpu) {
        reasons.push_back("cpu because " + kern.brief);
        warn_exec = dev.describe() + " cannot run this project's CUDA kernels (" + kern.brief + "); running "
                    "quantized linears on the CPU.";
      } else {
        bool said = false;  // the W4A4 fallback reason may already name why there is no GPU
        for (const auto& r : reasons) said = said || r.find(kern.brief) != std::string::npos;
        reasons.push_back(said ? "cpu" : "cpu (" + kern.brief + ")");
      }
    }
  };

  const bool emulation = ov.emulation.value_or(false);
  const EmulationFlavor flavor = ov.flavor.value_or(EmulationFlavor::Native);

  if (scheme == LayerScheme::W4A16) {
    if (ov.semantics && *ov.semantics != Semantics::W4A16)
      throw Error(ov.semantics_from + " asks for " + semantics_name(*ov.semantics) +
                  ", but the checkpoint is W4A16 (NVFP4A16: no input_global_scale); W4A4 needs a calibrated "
                  "activation scale");
    if (emulation)
      throw Error(ov.emulation_from + " asks for W4A4 emulation, but the checkpoint is W4A16 (NVFP4A16: no "
                  "input_global_scale); W4A4 needs a calibrated activation scale");
    sel.semantics = Semantics::W4A16;
    reasons.insert(reasons.begin(), "W4A16 checkpoint");
    own_executor("W4A16");
  } else if (ov.semantics || emulation) {
    // W4A4 checkpoint, semantics named explicitly (library option) or emulation requested.
    Semantics s;
    std::string from;
    if (ov.semantics) {
      s = *ov.semantics;
      from = ov.semantics_from;
      if (emulation && s == Semantics::W4A16)
        throw UsageError(ov.semantics_from + " (w4a16) contradicts " + ov.emulation_from + " (W4A4 emulation)");
    } else {
      s = flavor == EmulationFlavor::Vllm ? Semantics::W4A4_VLLM : Semantics::W4A4;
      from = ov.emulation_from + (ov.flavor && ov.flavor_from != ov.emulation_from ? ", " + ov.flavor_from : "");
    }
    sel.semantics = s;
    reasons.push_back(from);
    const bool explicit_lt = ov.executor && *ov.executor == Executor::Cublaslt;
    if (s == Semantics::W4A4 && (explicit_lt || (!emulation && !ov.executor && native_ok))) {
      // Native numerics on native hardware (asked for, or the default executor of w4a4 when available).
      if (!native_ok) throw Error(ov.executor_from + ": " + native.full);
      sel.executor = Executor::Cublaslt;
      if (explicit_lt) reasons.push_back(ov.executor_from);
    } else {
      own_executor(std::string(semantics_name(s)) + " (" + from + ")");
    }
  } else {
    // W4A4 checkpoint, default semantics: native if possible, else W4A16 with a one-time warning.
    if (ov.executor && *ov.executor == Executor::Cublaslt) {
      if (!native_ok) throw Error(ov.executor_from + ": " + native.full);
      sel.semantics = Semantics::W4A4;
      sel.executor = Executor::Cublaslt;
      reasons.push_back("W4A4 checkpoint, native FP4 (" + ov.executor_from + ")");
    } else if (native_ok && !ov.executor) {
      sel.semantics = Semantics::W4A4;
      sel.executor = Executor::Cublaslt;
      reasons.push_back("W4A4 checkpoint, native FP4 on " + dev.describe());
    } else {
      sel.semantics = Semantics::W4A16;
      std::string why = native_ok ? ov.executor_from + " instead of cublaslt" : native.brief;
      reasons.push_back("W4A4 checkpoint, no native FP4 (" + why + ")");
      own_executor("W4A16");
      sel.warning = fallback_warning(dev.is_gpu ? dev.name : "the CPU", why);
    }
  }
  if (ov.flavor && !emulation && !ov.semantics && scheme == LayerScheme::W4A4)
    reasons.push_back(ov.flavor_from + " ignored: emulation not requested");
  if (!warn_exec.empty()) sel.warning = sel.warning.empty() ? warn_exec : sel.warning + " " + warn_exec;
  sel.device = sel.executor == Executor::Cpu ? -1 : std::max(dev.index, 0);
  std::string r;
  for (const auto& x : reasons) r += (r.empty() ? "" : "; ") + x;
  sel.reason = r;
  return sel;
}

std::string Selection::str() const {
  std::string s = std::string(semantics_name(semantics)) + " on " + executor_name(executor);
  if (executor != Executor::Cpu) s += ":" + std::to_string(device);
  return s + " (" + reason + ")";
}

DeviceInfo detect_device(const Overrides& ov) {
  if (ov.device && ov.device->cpu) return DeviceInfo::cpu(ov.device_from);
  if (ov.device) {
    const int idx = ov.device->index < 0 ? 0 : ov.device->index;
    DeviceInfo d = query_device(idx);
    if (!d.is_gpu) throw Error(ov.device_from + ": " + d.note);
    return d;
  }
  return query_device(0);  // the CPU with the reason in note when no GPU is usable
}

void report_selection(const Selection& sel, const Reporter& rep) {
  static std::mutex mu;
  static std::set<std::string> seen;
  bool new_warning = false, new_decision = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!sel.warning.empty()) new_warning = seen.insert("W|" + sel.warning).second;
    new_decision = seen.insert("D|" + sel.str()).second;
  }
  if (new_warning) rep.warn(sel.warning);
  if (new_decision) rep.info("linear: " + sel.str());
}

std::string explain_dispatch(const DeviceInfo& dev, const BuildInfo& build, const Overrides& ov) {
  std::ostringstream o;
  o << "device:    " << (dev.is_gpu ? dev.describe() + ", " + std::to_string(dev.sm_count) + " SMs, " +
                                          std::to_string(dev.memory_bytes >> 20) + " MiB"
                                    : "CPU" + (dev.note.empty() ? std::string() : " (" + dev.note + ")"))
    << "\n";
  if (dev.is_gpu)
    o << "image:     " << (dev.image_sm < 0 ? "not probed" : dev.image_sm == 0 ? "none for this device"
                                                                                   : "sm_" + std::to_string(dev.image_sm))
      << "\n";
  o << "build:     " << (build.cuda ? "CUDA, archs " + build.archs_string() : "CPU only") << "\n";
  if (build.cuda)
    o << "runtime:   CUDA runtime " << cudart_version_string(build.cudart_version) << ", driver "
      << cudart_version_string(build.driver_version) << ", cuBLASLt "
      << cublaslt_version_string(build.cublaslt_version) << "\n";
  std::string why;
  o << "native FP4 (cublaslt): " << (native_fp4_possible(dev, build, &why) ? "yes" : "no: " + why) << "\n";
  o << "cuda kernels:          " << (cuda_kernels_possible(dev, build, &why) ? "yes" : "no: " + why) << "\n";
  if (cuda_kernels_capability(dev, build).ok) {
    const Capability w = wgmma_kernel_capability(dev, build);
    o << "  M > 32 (prefill):    "
      << (w.ok ? "Hopper wgmma kernel (also M = 17-32 on layers of >= " + std::to_string(kWgmmaFrom17MinWeights >> 20) +
                     " Mi weights and on smaller ones where the decode kernel's grid is estimated slower; on small "
                     "layers whose decode grid is estimated faster to M = 64, from M = 65)"
               : "decode kernel, 32-token tiles (no wgmma kernel: " + w.brief + ")")
      << "\n";
  }
  auto show = [&](const char* name, bool set, const std::string& v, const std::string& from) {
    o << "  " << name << ": " << (set ? v + " (" + from + ")" : "default") << "\n";
  };
  o << "overrides:\n";
  show("executor", ov.executor.has_value(), ov.executor ? executor_name(*ov.executor) : "", ov.executor_from);
  show("emulation", ov.emulation.has_value(), ov.emulation ? (*ov.emulation ? "on" : "off") : "",
       ov.emulation_from);
  show("flavour", ov.flavor.has_value(), ov.flavor ? flavor_name(*ov.flavor) : "", ov.flavor_from);
  show("device", ov.device.has_value(), ov.device ? ov.device->str() : "", ov.device_from);
  for (LayerScheme s : {LayerScheme::W4A4, LayerScheme::W4A16}) {
    o << (s == LayerScheme::W4A4 ? "W4A4 layer:  " : "W4A16 layer: ");
    try {
      const Selection sel = select_linear(dev, build, s, ov);
      o << sel.str() << "\n";
      if (!sel.warning.empty()) o << "  warning: " << sel.warning << "\n";
    } catch (const Error& e) {
      o << "error: " << e.what() << "\n";
    }
  }
  return o.str();
}

}  // namespace nvfp4
