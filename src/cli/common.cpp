// Small pieces the verbs share.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "cli/verbs.h"

namespace nvfp4::cli {

std::string human_bytes(uint64_t b) {
  char s[32];
  if (b >= (1ull << 30)) std::snprintf(s, sizeof s, "%.2f GiB", b / double(1ull << 30));
  else if (b >= (1ull << 20)) std::snprintf(s, sizeof s, "%.2f MiB", b / double(1ull << 20));
  else if (b >= (1ull << 10)) std::snprintf(s, sizeof s, "%.2f KiB", b / double(1ull << 10));
  else std::snprintf(s, sizeof s, "%llu B", static_cast<unsigned long long>(b));
  return s;
}

void add_ops_flag(CLI::App& app, std::string* ops) {
  app.add_option("--ops", *ops,
                 "where embedding/norms/RoPE/attention and unquantized linears run: cuda (kernels, activations stay "
                 "on the GPU; needs every quantized linear on the GPU), cpu, or auto (default: cuda when every "
                 "quantized linear of a quantized model runs on a GPU, else cpu)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
}

}  // namespace nvfp4::cli
