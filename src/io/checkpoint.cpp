// HF model directories and the compressed-tensors / ModelOpt NVFP4 conventions. See io/checkpoint.h.
#include "io/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "common/error.h"
#include "format/numerics.h"
#include "io/file_util.h"

namespace nvfp4::io {

namespace fs = std::filesystem;
using json = nlohmann::json;

const char* format_name(CheckpointFormat f) {
  switch (f) {
    case CheckpointFormat::Unquantized: return "unquantized";
    case CheckpointFormat::CompressedTensors: return "compressed-tensors";
    case CheckpointFormat::ModelOpt: return "modelopt";
  }
  return "?";
}

const char* scheme_name(QuantScheme s) {
  switch (s) {
    case QuantScheme::None: return "none";
    case QuantScheme::NVFP4: return "nvfp4";
    case QuantScheme::NVFP4A16: return "nvfp4a16";
  }
  return "?";
}

const LinearTensorSuffixes& linear_tensor_suffixes(CheckpointFormat f) {
  if (f == CheckpointFormat::CompressedTensors) return kCompressedTensorsSuffixes;
  if (f == CheckpointFormat::ModelOpt) return kModelOptSuffixes;
  fail(std::string("a ") + format_name(f) + " checkpoint has no quantized linear tensors");
}

// ---- small file helpers -----------------------------------------------------------------------------------

std::string read_text_file(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail("cannot open '" + path + "': " + std::strerror(errno));
  std::string text;
  char buf[65536];
  size_t r;
  while ((r = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, r);
  const bool err = std::ferror(f);
  std::fclose(f);
  if (err) fail("cannot read '" + path + "'");
  return text;
}

void write_text_file_atomic(const std::string& path, const std::string& text) {
  write_file_atomic(path, {{text.data(), text.size()}});
}

namespace {

json parse_json_file(const std::string& path) {
  const std::string text = read_text_file(path);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    std::string msg = e.what();
    std::replace(msg.begin(), msg.end(), '\n', ' ');
    fail("'" + path + "' is not valid JSON (" + msg + ")");
  }
}

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

int64_t get_int(const json& j, const char* key, int64_t dflt) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return dflt;
  return it->get<int64_t>();
}

double get_num(const json& j, const char* key, double dflt) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return dflt;
  return it->get<double>();
}

std::vector<std::string> string_list(const json& j, const std::string& what, const std::string& path) {
  std::vector<std::string> out;
  if (j.is_null()) return out;
  if (!j.is_array()) fail("'" + path + "': " + what + " is not a list");
  for (const json& e : j) {
    if (!e.is_string()) fail("'" + path + "': " + what + " has a non-string entry " + e.dump());
    out.push_back(e.get<std::string>());
  }
  return out;
}

// '*' matches any run of characters (ModelOpt exclude_modules are fnmatch patterns).
bool glob_match(const char* p, const char* s) {
  for (; *p; ++p, ++s) {
    if (*p == '*') {
      while (p[1] == '*') ++p;
      for (const char* t = s;; ++t) {
        if (glob_match(p + 1, t)) return true;
        if (!*t) return false;
      }
    }
    if (!*s || (*p != '?' && *p != *s)) return false;
  }
  return *s == 0;
}

// compressed-tensors' "nvfp4-pack-quantized" args: 4-bit float, tensor_group, group size 16.
bool is_nvfp4_args(const json& a) {
  return a.is_object() && get_int(a, "num_bits", 0) == 4 && a.value("type", std::string()) == "float" &&
         get_int(a, "group_size", 0) == 16;
}

std::string fmt_float(float v) {
  char b[48];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

}  // namespace

// ---- config.json ------------------------------------------------------------------------------------------

