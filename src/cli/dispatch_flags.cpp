// Dispatch flags of the CLI (see dispatch_flags.h).
#include "cli/dispatch_flags.h"

#include <CLI/CLI.hpp>

#include "common/error.h"

namespace nvfp4::cli {

void add_dispatch_flags(CLI::App& app, DispatchFlags* f) {
  // Validators make a bad value a parse error (exit 2) listing the valid values, before anything is loaded.
  const CLI::Validator device_check(
      [](std::string& v) -> std::string {
        try {
          parse_device_request(v, "--device");
        } catch (const UsageError&) {
          return "invalid value '" + v + "' (valid: cpu, cuda, cuda:N)";
        }
        return std::string();
      },
      "cpu|cuda|cuda:N");
  app.add_option("--device", f->device, "Where quantized layers run: cpu, cuda or cuda:N (env NVFP4_DEVICE)")
      ->check(device_check);
  app.add_option("--linear-backend", f->linear_backend,
                 "Executor of quantized linears: cpu, cuda or cublaslt (env NVFP4_LINEAR_BACKEND; default: "
                 "cublaslt for W4A4 on Blackwell, else cuda, else cpu)")
      ->check(CLI::IsMember({"cpu", "cuda", "cublaslt"}));
  // A flag with an optional value: `--emulation` alone turns emulation on (flavour from
  // NVFP4_EMULATION_FLAVOR, default native); `--emulation=native|vllm` also picks the flavour. (A flag, not an
  // option, so that `--emulation DIR` never takes DIR as the flavour.)
  app.add_flag("--emulation{on}", f->emulation,
               "W4A4 numerics on this project's kernels for W4A4 checkpoints: --emulation[=native|vllm] "
               "(env NVFP4_USE_EMULATION=1, NVFP4_EMULATION_FLAVOR)")
      ->check(CLI::IsMember({"on", "native", "vllm"}));
  // The environment is checked once parsing is done, so an invalid NVFP4_* value is also a usage error
  // before any file is read (nvfp4::UsageError propagates out of parse; the command exits 2).
  app.final_callback([f]() { (void)dispatch_overrides(*f); });
}

Overrides dispatch_overrides(const DispatchFlags& f, const GetEnvFn& getenv) {
  Overrides flags;
  if (!f.device.empty()) {
    flags.device = parse_device_request(f.device, "--device");
    flags.device_from = "--device " + f.device;
  }
  if (!f.linear_backend.empty()) {
    Executor e;
    if (!executor_from_name(f.linear_backend, &e))
      throw UsageError("--linear-backend: invalid value '" + f.linear_backend + "' (valid: cpu, cuda, cublaslt)");
    flags.executor = e;
    flags.executor_from = "--linear-backend " + f.linear_backend;
  }
  if (!f.emulation.empty()) {
    flags.emulation = true;
    if (f.emulation == "on") {
      flags.emulation_from = "--emulation";
    } else {
      EmulationFlavor fl;
      if (!flavor_from_name(f.emulation, &fl))
        throw UsageError("--emulation: invalid value '" + f.emulation +
                         "' (valid: --emulation, --emulation=native, --emulation=vllm)");
      flags.emulation_from = "--emulation=" + f.emulation;
      flags.flavor = fl;
      flags.flavor_from = flags.emulation_from;
    }
  }
  return merge_overrides(flags, overrides_from_env(getenv));
}

Overrides dispatch_overrides(const DispatchFlags& f) { return dispatch_overrides(f, nullptr); }

}  // namespace nvfp4::cli
