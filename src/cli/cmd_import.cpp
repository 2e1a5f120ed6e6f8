// nvfp4 import-gguf IN.gguf OUTDIR: a llama.cpp GGUF Llama-family model -> HF bf16 model directory.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/verbs.h"
#include "model/gguf_import.h"

namespace {

int run_import(int argc, char** argv) {
  CLI::App app{"Convert a GGUF Llama-family model (llama, qwen2; F32/F16/BF16/Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q6_K) "
               "into a Hugging Face bf16 model directory (config.json, model.safetensors, tokenizer.json, ...)"};
  std::string in, out;
  bool force = false, verbose = false;
  app.add_option("IN", in, "GGUF file")->required();
  app.add_option("OUTDIR", out, "output model directory")->required();
  app.add_flag("--force", force, "replace OUTDIR if it exists");
  app.add_flag("-v,--verbose", verbose, "debug logging");
  if (int rc = nvfp4::cli::parse(app, argc, argv); rc >= 0) return rc;
  const auto rep = nvfp4::cli::stderr_reporter(verbose);
  const auto s = nvfp4::model::import_gguf(in, out, force, rep);
  std::printf("imported %s: architecture %s, %lld tensors, %.1fM parameters, vocabulary %lld (pre-tokenizer %s) -> %s\n",
              in.c_str(), s.architecture.c_str(), static_cast<long long>(s.tensors), s.parameters / 1e6,
              static_cast<long long>(s.vocab), s.pretokenizer.c_str(), out.c_str());
  return 0;
}

}  // namespace

NVFP4_REGISTER_VERB("import-gguf", "convert a GGUF Llama-family model into an HF bf16 model directory", run_import);
