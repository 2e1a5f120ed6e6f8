// nvfp4 quantize IN OUT --scheme nvfp4a16|nvfp4 [--format compressed-tensors|modelopt] [--ignore PATTERN]...
//                [--calib-amax FILE] [--force]
// bf16/fp16/fp32 HF model -> NVFP4 checkpoint (io/quantize.h). An NVFP4 input is converted to the other
// format instead (codes and block scales copied byte for byte).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "cli/verbs.h"
#include "common/error.h"
#include "io/quantize.h"

namespace nvfp4::cli {
namespace {


int run_quantize(int argc, char** argv) {
  CLI::App app{"Quantize an HF model (bf16/fp16/fp32) to an NVFP4 checkpoint, or convert an NVFP4 checkpoint "
               "between compressed-tensors and ModelOpt"};
  std::string in, out, scheme, format = "compressed-tensors", calib;
  std::vector<std::string> ignore;
  bool force = false, verbose = false;
  app.add_option("IN", in, "model directory or .safetensors file")->required();
  app.add_option("OUT", out, "output model directory (must not exist unless --force)")->required();
  app.add_option("--scheme", scheme, "nvfp4 (W4A4, needs --calib-amax) or nvfp4a16 (W4A16)")
      ->check(CLI::IsMember({"nvfp4", "nvfp4a16"}));
  app.add_option("--format", format, "compressed-tensors (default) or modelopt")
      ->check(CLI::IsMember({"compressed-tensors", "modelopt"}));
  app.add_option("--ignore", ignore,
                 "module to leave unquantized: exact name, 're:<regex>' (anchored at the start) or '*' glob; "
                 "repeatable; lm_head is always ignored");
  app.add_option("--calib-amax", calib, "JSON {module name: max |x| of its input} (needed by --scheme nvfp4)");
  app.add_flag("--force", force, "replace OUT if it exists");
  app.add_flag("-v,--verbose", verbose, "debug messages");
  if (int rc = parse(app, argc, argv); rc >= 0) return rc;

  io::QuantizeOptions opt;
  opt.scheme = scheme.empty() ? io::QuantScheme::None
               : scheme == "nvfp4" ? io::QuantScheme::NVFP4 : io::QuantScheme::NVFP4A16;
  opt.format = format == "modelopt" ? io::CheckpointFormat::ModelOpt : io::CheckpointFormat::CompressedTensors;
  for (const auto& p : ignore)
    if (p != "lm_head") opt.ignore.push_back(p);
  opt.force = force;
  if (!calib.empty()) {
    if (opt.scheme != io::QuantScheme::NVFP4)
      throw UsageError("--calib-amax applies to --scheme nvfp4 only");
    opt.calib_amax = io::read_calib_amax(calib);
  }
  if (opt.scheme == io::QuantScheme::NVFP4 && calib.empty())
    throw UsageError("--scheme nvfp4 (W4A4) needs activation ranges: pass --calib-amax FILE "
                     "(JSON {module: max |x|}), or use --scheme nvfp4a16");

  const Reporter rep = stderr_reporter(verbose);
  const io::QuantizeSummary s = io::quantize_model(in, out, opt, rep);
  std::printf("wrote %s (%s)\n", out.c_str(), format.c_str());
  std::printf("  linear modules %s: %zu\n", s.converted ? "converted (codes and scales copied)" : "quantized",
              s.quantized);
  std::printf("  linear modules left unquantized: %zu%s", s.ignored.size(), s.ignored.empty() ? "\n" : " (");
  for (size_t i = 0; i < s.ignored.size(); ++i)
    std::printf("%s%s", s.ignored[i].c_str(), i + 1 < s.ignored.size() ? ", " : ")\n");
  std::printf("  tensors copied unchanged: %zu\n", s.copied);
  std::printf("  tensor bytes: %s -> %s (%.2fx smaller)\n", human_bytes(s.in_bytes).c_str(),
              human_bytes(s.out_bytes).c_str(), s.out_bytes ? double(s.in_bytes) / double(s.out_bytes) : 0.0);
  return 0;
}

}  // namespace

NVFP4_REGISTER_VERB("quantize", "quantize an HF model to NVFP4 (compressed-tensors or ModelOpt)", run_quantize);

}  // namespace nvfp4::cli
