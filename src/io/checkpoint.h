// Hugging Face model directories: config.json, the quantization description (compressed-tensors or ModelOpt,
// SPEC §3) and the tensors, mapped to one canonical in-memory form (format/quant.h LinearWeights: linear
// block scales, GlobalScale holding both directions). Checkpoint conventions are converted here and nowhere
// else:
//   compressed-tensors: P.weight_packed U8 [N,K/2], P.weight_scale F8_E4M3 [N,K/16],
//                       P.weight_global_scale F32 [1] (divisor form), P.input_global_scale F32 [1] (W4A4)
//   ModelOpt:           P.weight U8 [N,K/2], P.weight_scale F8_E4M3 [N,K/16], P.weight_scale_2 F32 scalar
//                       (multiplier form), P.input_scale F32 scalar (multiplier form, W4A4)
// Fused shards (q/k/v, gate/up) are separate modules on disk and keep their own scales here.
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/log.h"
#include "format/quant.h"
#include "io/safetensors.h"

namespace nvfp4::io {

enum class CheckpointFormat : uint8_t {
  Unquantized,        // plain HF model (bf16/fp16/fp32 weights)
  CompressedTensors,  // quant_method "compressed-tensors", format "nvfp4-pack-quantized"
  ModelOpt,           // quant_method "modelopt" / hf_quant_config.json quant_algo "NVFP4"
};
const char* format_name(CheckpointFormat f);  // "unquantized", "compressed-tensors", "modelopt"

enum class QuantScheme : uint8_t {
  None,      // not quantized (a plain .weight)
  NVFP4,     // W4A4: NVFP4 weights and activations (an input global scale is stored)
  NVFP4A16,  // W4A16: NVFP4 weights, activations in the model dtype
};
const char* scheme_name(QuantScheme s);  // "none", "nvfp4", "nvfp4a16"

// The tensors of one linear module P are named P + suffix. These are the only spellings of the suffixes in io/.
constexpr const char* kWeightSuffix = ".weight";  // unquantized weight, float [N, K]; ModelOpt's NVFP4 codes
constexpr const char* kBiasSuffix = ".bias";      // [N], model dtype, never quantized
// The suffixes of a quantized linear in one checkpoint format (the layout is in the comment at the top).
struct LinearTensorSuffixes {
  const char* codes;          // U8 [N, K/2] e2m1x2
  const char* block_scales;   // F8_E4M3 [N, K/16], linear
  const char* weight_global;  // F32 weight global scale (divisor form in compressed-tensors, multiplier in ModelOpt)
  const char* input_global;   // F32 activation global scale, W4A4 only (same directions)
};
constexpr LinearTensorSuffixes kCompressedTensorsSuffixes{".weight_packed", ".weight_scale", ".weight_global_scale",
                                                          ".input_global_scale"};
constexpr LinearTensorSuffixes kModelOptSuffixes{".weight", ".weight_scale", ".weight_scale_2", ".input_scale"};
// CompressedTensors or ModelOpt (an unquantized format has none: throws nvfp4::Error).
const LinearTensorSuffixes& linear_tensor_suffixes(CheckpointFormat f);

// The parts of config.json the project uses. Missing integer fields are 0; `raw_json` keeps the whole file.
struct ModelConfig {
  std::string architecture;      // architectures[0], e.g. "LlamaForCausalLM" ("" when absent)
  std::string model_type;        // "llama", "qwen2", ...
  DType dtype = DType::BF16;     // torch_dtype ("bfloat16"/"float16"/"float32"); BF16 when absent
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // = num_attention_heads when absent
  int64_t head_dim = 0;             // = hidden_size / num_attention_heads when absent
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  bool tie_word_embeddings = false;
  std::string raw_json;             // config.json as read ("" when the model has none)
};

// The quantization description, whatever file it came from.
struct QuantConfig {
  CheckpointFormat format = CheckpointFormat::Unquantized;
  QuantScheme scheme = QuantScheme::None;  // scheme of the quantized layers
  int group_size = 16;
  std::vector<std::string> targets;        // compressed-tensors config_groups targets ("Linear", "re:...")
  std::vector<std::string> ignore;         // ignore / exclude_modules ("lm_head", "re:...", globs for ModelOpt)
  // True when `module` (with class name `cls`, "Linear" for every linear) is quantized by this config:
  // matches a target and no ignore entry. "re:<regex>" matches anchored at the start of the name; other
  // strings match the exact module name or the class name; ModelOpt entries may use '*' globs.
  bool quantizes(const std::string& module, const std::string& cls = "Linear") const;
  bool ignored(const std::string& module) const;
};

// Matches one targets/ignore entry against a module name (rule above). Exposed for tests and quantize.
bool module_pattern_matches(const std::string& pattern, const std::string& module, const std::string& cls);

// One linear module found in the tensors (a 2-D P.weight, or P.weight_packed / NVFP4 P.weight).
struct LinearInfo {
  std::string name;                 // module name, e.g. "model.layers.0.mlp.up_proj"
  QuantScheme scheme = QuantScheme::None;
  int64_t out_features = 0;         // N
  int64_t in_features = 0;          // K (unpacked)
  DType weight_dtype = DType::BF16; // U8 for packed NVFP4 weights
  bool has_bias = false;
};

// Problem found while opening or loading (kept for `inspect`; also sent to the Reporter as a warning).
struct Problem {
  std::string tensor;   // tensor or module it concerns ("" for the whole model)
  std::string message;  // one line
};

// What check_quantized_linear found out about one quantized linear module P.
struct QuantizedLinearTensors {
  const TensorView* codes = nullptr;         // P + codes suffix (always set)
  const TensorView* block_scales = nullptr;  // nullptr when missing
  const TensorView* bias = nullptr;          // nullptr when the module has none
  int64_t out_features = 0, in_features = 0; // N, K (0 when the codes tensor is not 2-D)
  bool has_weight_global = false;
  float weight_global = NAN;                 // as stored (direction of the format)
  bool all_zero_weight = false;              // an older writer's all-zero tensor: CT global +inf, ModelOpt 0
  size_t nan_block_scales = 0;               // 0x7F/0xFF bytes in the block scales
  bool has_input_global = false;
  float input_global = NAN;                  // as stored
};

// The one place that validates a quantized linear's tensors without reading its weights: codes dtype U8 and
// shape [N, K/2], K % 16, block scales present, F8_E4M3 [N, K/16], NaN block scales (an error unless the
// weight is all-zero), weight global scale present, one value, valid for the format (compressed-tensors: > 0,
// +inf = all-zero weight; ModelOpt: finite >= 0, 0 = all-zero weight), input global scale one positive
// finite value when present, bias [N]. Every failed check calls `report(tensor, message, fatal)` with a
// one-line message naming the tensor and its file; `fatal` = false for a notice about a file that still loads
// (an older writer's all-zero weight). A `report` that throws stops at the first problem (load_linear);
// Checkpoint::open records them all. The codes tensor (P + codes suffix) must exist in `t`.
QuantizedLinearTensors check_quantized_linear(
    const SafetensorsModel& t, const std::string& module, CheckpointFormat format,
    const std::function<void(const std::string& tensor, const std::string& message, bool fatal)>& report);

class Checkpoint {
 public:
  // path: a model directory (config.json required; tensors as SafetensorsModel::open finds them) or a single
  // .safetensors file (config.json next to it is used when present; otherwise the format is inferred from
  // the tensor names). Validates the header(s), parses the configs and classifies every linear. Cheap: no
  // tensor data is read except scalar global scales and block-scale NaN scans. Throws nvfp4::Error.
  static std::unique_ptr<Checkpoint> open(const std::string& path, const Reporter& rep = {});

