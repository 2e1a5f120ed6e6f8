// nvfp4 calibrate -m DIR -f FILE -o amax.json: max |x| of every linear's input over a text, the input of
// `nvfp4 quantize --scheme nvfp4 --calib-amax`.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/verbs.h"
#include "common/error.h"
#include "common/parallel.h"
#include "io/checkpoint.h"
#include "model/llama.h"
#include "model/text_session.h"

namespace {

int run_calibrate(int argc, char** argv) {
  CLI::App app{"Record max |x| of each linear layer's input over a text (calibration for W4A4 quantization)"};
  std::string dir, file, out;
  int64_t window = 512, max_tokens = 0;
  bool verbose = false;
  int threads = 0;
  app.add_option("-m,--model", dir, "unquantized model directory")->required();
  app.add_option("-f,--file", file, "calibration text (UTF-8)")->required();
  app.add_option("-o,--output", out, "output JSON file {module: amax}")->required();
  app.add_option("--ctx", window, "window size in tokens (default 512)")->check(CLI::Range(int64_t(2), int64_t(1) << 20));
  app.add_option("--max-tokens", max_tokens, "use only the first N tokens (0 = all)")->check(CLI::Range(int64_t(0), int64_t(1) << 40));
  app.add_option("-t,--threads", threads, "CPU threads")->check(CLI::Range(0, nvfp4::kMaxThreads));
  app.add_flag("-v,--verbose", verbose, "debug logging");
  if (int rc = nvfp4::cli::parse(app, argc, argv); rc >= 0) return rc;
  if (threads > 0) nvfp4::set_num_threads(threads);
  const auto rep = nvfp4::cli::stderr_reporter(verbose);
  nvfp4::model::LoadOptions lo;
  lo.max_context = window;
  lo.record_input_amax = true;
  const auto tok = nvfp4::model::load_tokenizer(dir);
  const std::vector<int32_t> ids = nvfp4::model::tokenize_text_file(tok, file, max_tokens);
  auto model = nvfp4::model::LlamaModel::load(dir, lo, rep);
  const auto r = nvfp4::model::perplexity(*model, ids, window, [&](int64_t d, int64_t t) {
    rep.step("window", static_cast<size_t>(d), static_cast<size_t>(t));
  });
  std::map<std::string, float> amax;
  for (const auto& [name, v] : model->input_amax()) {
    if (name.rfind("lm_head", 0) == 0) continue;  // lm_head stays unquantized (and may be tied)
    amax[name] = v;
  }
  nvfp4::io::write_calib_amax(out, amax);
  std::printf("calibrated %zu linears over %zu tokens (perplexity %.4f) -> %s\n", amax.size(), ids.size(),
              r.perplexity(), out.c_str());
  return 0;
}

}  // namespace

NVFP4_REGISTER_VERB("calibrate", "record each linear's input max |x| over a text (for W4A4 quantization)", run_calibrate);
