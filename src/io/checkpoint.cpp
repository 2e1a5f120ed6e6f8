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
      if (ends_with(n, ".weight_packed")) {
        c.quant_.format = CheckpointFormat::CompressedTensors;
        break;
      }
      if (ends_with(n, ".weight_scale_2")) {
        c.quant_.format = CheckpointFormat::ModelOpt;
        break;
      }
    }
    if (c.quant_.format == CheckpointFormat::Unquantized) return;
    bool w4a4 = false;
    for (const auto& n : c.tensors_->names())
      if (ends_with(n, ".input_global_scale") || ends_with(n, ".input_scale")) w4a4 = true;
    c.quant_.scheme = w4a4 ? QuantScheme::NVFP4 : QuantScheme::NVFP4A16;
    c.problems_.push_back({"", "no config.json: format inferred from the tensor names"});
  }

  // Finds every linear and checks what can be checked without reading weights.
  static void classify(Checkpoint& c, const Reporter& rep) {
    const SafetensorsModel& t = *c.tensors_;
    const bool ct = c.quant_.format == CheckpointFormat::CompressedTensors;
    const bool mo = c.quant_.format == CheckpointFormat::ModelOpt;
    std::set<std::string> seen;
    for (const auto& n : t.names()) {
      LinearInfo li;
      const TensorView& v = t.get(n);
      if (ct && ends_with(n, ".weight_packed")) {
        li.name = module_of(n, ".weight_packed");
      } else if (mo && ends_with(n, ".weight") && v.dtype == DType::U8) {
        li.name = module_of(n, ".weight");
      } else if (ends_with(n, ".weight") && v.shape.size() == 2 && is_model_float(v.dtype)) {
        li.name = module_of(n, ".weight");
        if (looks_like_embedding(li.name)) continue;
        li.scheme = QuantScheme::None;
        li.out_features = v.shape[0];
        li.in_features = v.shape[1];
        li.weight_dtype = v.dtype;
        li.has_bias = t.find(li.name + ".bias") != nullptr;
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
      li.weight_dtype = v.dtype;
      li.has_bias = t.find(li.name + ".bias") != nullptr;
      const std::string in_key = li.name + (ct ? ".input_global_scale" : ".input_scale");
      li.scheme = t.find(in_key) ? QuantScheme::NVFP4 : QuantScheme::NVFP4A16;
      if (v.shape.size() == 2) {
        li.out_features = v.shape[0];
        li.in_features = v.shape[1] * 2;
      } else {
        c.problems_.push_back({n, "tensor '" + n + "' has shape " + v.shape_str() + ", expected [N, K/2]"});
      }
      if (v.dtype != DType::U8)
        c.problems_.push_back({n, "tensor '" + n + "' has dtype " + dtype_name(v.dtype) + ", expected U8"});
      if (li.in_features % 16 != 0)
        c.problems_.push_back({li.name, "module '" + li.name + "': K = " + std::to_string(li.in_features) +
                                            " is not a multiple of 16"});
      if (c.quant_.ignored(li.name))
        c.problems_.push_back({li.name, "module '" + li.name + "' is quantized but listed in ignore"});
      // Block scales: presence, dtype, shape, NaN bytes.
      const std::string sname = li.name + ".weight_scale";
      const TensorView* s = t.find(sname);
      const std::string gname = li.name + (ct ? ".weight_global_scale" : ".weight_scale_2");
      float g = NAN;
      bool have_g = false;
      try {
        have_g = read_scalar(t, gname, &g);
      } catch (const Error& e) {
        c.problems_.push_back({gname, e.what()});
      }
      if (!have_g) c.problems_.push_back({gname, "missing tensor '" + gname + "'"});
      const bool inf_global = have_g && (ct ? std::isinf(g) : g == 0.0f);
      if (have_g) {
        if (std::isnan(g) || g < 0 || (ct && g == 0) || (!ct && std::isinf(g)))
          c.problems_.push_back({gname, "tensor '" + gname + "' is " + fmt_float(g) + ", expected a positive finite value"});
        else if (inf_global)
          c.problems_.push_back({gname, "tensor '" + gname + "' is " + fmt_float(g) +
                                            " (older writer, all-zero weight): the layer computes zeros"});
      }
      if (!s) {
        c.problems_.push_back({sname, "missing tensor '" + sname + "'"});
      } else {
        if (s->dtype != DType::F8_E4M3)
          c.problems_.push_back({sname, "tensor '" + sname + "' has dtype " + dtype_name(s->dtype) +
                                            ", expected F8_E4M3"});
        if (s->shape.size() != 2 || s->shape[0] != li.out_features || s->shape[1] * 16 != li.in_features)
          c.problems_.push_back({sname, "tensor '" + sname + "' has shape " + s->shape_str() + ", expected [" +
                                            std::to_string(li.out_features) + ", " +
                                            std::to_string(li.in_features / 16) + "]"});
        if (s->dtype == DType::F8_E4M3 || s->dtype == DType::U8) {
          size_t nan = 0;
          for (size_t i = 0; i < s->nbytes; ++i) nan += e4m3_is_nan(s->data[i]);
          if (nan)
            c.problems_.push_back({sname, "tensor '" + sname + "' has " + std::to_string(nan) +
                                              " NaN block scales (0x7F)" +
                                              (inf_global ? "; loaded as 0 (all-zero weight)" : "")});
        }
      }
      if (li.scheme == QuantScheme::NVFP4) {
        float x = NAN;
        try {
          if (read_scalar(t, in_key, &x) && (!std::isfinite(x) || x <= 0))
            c.problems_.push_back({in_key, "tensor '" + in_key + "' is " + fmt_float(x) +
                                               ", expected a positive finite value"});
        } catch (const Error& e) {
          c.problems_.push_back({in_key, e.what()});
        }
      }
      if (li.has_bias) {
        const TensorView& b = t.get(li.name + ".bias");
        if (b.shape.size() != 1 || b.shape[0] != li.out_features)
          c.problems_.push_back({li.name + ".bias", "tensor '" + li.name + ".bias' has shape " + b.shape_str() +
                                                        ", expected [" + std::to_string(li.out_features) + "]"});
      }
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
  const bool ct = quant_.format == CheckpointFormat::CompressedTensors;
  const SafetensorsModel& t = *tensors_;
  auto where = [](const TensorView& v) { return "tensor '" + v.name + "' in '" + *v.file + "'"; };

  const TensorView& w = t.get(module + (ct ? ".weight_packed" : ".weight"));
  if (w.dtype != DType::U8) fail(where(w) + " has dtype " + dtype_name(w.dtype) + ", expected U8");
  if (w.shape.size() != 2) fail(where(w) + " has shape " + w.shape_str() + ", expected [N, K/2]");
  const int64_t n = w.shape[0], k = w.shape[1] * 2;
  if (k % kGroupSize != 0)
    fail(where(w) + ": K = " + std::to_string(k) + " (2 x " + std::to_string(w.shape[1]) +
         ") is not a multiple of 16");
  const std::string sname = module + ".weight_scale";
  const TensorView* sp = t.find(sname);
  if (!sp)
    fail("tensor '" + sname + "' is missing: '" + *w.file + "' holds '" + w.name + "' but no block scales for it");
  const TensorView& s = *sp;
  if (s.dtype != DType::F8_E4M3) fail(where(s) + " has dtype " + dtype_name(s.dtype) + ", expected F8_E4M3");
  if (s.shape.size() != 2 || s.shape[0] != n || s.shape[1] != k / kGroupSize)
    fail(where(s) + " has shape " + s.shape_str() + ", expected [" + std::to_string(n) + ", " +
         std::to_string(k / kGroupSize) + "]");

  LinearWeights lw;
  lw.name = module;
  lw.weight.rows = n;
  lw.weight.cols = k;
  lw.weight.codes.assign(w.data, w.data + w.nbytes);
  lw.weight.scales.assign(s.data, s.data + s.nbytes);

  const std::string gname = module + (ct ? ".weight_global_scale" : ".weight_scale_2");
  float g = 0;
  if (!read_scalar(t, gname, &g))
    fail("tensor '" + gname + "' is missing: '" + *w.file + "' holds '" + w.name + "' but no global scale for it");
  const TensorView& gv = t.get(gname);
  bool all_zero_weight = false;
  if (ct) {
    // compressed-tensors stores the divisor form (2688 / amax).
    if (std::isnan(g) || g <= 0) fail(where(gv) + " is " + fmt_float(g) + ", expected a positive value");
    all_zero_weight = std::isinf(g);
    lw.weight.global = GlobalScale::from_enc(g);
  } else {
    // ModelOpt stores the multiplier form (amax / 2688).
    if (std::isnan(g) || g < 0 || std::isinf(g))
      fail(where(gv) + " is " + fmt_float(g) + ", expected a finite value >= 0");
    all_zero_weight = g == 0;
    lw.weight.global = GlobalScale::from_dec(g);
  }
  size_t nan = 0;
  for (auto& b : lw.weight.scales)
    if (e4m3_is_nan(b)) {
      ++nan;
      b = 0;
    }
  if (nan && !all_zero_weight)
    fail(where(s) + " has " + std::to_string(nan) + " NaN block scales (0x7F) with a finite global scale " +
         fmt_float(g));
  if (nan || all_zero_weight)
    rep.warn("module '" + module + "': global scale " + fmt_float(g) + (nan ? " and " + std::to_string(nan) +
             " NaN block scales" : std::string()) + " (older writer, all-zero weight); the layer computes zeros");

  const std::string iname = module + (ct ? ".input_global_scale" : ".input_scale");
  float x = 0;
  if (read_scalar(t, iname, &x)) {
    const TensorView& iv = t.get(iname);
    if (!std::isfinite(x) || x <= 0) fail(where(iv) + " is " + fmt_float(x) + ", expected a positive finite value");
    lw.has_input_scale = true;
    lw.input_global = ct ? GlobalScale::from_enc(x) : GlobalScale::from_dec(x);
  }
  if (const TensorView* b = t.find(module + ".bias")) {
    if (b->shape.size() != 1 || b->shape[0] != n)
      fail(where(*b) + " has shape " + b->shape_str() + ", expected [" + std::to_string(n) + "]");
    lw.bias = to_f32(*b);
  }
  return lw;
}

}  // namespace nvfp4::io
