// Model quantization: an HF model (directory or single .safetensors; bf16/fp16/fp32 weights) to an NVFP4
// checkpoint in compressed-tensors (SPEC §3, bit-exact with compressed-tensors) or ModelOpt layout.
//
// What is quantized: every 2-D linear weight (io::Checkpoint::linears()) not matched by an ignore pattern
// (default "lm_head"). Fused sets (q/k/v of one attention block, gate/up or w1/w3 of one MLP; see
// io::fused_set_key) share one compressed-tensors weight global scale, computed from the largest amax of the
// set. Everything else (norms, embeddings, biases, ignored layers) is copied byte for byte, other files of
// the directory (tokenizer, generation config) are copied, config.json gets a quantization_config
// (and hf_quant_config.json is written for ModelOpt). Input shards map to output shards of the same names.
//
// Cost: a weight outside a fused set is decoded once (its amax comes from the values it is quantized from);
// members of a fused set are scanned once more beforehand, a block of rows at a time, for the set's amax.
// Output shards are streamed: pass-through tensors are written straight from the memory-mapped input, not
// copied, and a module is quantized when its tensors are due and freed once written, so that the memory
// used beyond the mapping is about one weight in f32 plus its NVFP4 result.
//
// The output is built in a temporary directory next to `out` and renamed into place only when complete;
// on failure nothing is left behind. The input is never modified.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/log.h"
#include "io/checkpoint.h"

namespace nvfp4::io {

struct QuantizeOptions {
  // NVFP4 (W4A4) or NVFP4A16 (W4A16). Required for an unquantized input; an already quantized input is
  // converted to `format` (codes and block scales copied byte for byte) and keeps its scheme (None = keep).
  QuantScheme scheme = QuantScheme::None;
  CheckpointFormat format = CheckpointFormat::CompressedTensors;  // or ModelOpt
  std::vector<std::string> ignore = {"lm_head"};                // module names, "re:<regex>", '*' globs
  std::map<std::string, float> calib_amax;  // NVFP4 only: module -> max |x| of its input (every module)
  bool force = false;                       // replace an existing `out`
};

struct QuantizeSummary {
  bool converted = false;       // the input was NVFP4 and was converted to the other format
  size_t quantized = 0;         // linear modules quantized (or converted)
  size_t copied = 0;            // tensors copied unchanged
  std::vector<std::string> ignored;  // linear modules left unquantized
  uint64_t in_bytes = 0;        // tensor bytes read
  uint64_t out_bytes = 0;       // tensor bytes written
};

// Throws nvfp4::Error (nvfp4::UsageError for option problems: missing calibration entries, output exists).
QuantizeSummary quantize_model(const std::string& in, const std::string& out, const QuantizeOptions& opt,
                               const Reporter& rep = {});

}  // namespace nvfp4::io
