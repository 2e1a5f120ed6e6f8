// The options the model verbs (run, eval) share: --semantics, --ops, the dispatch flags (dispatch_flags.h),
// -t/--threads and -v/--verbose, and what they turn into.
#pragma once
#include <string>

#include "cli/dispatch_flags.h"
#include "model/llama.h"

namespace nvfp4::cli {

struct ModelFlags {
  std::string semantics;  // "" = dispatch decides
  std::string ops = "auto";
  int threads = 0;        // 0 = NVFP4_NUM_THREADS or all cores
  bool verbose = false;
  DispatchFlags dispatch;
};

// Adds the options to `app`, storing into *f (which must outlive app.parse()).
void add_model_flags(CLI::App& app, ModelFlags* f);

// After parsing: validates every value (nvfp4::UsageError listing the valid ones), applies --threads, and returns
// load options with the overrides (flags over the environment, --semantics folded in) and --ops set.
model::LoadOptions model_load_options(const ModelFlags& f);

}  // namespace nvfp4::cli
