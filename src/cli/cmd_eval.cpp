// nvfp4 eval -m DIR -f FILE [--semantics ...]: perplexity of a model over a text file.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/dispatch_flags.h"
#include "cli/model_flags.h"
#include "cli/verbs.h"
#include "common/error.h"
#include "common/parallel.h"
#include "io/checkpoint.h"
#include "model/llama.h"
#include "model/text_session.h"

namespace {

int run_eval(int argc, char** argv) {
  CLI::App app{"Perplexity of a model directory over a text file (consecutive windows, each from an empty cache)"};
  std::string dir, file, nll_out;
  int64_t window = 512, max_tokens = 0;
  bool json = false;
  nvfp4::cli::ModelFlags mf;
  app.add_option("-m,--model", dir, "model directory")->required();
  app.add_option("-f,--file", file, "text file (UTF-8)")->required();
  app.add_option("--ctx", window, "window size in tokens (default 512)")->check(CLI::Range(int64_t(2), int64_t(1) << 20));
  app.add_option("--max-tokens", max_tokens, "score only the first N tokens of the file (0 = all)")->check(CLI::Range(int64_t(0), int64_t(1) << 40));
  app.add_option("--nll-out", nll_out, "write each scored token's negative log-likelihood (one per line) to this file");
  app.add_flag("--json", json, "print one JSON object instead of text");
  nvfp4::cli::add_model_flags(app, &mf);
  if (int rc = nvfp4::cli::parse(app, argc, argv); rc >= 0) return rc;
  nvfp4::model::LoadOptions lo = nvfp4::cli::model_load_options(mf);
  const auto rep = nvfp4::cli::stderr_reporter(mf.verbose);

  lo.max_context = window;
  const auto tok = nvfp4::model::load_tokenizer(dir);
  const std::vector<int32_t> ids = nvfp4::model::tokenize_text_file(tok, file, max_tokens);
  auto model = nvfp4::model::LlamaModel::load(dir, lo, rep);
  std::string how;
  for (const auto& e : model->executor_summary()) {
    if (e.group == "mlp gate/up/down") how = e.how;
  }
  const auto r = nvfp4::model::perplexity(*model, ids, window, [&](int64_t d, int64_t t) {
    rep.step("window", static_cast<size_t>(d), static_cast<size_t>(t));
  });
  if (!nll_out.empty()) {
    std::string txt;
    char buf[32];
    for (double v : r.nll) {
      std::snprintf(buf, sizeof(buf), "%.9g\n", v);
      txt += buf;
    }
    nvfp4::io::write_text_file_atomic(nll_out, txt);
  }
  const double tps = r.seconds > 0 ? static_cast<double>(r.scored + r.windows) / r.seconds : 0.0;
  if (json) {
    nlohmann::ordered_json j;
    j["perplexity"] = r.perplexity();
    j["tokens"] = r.scored;
    j["windows"] = r.windows;
    j["seconds"] = r.seconds;
    j["tokens_per_second"] = tps;
    j["linears"] = how;
    j["ops"] = model->ops_on_device() ? "cuda" : "cpu";  // --ops auto resolved
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("perplexity %.4f over %lld tokens (%lld windows of <= %lld), %.1f tokens/s; linears: %s\n",
                r.perplexity(), static_cast<long long>(r.scored), static_cast<long long>(r.windows),
                static_cast<long long>(window), tps, how.c_str());
  }
  return 0;
}

}  // namespace

NVFP4_REGISTER_VERB("eval", "perplexity of a model over a text file", run_eval);