ModelConfig parse_model_config(const std::string& json_text, const std::string& path) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    std::string msg = e.what();
    std::replace(msg.begin(), msg.end(), '\n', ' ');
    fail("'" + path + "' is not valid JSON (" + msg + ")");
  }
  if (!j.is_object()) fail("'" + path + "' is not a JSON object");
  ModelConfig c;
  c.raw_json = json_text;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
      j["architectures"][0].is_string())
    c.architecture = j["architectures"][0].get<std::string>();
  c.model_type = j.value("model_type", std::string());
  std::string dt;
  if (j.contains("torch_dtype") && j["torch_dtype"].is_string()) dt = j["torch_dtype"].get<std::string>();
  else if (j.contains("dtype") && j["dtype"].is_string()) dt = j["dtype"].get<std::string>();
  if (dt.rfind("torch.", 0) == 0) dt = dt.substr(6);
  if (dt.empty() || dt == "bfloat16") c.dtype = DType::BF16;
  else if (dt == "float16" || dt == "half") c.dtype = DType::F16;
  else if (dt == "float32" || dt == "float") c.dtype = DType::F32;
  else fail("'" + path + "': torch_dtype '" + dt + "' is not one of bfloat16, float16, float32");
  c.hidden_size = get_int(j, "hidden_size", 0);
  c.intermediate_size = get_int(j, "intermediate_size", 0);
  c.num_hidden_layers = get_int(j, "num_hidden_layers", 0);
  c.num_attention_heads = get_int(j, "num_attention_heads", 0);
  c.num_key_value_heads = get_int(j, "num_key_value_heads", c.num_attention_heads);
  c.head_dim = get_int(j, "head_dim", c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0);
  c.vocab_size = get_int(j, "vocab_size", 0);
  c.max_position_embeddings = get_int(j, "max_position_embeddings", 0);
  c.rms_norm_eps = get_num(j, "rms_norm_eps", 1e-6);
  c.rope_theta = get_num(j, "rope_theta", 10000.0);
  c.tie_word_embeddings = j.value("tie_word_embeddings", false);
  return c;
}

// ---- module matching --------------------------------------------------------------------------------------

bool module_pattern_matches(const std::string& pattern, const std::string& module, const std::string& cls) {
  if (pattern.rfind("re:", 0) == 0) {
    try {
      const std::regex re(pattern.substr(3));
      return std::regex_search(module, re, std::regex_constants::match_continuous);
    } catch (const std::regex_error&) {
      fail("pattern '" + pattern + "' is not a valid regular expression");
    }
  }
  if (pattern == module || pattern == cls) return true;
  if (pattern.find('*') != std::string::npos || pattern.find('?') != std::string::npos)
    return glob_match(pattern.c_str(), module.c_str());
  return false;
}

bool QuantConfig::ignored(const std::string& module) const {
  for (const auto& p : ignore)
    if (module_pattern_matches(p, module, "Linear")) return true;
  return false;
}

bool QuantConfig::quantizes(const std::string& module, const std::string& cls) const {
  if (format == CheckpointFormat::Unquantized) return false;
  if (ignored(module)) return false;
  if (targets.empty()) return true;
  for (const auto& t : targets)
    if (module_pattern_matches(t, module, cls)) return true;
  return false;
}

std::string fused_set_key(const std::string& module) {
  const size_t dot = module.rfind('.');
  const std::string prefix = dot == std::string::npos ? "" : module.substr(0, dot + 1);
  const std::string last = dot == std::string::npos ? module : module.substr(dot + 1);
  if (last == "q_proj" || last == "k_proj" || last == "v_proj") return prefix + "{q,k,v}_proj";
  if (last == "gate_proj" || last == "up_proj") return prefix + "{gate,up}_proj";
  if (last == "w1" || last == "w3") return prefix + "{w1,w3}";
  return "";
}

// ---- calibration file -------------------------------------------------------------------------------------

