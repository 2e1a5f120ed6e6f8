// nvfp4 linear --ckpt PATH --layer NAME --input X.safetensors --output Y.safetensors
//              [--semantics w4a16|w4a4|w4a4-vllm]
// Applies one quantized layer (with its bias) to a batch of inputs on the CPU executor: the tool for
// debugging and cross-checking a layer against another implementation.
//   input:  a .safetensors file with one tensor (or the one named by --tensor): (M, K) or (K,) BF16/F16
//   output: a .safetensors file with tensor "y": (M, N) in the input's dtype
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/linear.h"
#include "cli/verbs.h"
#include "common/error.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"

namespace nvfp4::cli {
namespace {

int run_linear(int argc, char** argv) {
  CLI::App app{"Apply one quantized layer of a checkpoint to inputs (CPU executor)"};
  std::string ckpt, layer, input, output, sem_name, tensor;
  bool verbose = false;
  app.add_option("--ckpt", ckpt, "model directory or .safetensors file")->required();
  app.add_option("--layer", layer, "module name, e.g. model.layers.0.mlp.down_proj")->required();
  app.add_option("--input", input, ".safetensors file holding x (M, K) BF16 or F16")->required();
  app.add_option("--output", output, ".safetensors file to write y (M, N) to")->required();
  app.add_option("--tensor", tensor, "name of x in the input file (default: its only tensor)");
  app.add_option("--semantics", sem_name,
                 "w4a16, w4a4 or w4a4-vllm (default: w4a4 for a W4A4 checkpoint, w4a16 otherwise)")
      ->check(CLI::IsMember({"w4a16", "w4a4", "w4a4-vllm"}));
  app.add_flag("-v,--verbose", verbose, "debug messages");
  if (int rc = parse(app, argc, argv); rc >= 0) return rc;
  const Reporter rep = stderr_reporter(verbose);

  auto ck = io::Checkpoint::open(ckpt, Reporter{});
  const LinearWeights w = ck->load_linear(layer, rep);
  Semantics sem = w.has_input_scale ? Semantics::W4A4 : Semantics::W4A16;
  if (!sem_name.empty()) semantics_from_name(sem_name, &sem);
  if (sem != Semantics::W4A16 && !w.has_input_scale)
    fail("layer '" + layer + "' in '" + ckpt + "' is W4A16 (no input global scale); --semantics " + sem_name +
         " needs a W4A4 checkpoint");

  auto xf = io::SafetensorsFile::open(input);
  const io::TensorView* x = nullptr;
  if (!tensor.empty()) {
    x = &xf->get(tensor);
  } else {
    if (xf->tensors().size() != 1)
      throw UsageError("input '" + input + "' holds " + std::to_string(xf->tensors().size()) +
                       " tensors; name one with --tensor");
    x = &xf->tensors()[0];
  }
  const std::string xw = "tensor '" + x->name + "' in '" + input + "'";
  if (x->dtype != DType::BF16 && x->dtype != DType::F16)
    fail(xw + " has dtype " + dtype_name(x->dtype) + ", expected BF16 or F16");
  if (x->shape.empty() || x->shape.size() > 2)
    fail(xw + " has shape " + x->shape_str() + ", expected (M, K) or (K,)");
  const int64_t k = x->shape.back();
  const int64_t m = x->shape.size() == 2 ? x->shape[0] : 1;
  if (k != w.in_features())
    fail(xw + " has K = " + std::to_string(k) + ", layer '" + layer + "' expects " + std::to_string(w.in_features()));
  const int64_t n = w.out_features();

  std::vector<uint16_t> xb(static_cast<size_t>(m * k)), yb(static_cast<size_t>(m * n));
  if (!xb.empty()) std::memcpy(xb.data(), x->data, x->nbytes);
  const CpuLinear lin(w, sem, x->dtype);
  if (m > 0) lin.run(xb.data(), m, yb.data());

  io::SafetensorsWriter wr;
  std::vector<int64_t> yshape = x->shape.size() == 2 ? std::vector<int64_t>{m, n} : std::vector<int64_t>{n};
  wr.add("y", x->dtype, yshape, yb.data(), yb.size() * 2);
  wr.set_metadata("layer", layer);
  wr.set_metadata("semantics", semantics_name(sem));
  wr.write(output);
  rep.info("linear " + layer + ": " + semantics_name(sem) + " on cpu, x (" + std::to_string(m) + ", " +
           std::to_string(k) + ") -> y (" + std::to_string(m) + ", " + std::to_string(n) + ")" +
           (w.bias.empty() ? "" : " + bias"));
  std::printf("%s\n", output.c_str());
  return 0;
}

}  // namespace

NVFP4_REGISTER_VERB("linear", "apply one quantized layer to inputs from a .safetensors file (CPU)", run_linear);

}  // namespace nvfp4::cli
