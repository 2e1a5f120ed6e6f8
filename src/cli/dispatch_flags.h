// The dispatch flags shared by the verbs that load quantized layers (run, eval, linear, bench, inspect):
//   --device cpu|cuda|cuda:N          where layers run (default: CUDA device 0 if usable, else the CPU)
//   --linear-backend cpu|cuda|cublaslt executor of the quantized linears (default: chosen per SPEC §6)
//   --emulation[=native|vllm]         W4A4 numerics on this project's kernels (W4A4 checkpoints only); a bare
//                                     --emulation takes the flavour from NVFP4_EMULATION_FLAVOR (default native)
// Turned, together with the environment (linear/select.h: overrides_from_env), into one nvfp4::Overrides;
// a flag wins over the environment.
#pragma once
#include <string>

#include "linear/select.h"

namespace CLI { class App; }

namespace nvfp4::cli {

struct DispatchFlags {
  std::string device;          // "" = not given
  std::string linear_backend;  // "" = not given
  std::string emulation;       // "" = not given; "on" for a bare --emulation; "native" / "vllm"
};

// Adds the three flags to `app`, storing into *f (which must outlive app.parse()).
void add_dispatch_flags(CLI::App& app, DispatchFlags* f);

// Flags parsed and validated (nvfp4::UsageError listing the valid values), merged over the environment.
Overrides dispatch_overrides(const DispatchFlags& f);
// Same with an injectable environment (tests).
Overrides dispatch_overrides(const DispatchFlags& f, const GetEnvFn& getenv);

}  // namespace nvfp4::cli