std::map<std::string, float> read_calib_amax(const std::string& path) {
  const json j = parse_json_file(path);
  if (!j.is_object()) fail("calibration file '" + path + "' is not a JSON object {module: amax}");
  std::map<std::string, float> out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it.value().is_number())
      fail("calibration file '" + path + "': value for '" + it.key() + "' is " + it.value().dump() +
           ", expected a number");
    const double v = it.value().get<double>();
    if (!std::isfinite(v) || v < 0)
      fail("calibration file '" + path + "': amax for '" + it.key() + "' is " + it.value().dump() +
           ", expected a finite number >= 0");
    out[it.key()] = static_cast<float>(v);
  }
  return out;
}

void write_calib_amax(const std::string& path, const std::map<std::string, float>& amax) {
  json j = json::object();
  for (const auto& kv : amax) j[kv.first] = kv.second;
  write_text_file_atomic(path, j.dump(2) + "\n");
}

// ---- Checkpoint -------------------------------------------------------------------------------------------

namespace {

// Reads a one-element floating tensor (shape [], [1]) as f32; false when absent.
bool read_scalar(const SafetensorsModel& t, const std::string& name, float* out) {
  const TensorView* v = t.find(name);
  if (!v) return false;
  if (v->numel() != 1 || !(is_model_float(v->dtype) || v->dtype == DType::F64))
    fail("tensor '" + name + "' in '" + *v->file + "' has shape " + v->shape_str() + " " + dtype_name(v->dtype) +
         ", expected a single F32 value");
  *out = to_f32(*v)[0];
  return true;
}

std::string module_of(const std::string& tensor, const std::string& suffix) {
  return tensor.substr(0, tensor.size() - suffix.size());
}

bool looks_like_embedding(const std::string& module) {
  const size_t dot = module.rfind('.');
  const std::string last = dot == std::string::npos ? module : module.substr(dot + 1);
  return last.find("embed") != std::string::npos || last == "wte" || last == "wpe";
}

}  // namespace

