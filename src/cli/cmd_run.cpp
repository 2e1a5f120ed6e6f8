// nvfp4 run -m DIR -p TEXT [-n N] [--chat] ...: generate text with a Llama-family model (bf16 or NVFP4).
// Generated text goes to stdout as it is produced; the executor report and a llama.cpp-style timing block go
// to stderr.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "cli/dispatch_flags.h"
#include "cli/model_flags.h"
#include "cli/verbs.h"
#include "common/error.h"
#include "common/parallel.h"
#include "model/llama.h"
#include "model/sampler.h"
#include "model/text_session.h"

namespace {

using clk = std::chrono::steady_clock;
double ms_since(clk::time_point t) { return std::chrono::duration<double, std::milli>(clk::now() - t).count(); }

int run_generate(int argc, char** argv) {
  CLI::App app{"Generate text with a Llama-family model directory (bf16/fp16/fp32 or NVFP4)"};
  std::string dir, prompt, system;
  int64_t n_predict = 64, ctx = 2048;
  bool chat = false, raw = false, print_tokens = false, ignore_eos = false;
  nvfp4::model::SamplerOptions so;
  nvfp4::cli::ModelFlags mf;
  app.add_option("-m,--model", dir, "model directory")->required();
  app.add_option("-p,--prompt", prompt, "prompt text")->required();
  app.add_option("-n,--n-predict", n_predict, "tokens to generate (default 64)")->check(CLI::Range(int64_t(0), int64_t(1) << 20));
  app.add_flag("--chat", chat, "wrap the prompt in the model's chat template (ChatML, Llama 3 or Llama 2 [INST])");
  app.add_option("--system", system, "system message for --chat (default: the template's own, if any)");
  app.add_option("--seed", so.seed, "sampling seed (default 0)");
  app.add_option("--temp", so.temperature, "temperature; 0 = greedy (default 0)")->check(CLI::Range(0.0f, 100.0f));
  app.add_option("--top-k", so.top_k, "top-k cut; 0 = none (default 40)")->check(CLI::Range(0, 1 << 30));
  app.add_option("--top-p", so.top_p, "nucleus cut; 1 = none (default 0.95)")->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--ctx", ctx, "context (KV cache) size in tokens (default 2048)")->check(CLI::Range(int64_t(2), int64_t(1) << 20));
  app.add_flag("--ignore-eos", ignore_eos, "keep generating after an end-of-sequence token (speed measurements)");
  app.add_flag("--raw", raw, "print special tokens too");
  app.add_flag("--print-tokens", print_tokens,
               "print the prompt's token ids (after --chat) as a JSON list and exit without loading the weights");
  nvfp4::cli::add_model_flags(app, &mf);
  if (int rc = nvfp4::cli::parse(app, argc, argv); rc >= 0) return rc;
  nvfp4::model::LoadOptions lo = nvfp4::cli::model_load_options(mf);  // validates the flags up front
  const auto rep = nvfp4::cli::stderr_reporter(mf.verbose);

  const auto t_load = clk::now();
  auto tok = nvfp4::model::load_tokenizer(dir);

  std::string text = prompt;
  if (chat) {
    const std::string tmpl = nvfp4::model::load_chat_template(dir);
    const auto fmt = nvfp4::model::detect_chat_format(tmpl);
    if (fmt == nvfp4::model::ChatFormat::None) {
      throw nvfp4::Error(dir + "/tokenizer_config.json: no ChatML, Llama 3 or Llama 2 chat template; run without --chat");
    }
    const std::string sys = system.empty() ? nvfp4::model::default_system_message(tmpl) : system;
    text = nvfp4::model::apply_chat_template(fmt, prompt, sys);
  }
  std::vector<int32_t> ids;
  if (tok.add_bos() && tok.bos_id() >= 0 && text.rfind("<|begin_of_text|>", 0) != 0) ids.push_back(tok.bos_id());
  const auto enc = tok.encode(text, true);
  ids.insert(ids.end(), enc.begin(), enc.end());
  if (print_tokens) {
    std::string out = "[";
    for (size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
    std::printf("%s]\n", out.c_str());
    return 0;
  }
  if (ids.empty()) throw nvfp4::UsageError("the prompt encodes to no tokens");
  lo.max_context = ctx;
  auto model = nvfp4::model::LlamaModel::load(dir, lo, rep);
  const double load_ms = ms_since(t_load);
  for (const auto& e : model->executor_summary()) {
    std::fprintf(stderr, "nvfp4: %-40s %3d x %s\n", e.group.c_str(), e.count, e.how.c_str());
  }
  if (static_cast<int64_t>(ids.size()) + n_predict > model->context_capacity()) {
    throw nvfp4::UsageError("prompt (" + std::to_string(ids.size()) + " tokens) + -n " + std::to_string(n_predict) +
                            " exceeds the context of " + std::to_string(model->context_capacity()) + " (raise --ctx)");
  }
  std::vector<int32_t> stops = model->config().eos_ids;
  for (const char* s : {"<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<|end_of_text|>"}) {
    const int32_t id = tok.token_id(s);
    if (id >= 0 && (chat || std::string(s) != "<|im_end|>")) stops.push_back(id);
  }

  const int64_t vocab = model->config().vocab;
  std::vector<float> logits(static_cast<size_t>(vocab));
  nvfp4::model::Sampler sampler(so);
  const auto t_prompt = clk::now();
  model->forward(ids.data(), static_cast<int64_t>(ids.size()), logits.data(), false);
  const double prompt_ms = ms_since(t_prompt);

  int64_t generated = 0;
  double eval_ms = 0, sample_ms = 0;
  const auto t_gen = clk::now();
  for (int64_t i = 0; i < n_predict; ++i) {
    const auto ts = clk::now();
    const int32_t next = sampler.sample(logits.data(), vocab);
    sample_ms += ms_since(ts);
    ++generated;
    const bool stop = !ignore_eos && std::find(stops.begin(), stops.end(), next) != stops.end();
    if (!stop || raw) {
      if (raw || !tok.is_special(next)) {
        const std::string piece = tok.token_bytes(next);
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      }
    }
    if (stop || i + 1 == n_predict) break;
    const auto te = clk::now();
    model->forward(&next, 1, logits.data(), false);
    eval_ms += ms_since(te);
  }
  const double total_ms = ms_since(t_load);
  (void)t_gen;
  std::printf("\n");
  std::fflush(stdout);
  const int64_t evals = std::max<int64_t>(generated - 1, 0);
  const auto per = [](double ms, int64_t n) { return n ? ms / static_cast<double>(n) : 0.0; };
  const auto tps = [](double ms, int64_t n) { return ms > 0 ? 1000.0 * static_cast<double>(n) / ms : 0.0; };
  std::fprintf(stderr, "\nnvfp4: load time        = %10.2f ms\n", load_ms);
  std::fprintf(stderr, "nvfp4: sampling time    = %10.2f ms / %5lld runs   (%8.2f ms per token, %8.2f tokens per second)\n",
               sample_ms, static_cast<long long>(generated), per(sample_ms, generated), tps(sample_ms, generated));
  std::fprintf(stderr, "nvfp4: prompt eval time = %10.2f ms / %5zu tokens (%8.2f ms per token, %8.2f tokens per second)\n",
               prompt_ms, ids.size(), per(prompt_ms, static_cast<int64_t>(ids.size())),
               tps(prompt_ms, static_cast<int64_t>(ids.size())));
  std::fprintf(stderr, "nvfp4:        eval time = %10.2f ms / %5lld runs   (%8.2f ms per token, %8.2f tokens per second)\n",
               eval_ms, static_cast<long long>(evals), per(eval_ms, evals), tps(eval_ms, evals));
  std::fprintf(stderr, "nvfp4:       total time = %10.2f ms / %5lld tokens\n", total_ms,
               static_cast<long long>(ids.size() + static_cast<size_t>(generated)));
  std::fprintf(stderr, "nvfp4: threads = %d\n", nvfp4::num_threads());
  if (model->ops_on_device())
    std::fprintf(stderr, "nvfp4: decode steps %s\n",
                 model->decode_graph_active() ? "replayed from a CUDA graph" : "launched kernel by kernel");
  return 0;
}

}  // namespace

NVFP4_REGISTER_VERB("run", "generate text with a model (llama.cpp-style timings)", run_generate);