  const std::string& path() const { return path_; }
  const std::string& dir() const { return dir_; }          // folder holding config.json and the tensors
  bool has_config() const { return has_config_; }
  const ModelConfig& config() const { return config_; }
  const QuantConfig& quant() const { return quant_; }
  CheckpointFormat format() const { return quant_.format; }
  QuantScheme scheme() const { return quant_.scheme; }
  const SafetensorsModel& tensors() const { return *tensors_; }

  const std::vector<LinearInfo>& linears() const { return linears_; }  // sorted by name
  const LinearInfo* find_linear(const std::string& module) const;      // nullptr when absent
  // Problems found at open (NaN block scales, +inf/NaN/zero global scales, shape mismatches, ...).
  const std::vector<Problem>& problems() const { return problems_; }

  // Loads one quantized linear in canonical form (codes and linear scales copied, global scales converted
  // with from_enc/from_dec, input scale when present, bias as f32 values). Validates dtypes and shapes
  // (K % 16, scale shape [N, K/16], packed shape [N, K/2]). NaN block scales in a tensor whose global scale
  // is +inf (older writers, all-zero tensor) load as 0 with a warning; NaN block scales otherwise throw.
  // Throws nvfp4::Error naming the file and tensor.
  LinearWeights load_linear(const std::string& module, const Reporter& rep = {}) const;

  // Any floating tensor (F32/F16/BF16/F8_E4M3/F64) as f32 values; `shape` gets its shape when non-null.
  std::vector<float> load_f32(const std::string& tensor, std::vector<int64_t>* shape = nullptr) const;

 private:
  Checkpoint() = default;
  std::string path_, dir_;
  bool has_config_ = false;
  ModelConfig config_;
  QuantConfig quant_;
  std::unique_ptr<SafetensorsModel> tensors_;
  std::vector<LinearInfo> linears_;
  std::vector<Problem> problems_;
  friend struct CheckpointBuilder;
};

// Parses config.json text (path for messages). Throws nvfp4::Error.
ModelConfig parse_model_config(const std::string& json_text, const std::string& path);

// The fused set a module belongs to, for sharing one weight global scale (SPEC §3 step 1): q/k/v of one
// attention block -> "<prefix>.{q,k,v}_proj", gate/up (w1/w3) of one MLP -> "<prefix>.{gate,up}_proj" /
// "<prefix>.{w1,w3}". "" when the module is in no fused set.
std::string fused_set_key(const std::string& module);

// ---- calibration file (W4A4 quantization) -----------------------------------------------------------
// A JSON object {"<module name>": <max |x| of that linear's input, a finite float >= 0>, ...}.
std::map<std::string, float> read_calib_amax(const std::string& path);
void write_calib_amax(const std::string& path, const std::map<std::string, float>& amax);

// ---- small file helpers shared by the verbs ---------------------------------------------------------
std::string read_text_file(const std::string& path);  // throws nvfp4::Error naming the file
// Writes `text` to `path` atomically (temp file in the same folder + rename).
void write_text_file_atomic(const std::string& path, const std::string& text);

}  // namespace nvfp4::io