QuantizedLinearTensors check_quantized_linear(
    const SafetensorsModel& t, const std::string& module, CheckpointFormat format,
    const std::function<void(const std::string& tensor, const std::string& message, bool fatal)>& report) {
  const LinearTensorSuffixes& sfx = linear_tensor_suffixes(format);
  const bool ct = format == CheckpointFormat::CompressedTensors;
  auto where = [](const TensorView& v) { return "tensor '" + v.name + "' in '" + *v.file + "'"; };
  QuantizedLinearTensors r;
  const TensorView& w = t.get(module + sfx.codes);
  r.codes = &w;

  // Codes: U8 [N, K/2], K % 16 == 0.
  if (w.dtype != DType::U8) report(w.name, where(w) + " has dtype " + dtype_name(w.dtype) + ", expected U8", true);
  const bool shaped = w.shape.size() == 2;
  if (!shaped) {
    report(w.name, where(w) + " has shape " + w.shape_str() + ", expected [N, K/2]", true);
  } else {
    r.out_features = w.shape[0];
    r.in_features = w.shape[1] * 2;
    if (r.in_features % kGroupSize != 0)
      report(w.name, where(w) + ": K = " + std::to_string(r.in_features) + " (2 x " + std::to_string(w.shape[1]) +
                         ") is not a multiple of 16", true);
  }

  // Block scales: present, F8_E4M3 [N, K/16] (their NaN bytes are judged with the global scale below).
  const std::string sname = module + sfx.block_scales;
  r.block_scales = t.find(sname);
  if (!r.block_scales) {
    report(sname, "missing tensor '" + sname + "': '" + *w.file + "' holds '" + w.name + "' but no block scales for it",
           true);
  } else {
    const TensorView& s = *r.block_scales;
    if (s.dtype != DType::F8_E4M3)
      report(sname, where(s) + " has dtype " + dtype_name(s.dtype) + ", expected F8_E4M3", true);
    if (shaped && (s.shape.size() != 2 || s.shape[0] != r.out_features || s.shape[1] * kGroupSize != r.in_features))
      report(sname, where(s) + " has shape " + s.shape_str() + ", expected [" + std::to_string(r.out_features) + ", " +
                        std::to_string(r.in_features / kGroupSize) + "]", true);
    if (s.dtype == DType::F8_E4M3 || s.dtype == DType::U8)
      for (size_t i = 0; i < s.nbytes; ++i) r.nan_block_scales += e4m3_is_nan(s.data[i]);
  }

  // Weight global scale: one value, valid in the format's direction.
  const std::string gname = module + sfx.weight_global;
  try {
    r.has_weight_global = read_scalar(t, gname, &r.weight_global);
  } catch (const Error& e) {
    report(gname, e.what(), true);
  }
  if (!r.has_weight_global && !t.find(gname))
    report(gname, "missing tensor '" + gname + "': '" + *w.file + "' holds '" + w.name + "' but no global scale for it",
           true);
  if (r.has_weight_global) {
    const float g = r.weight_global;
    const TensorView& gv = t.get(gname);
    if (ct) {
      // compressed-tensors stores the divisor form (2688 / amax): +inf is an older writer's all-zero tensor.
      if (std::isnan(g) || g <= 0)
        report(gname, where(gv) + " is " + fmt_float(g) + ", expected a positive value", true);
      r.all_zero_weight = std::isinf(g) && g > 0;
    } else {
      // ModelOpt stores the multiplier form (amax / 2688): 0 is an all-zero tensor.
      if (std::isnan(g) || g < 0 || std::isinf(g))
        report(gname, where(gv) + " is " + fmt_float(g) + ", expected a finite value >= 0", true);
      r.all_zero_weight = g == 0;
    }
    if (r.all_zero_weight)
      report(gname, where(gv) + " is " + fmt_float(g) + " (older writer, all-zero weight): the layer computes zeros",
             false);
  }
  if (r.nan_block_scales) {
    const std::string what = where(*r.block_scales) + " has " + std::to_string(r.nan_block_scales) +
                             " NaN block scales (0x7F)";
    if (r.all_zero_weight) report(sname, what + "; loaded as 0 (all-zero weight)", false);
    else if (r.has_weight_global)
      report(sname, what + " with a finite global scale " + fmt_float(r.weight_global), true);
    else report(sname, what, true);
  }

  // Input global scale (W4A4 only): one positive finite value.
  const std::string iname = module + sfx.input_global;
  try {
    r.has_input_global = read_scalar(t, iname, &r.input_global);
  } catch (const Error& e) {
    report(iname, e.what(), true);
  }
  if (r.has_input_global && (!std::isfinite(r.input_global) || r.input_global <= 0))
    report(iname, where(t.get(iname)) + " is " + fmt_float(r.input_global) + ", expected a positive finite value",
           true);

  // Bias: [N].
  const std::string bname = module + kBiasSuffix;
  r.bias = t.find(bname);
  if (r.bias && shaped && (r.bias->shape.size() != 1 || r.bias->shape[0] != r.out_features))
    report(bname, where(*r.bias) + " has shape " + r.bias->shape_str() + ", expected [" +
                      std::to_string(r.out_features) + "]", true);
  return r;
}

