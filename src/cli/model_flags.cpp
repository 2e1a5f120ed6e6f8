#include "cli/model_flags.h"

#include <CLI/CLI.hpp>

#include <cstdlib>
#include <string>

#include "cli/verbs.h"
#include "common/error.h"
#include "common/parallel.h"
#include "linear/select.h"

namespace nvfp4::cli {

void add_model_flags(CLI::App& app, ModelFlags* f) {
  app.add_option("--semantics", f->semantics,
                 "semantics of the quantized linears: w4a16, w4a4 or w4a4-vllm (default: dispatch)");
  app.add_option("-t,--threads", f->threads, "CPU threads (default: NVFP4_NUM_THREADS or all cores)")
      ->check(CLI::Range(0, kMaxThreads));
  app.add_flag("-v,--verbose", f->verbose, "debug logging");
  add_ops_flag(app, &f->ops);
  add_dispatch_flags(app, &f->dispatch);
}

model::LoadOptions model_load_options(const ModelFlags& f) {
  model::LoadOptions lo;
  lo.overrides = dispatch_overrides(f.dispatch);
  if (!f.semantics.empty()) {
    Semantics s;
    if (!semantics_from_name(f.semantics, &s))
      throw UsageError("--semantics: invalid value '" + f.semantics + "' (valid: w4a16, w4a4, w4a4-vllm)");
    lo.overrides.semantics = s;
    lo.overrides.semantics_from = "--semantics " + f.semantics;
  }
  lo.ops_on_device = f.ops == "cuda";
  lo.ops_auto = f.ops == "auto";
  const char* graphs = std::getenv("NVFP4_CUDA_GRAPHS");
  if (graphs && *graphs) lo.cuda_graphs = parse_bool_setting(graphs, "NVFP4_CUDA_GRAPHS");
  if (f.threads > 0) set_num_threads(f.threads);
  return lo;
}

}  // namespace nvfp4::cli