struct CheckpointBuilder {
  static void parse_quant(Checkpoint& c, const json& cfg, const std::string& cfg_path) {
    QuantConfig& q = c.quant_;
    // ModelOpt's own description file wins when present.
    const fs::path hq = fs::path(c.dir_) / "hf_quant_config.json";
    std::error_code ec;
    if (fs::exists(hq, ec)) {
      const json h = parse_json_file(hq.string());
      const json qq = h.contains("quantization") ? h["quantization"] : h;
      const std::string algo = qq.value("quant_algo", std::string());
      if (algo != "NVFP4")
        fail("'" + hq.string() + "': quant_algo '" + algo + "' is not supported, expected \"NVFP4\"");
      q.format = CheckpointFormat::ModelOpt;
      q.scheme = QuantScheme::NVFP4;
      q.group_size = static_cast<int>(get_int(qq, "group_size", 16));
      if (qq.contains("exclude_modules"))
        q.ignore = string_list(qq["exclude_modules"], "exclude_modules", hq.string());
      if (q.group_size != 16)
        fail("'" + hq.string() + "': group_size " + std::to_string(q.group_size) + ", expected 16");
      return;
    }
    if (!cfg.is_object() || !cfg.contains("quantization_config")) return;
    const json& qc = cfg["quantization_config"];
    if (!qc.is_object()) fail("'" + cfg_path + "': quantization_config is not an object");
    const std::string method = qc.value("quant_method", std::string());
    if (method == "modelopt") {
      const std::string algo = qc.value("quant_algo", std::string("NVFP4"));
      if (algo != "NVFP4")
        fail("'" + cfg_path + "': modelopt quant_algo '" + algo + "' is not supported, expected \"NVFP4\"");
      q.format = CheckpointFormat::ModelOpt;
      q.scheme = QuantScheme::NVFP4;
      q.group_size = static_cast<int>(get_int(qc, "group_size", 16));
      for (const char* key : {"exclude_modules", "ignore", "ignored_layers"})
        if (qc.contains(key)) {
          auto l = string_list(qc[key], key, cfg_path);
          q.ignore.insert(q.ignore.end(), l.begin(), l.end());
        }
      return;
    }
    if (method != "compressed-tensors")
      fail("'" + cfg_path + "': quantization_config.quant_method '" + method +
           "' is not supported, expected \"compressed-tensors\" or \"modelopt\"");
    q.format = CheckpointFormat::CompressedTensors;
    if (!qc.contains("config_groups") || !qc["config_groups"].is_object() || qc["config_groups"].empty())
      fail("'" + cfg_path + "': quantization_config has no config_groups");
    // The format is given at the top, or per group (newer writers put "mixed-precision" at the top).
    const std::string fmt = qc.value("format", std::string());
    if (fmt != "nvfp4-pack-quantized") {
      for (auto g = qc["config_groups"].begin(); g != qc["config_groups"].end(); ++g) {
        const std::string gf = g.value().is_object() ? g.value().value("format", fmt) : fmt;
        if (gf != "nvfp4-pack-quantized")
          fail("'" + cfg_path + "': compressed-tensors format '" + gf + "' (config_groups." + g.key() +
               ") is not supported, expected \"nvfp4-pack-quantized\"");
      }
    }
    bool any_w4a4 = false, any_w4a16 = false;
    for (auto g = qc["config_groups"].begin(); g != qc["config_groups"].end(); ++g) {
      const json& grp = g.value();
      const std::string gw = "'" + cfg_path + "': config_groups." + g.key();
      if (!grp.is_object() || !grp.contains("weights") || !is_nvfp4_args(grp["weights"]))
        fail(gw + ".weights is not NVFP4 (num_bits 4, type float, group_size 16)");
      if (grp.contains("targets")) {
        auto t = string_list(grp["targets"], "config_groups." + g.key() + ".targets", cfg_path);
        q.targets.insert(q.targets.end(), t.begin(), t.end());
      }
      const json ia = grp.contains("input_activations") ? grp["input_activations"] : json();
      if (ia.is_null()) {
        any_w4a16 = true;
      } else if (is_nvfp4_args(ia)) {
        any_w4a4 = true;
      } else {
        fail(gw + ".input_activations is neither null nor NVFP4");
      }
    }
    q.scheme = any_w4a4 ? QuantScheme::NVFP4 : QuantScheme::NVFP4A16;
    if (any_w4a4 && any_w4a16)
      c.problems_.push_back({"", "config_groups mix NVFP4 and NVFP4A16 groups; the scheme of each layer follows "
                                 "its tensors"});
    if (qc.contains("ignore")) q.ignore = string_list(qc["ignore"], "quantization_config.ignore", cfg_path);
    q.group_size = 16;
  }

  static void infer_format(Checkpoint& c) {
    for (const auto& n : c.tensors_->names()) {
      if (ends_with(n, kCompressedTensorsSuffixes.codes)) {
        c.quant_.format = CheckpointFormat::CompressedTensors;
        break;
      }
      if (ends_with(n, kModelOptSuffixes.weight_global)) {
        c.quant_.format = CheckpointFormat::ModelOpt;
        break;
      }
    }
    if (c.quant_.format == CheckpointFormat::Unquantized) return;
    bool w4a4 = false;
    for (const auto& n : c.tensors_->names())
      if (ends_with(n, kCompressedTensorsSuffixes.input_global) || ends_with(n, kModelOptSuffixes.input_global))
        w4a4 = true;
    c.quant_.scheme = w4a4 ? QuantScheme::NVFP4 : QuantScheme::NVFP4A16;
    c.problems_.push_back({"", "no config.json: format inferred from the tensor names"});
  }

  // Finds every linear and checks what can be checked without reading weights.
  static void classify(Checkpoint& c, const Reporter& rep) {
    const SafetensorsModel& t = *c.tensors_;
    const bool ct = c.quant_.format == CheckpointFormat::CompressedTensors;
    const bool mo = c.quant_.format == CheckpointFormat::ModelOpt;
    const LinearTensorSuffixes& sfx = ct ? kCompressedTensorsSuffixes : kModelOptSuffixes;
    std::set<std::string> seen;
    for (const auto& n : t.names()) {
      LinearInfo li;
      const TensorView& v = t.get(n);
      if (ct && ends_with(n, kCompressedTensorsSuffixes.codes)) {
        li.name = module_of(n, kCompressedTensorsSuffixes.codes);
      } else if (mo && ends_with(n, kModelOptSuffixes.codes) && v.dtype == DType::U8) {
        li.name = module_of(n, kModelOptSuffixes.codes);
      } else if (ends_with(n, kWeightSuffix) && v.shape.size() == 2 && is_model_float(v.dtype)) {
        li.name = module_of(n, kWeightSuffix);
        if (looks_like_embedding(li.name)) continue;
        li.scheme = QuantScheme::None;
        li.out_features = v.shape[0];
        li.in_features = v.shape[1];
        li.weight_dtype = v.dtype;
        li.has_bias = t.find(li.name + kBiasSuffix) != nullptr;
        if (c.quant_.format != CheckpointFormat::Unquantized && c.quant_.quantizes(li.name) &&
            c.quant_.targets.size() > 0)
          c.problems_.push_back({li.name, "module '" + li.name +
                                              "' is targeted by the quantization config but stored unquantized"});
        c.linears_.push_back(li);
        continue;
      } else {
        continue;
      }
      if (!seen.insert(li.name).second) continue;
      const QuantizedLinearTensors q = check_quantized_linear(
          t, li.name, c.quant_.format,
          [&](const std::string& tensor, const std::string& message, bool) {
            c.problems_.push_back({tensor, message});
          });
      li.weight_dtype = v.dtype;
      li.has_bias = q.bias != nullptr;
      li.scheme = t.find(li.name + sfx.input_global) ? QuantScheme::NVFP4 : QuantScheme::NVFP4A16;
      li.out_features = q.out_features;
      li.in_features = q.in_features;
      if (c.quant_.ignored(li.name))
        c.problems_.push_back({li.name, "module '" + li.name + "' is quantized but listed in ignore"});
      c.linears_.push_back(li);
    }
    std::sort(c.linears_.begin(), c.linears_.end(),
              [](const LinearInfo& a, const LinearInfo& b) { return a.name < b.name; });
    for (const auto& p : c.problems_) rep.warn(p.message);
  }
};

std::unique_ptr<Checkpoint> Checkpoint::open(const std::string& path, const Reporter& rep) {
  std::unique_ptr<Checkpoint> c(new Checkpoint());
  c->path_ = path;
  std::error_code ec;
  if (!fs::exists(path, ec)) fail("'" + path + "' does not exist");
  const bool is_dir = fs::is_directory(path, ec);
  c->dir_ = is_dir ? path : (fs::path(path).has_parent_path() ? fs::path(path).parent_path().string() : ".");
  const std::string cfg_path = (fs::path(c->dir_) / "config.json").string();
  json cfg;
  if (fs::exists(cfg_path, ec)) {
    c->has_config_ = true;
    const std::string text = read_text_file(cfg_path);
    c->config_ = parse_model_config(text, cfg_path);
    cfg = json::parse(text);
  } else if (is_dir) {
    fail("model directory '" + path + "' has no config.json");
  }
  c->tensors_ = SafetensorsModel::open(path);
  if (c->has_config_) CheckpointBuilder::parse_quant(*c, cfg, cfg_path);
  else CheckpointBuilder::infer_format(*c);
  if (!c->has_config_) {
    // Without config.json the dtype follows the first floating 2-D weight.
    for (const auto& n : c->tensors_->names()) {
      const TensorView& v = c->tensors_->get(n);
      if (v.shape.size() == 2 && is_model_float(v.dtype)) {
        c->config_.dtype = v.dtype;
        break;
      }
    }
  }
  CheckpointBuilder::classify(*c, rep);
  return c;
}

const LinearInfo* Checkpoint::find_linear(const std::string& module) const {
  auto it = std::lower_bound(linears_.begin(), linears_.end(), module,
                             [](const LinearInfo& a, const std::string& n) { return a.name < n; });
  return it != linears_.end() && it->name == module ? &*it : nullptr;
}

std::vector<float> Checkpoint::load_f32(const std::string& tensor, std::vector<int64_t>* shape) const {
  const TensorView& v = tensors_->get(tensor);
  if (shape) *shape = v.shape;
  return to_f32(v);
}

LinearWeights Checkpoint::load_linear(const std::string& module, const Reporter& rep) const {
  const LinearInfo* li = find_linear(module);
  if (!li) fail("model '" + path_ + "' has no linear module '" + module + "'");
  if (li->scheme == QuantScheme::None)
    fail("module '" + module + "' in '" + path_ + "' is not quantized (its weight is " +
         dtype_name(li->weight_dtype) + ")");
  const QuantizedLinearTensors q = check_quantized_linear(
      *tensors_, module, quant_.format, [](const std::string&, const std::string& message, bool fatal) {
        if (fatal) fail(message);
      });

  LinearWeights lw;
  lw.name = module;
  lw.weight.rows = q.out_features;
  lw.weight.cols = q.in_features;
  lw.weight.codes.assign(q.codes->data, q.codes->data + q.codes->nbytes);
  lw.weight.scales.assign(q.block_scales->data, q.block_scales->data + q.block_scales->nbytes);
  // compressed-tensors stores the divisor form (2688 / amax), ModelOpt the multiplier form (amax / 2688).
  const bool ct = quant_.format == CheckpointFormat::CompressedTensors;
  lw.weight.global = ct ? GlobalScale::from_enc(q.weight_global) : GlobalScale::from_dec(q.weight_global);
  // NaN block scales pass the checks only in an older writer's all-zero tensor: they load as 0.
  for (auto& b : lw.weight.scales)
    if (e4m3_is_nan(b)) b = 0;
  if (q.nan_block_scales || q.all_zero_weight)
    rep.warn("module '" + module + "': global scale " + fmt_float(q.weight_global) +
             (q.nan_block_scales ? " and " + std::to_string(q.nan_block_scales) + " NaN block scales" : std::string()) +
             " (older writer, all-zero weight); the layer computes zeros");
  if (q.has_input_global) {
    lw.has_input_scale = true;
    lw.input_global = ct ? GlobalScale::from_enc(q.input_global) : GlobalScale::from_dec(q.input_global);
  }
  if (q.bias) lw.bias = to_f32(*q.bias);
  return lw;
}

}  // namespace nvfp4::io
