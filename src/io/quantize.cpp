// bf16/fp16/fp32 HF model -> NVFP4 checkpoint. See io/quantize.h.
#include "io/quantize.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "common/error.h"
#include "format/numerics.h"
#include "format/quant.h"

namespace nvfp4::io {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

// Removes a directory tree on scope exit unless released.
struct TempDir {
  std::string path;
  ~TempDir() {
    if (!path.empty()) {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  }
};

ojson nvfp4_args(bool dynamic_local) {
  ojson a;
  a["num_bits"] = 4;
  a["type"] = "float";
  a["strategy"] = "tensor_group";
  a["group_size"] = 16;
  a["symmetric"] = true;
  if (dynamic_local) a["dynamic"] = "local";
  else a["dynamic"] = false;
  a["scale_dtype"] = "torch.float8_e4m3fn";
  return a;
}

const char* torch_dtype_name(DType t) {
  return t == DType::F16 ? "float16" : t == DType::F32 ? "float32" : "bfloat16";
}

bool same_or_inside(const fs::path& a, const fs::path& b) {  // a == b or a inside b
  auto ai = a.begin(), bi = b.begin();
  for (; bi != b.end(); ++ai, ++bi) {
    if (ai == a.end() || *ai != *bi) return false;
  }
  return true;
}

fs::path canonical_loose(const fs::path& p) {
  std::error_code ec;
  fs::path c = fs::weakly_canonical(fs::absolute(p), ec);
  return ec ? fs::absolute(p).lexically_normal() : c;
}

std::string fmt_float(float v) {
  char b[48];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

// Adds the tensors of one quantized linear in the target layout; returns their names.
std::vector<std::string> emit_linear(SafetensorsWriter& wr, bool ct, const std::string& module, const Nvfp4Matrix& q,
                                     bool has_input, const GlobalScale& input) {
  const int64_t n = q.rows, k = q.cols;
  std::vector<std::string> names;
  if (ct) {
    // compressed-tensors stores the divisor form (2688 / amax).
    wr.add(module + ".weight_packed", DType::U8, {n, k / 2}, q.codes.data(), q.codes.size());
    wr.add(module + ".weight_scale", DType::F8_E4M3, {n, k / kGroupSize}, q.scales.data(), q.scales.size());
    wr.add(module + ".weight_global_scale", DType::F32, {1}, &q.global.enc, 4);
    names = {module + ".weight_packed", module + ".weight_scale", module + ".weight_global_scale"};
    if (has_input) {
      wr.add(module + ".input_global_scale", DType::F32, {1}, &input.enc, 4);
      names.push_back(module + ".input_global_scale");
    }
  } else {
    // ModelOpt stores the multiplier form (amax / 2688).
    wr.add(module + ".weight", DType::U8, {n, k / 2}, q.codes.data(), q.codes.size());
    wr.add(module + ".weight_scale", DType::F8_E4M3, {n, k / kGroupSize}, q.scales.data(), q.scales.size());
    wr.add(module + ".weight_scale_2", DType::F32, {}, &q.global.dec, 4);
    names = {module + ".weight", module + ".weight_scale", module + ".weight_scale_2"};
    if (has_input) {
      wr.add(module + ".input_scale", DType::F32, {}, &input.dec, 4);
      names.push_back(module + ".input_scale");
    }
  }
  return names;
}

bool has_suffix(const std::string& s, const char* suf, std::string* module) {
  const size_t n = std::strlen(suf);
  if (s.size() <= n || s.compare(s.size() - n, n, suf) != 0) return false;
  *module = s.substr(0, s.size() - n);
  return true;
}

}  // namespace

QuantizeSummary quantize_model(const std::string& in, const std::string& out, const QuantizeOptions& opt,
                               const Reporter& rep) {
  if (opt.format == CheckpointFormat::Unquantized)
    throw UsageError("quantize: format must be compressed-tensors or modelopt");
  const bool ct = opt.format == CheckpointFormat::CompressedTensors;

  // ---- output location checks (before any work) ----
  std::error_code ec;
  const fs::path in_c = canonical_loose(in), out_c = canonical_loose(out);
  if (same_or_inside(out_c, in_c) || same_or_inside(in_c, out_c))
    throw UsageError("output '" + out + "' overlaps the input '" + in + "'; choose another folder");
  const bool out_exists = fs::exists(fs::symlink_status(out, ec));
  if (out_exists && !opt.force) throw UsageError("output '" + out + "' exists; pass --force to replace it");

  auto ck = Checkpoint::open(in, rep);
  const SafetensorsModel& tm = ck->tensors();
  const DType model_dtype = ck->config().dtype;
  // An already quantized input is converted between formats: codes and block scales copied byte for byte,
  // global scales turned into the other direction with f32(1/x) (SPEC §1); nothing is re-quantized.
  const bool convert = ck->format() != CheckpointFormat::Unquantized;
  QuantScheme scheme = opt.scheme;
  if (convert) {
    if (ck->format() == opt.format)
      throw UsageError("input '" + in + "' is already a " + format_name(ck->format()) + " checkpoint");
    if (scheme == QuantScheme::None) scheme = ck->scheme();
    if (scheme != ck->scheme())
      throw UsageError(std::string("input '") + in + "' is " + scheme_name(ck->scheme()) +
                       "; converting it cannot change the scheme to " + scheme_name(scheme));
  }
  if (scheme == QuantScheme::None) throw UsageError("quantize: --scheme must be nvfp4 or nvfp4a16");
  const bool w4a4 = scheme == QuantScheme::NVFP4;
  if (!ct && !w4a4)
    throw UsageError("ModelOpt NVFP4 checkpoints are W4A4 (they carry input_scale); use --format "
                     "compressed-tensors for --scheme nvfp4a16");

  // ---- choose the modules to quantize (or convert) ----
  QuantConfig ign;  // only its ignore list is used
  ign.format = CheckpointFormat::CompressedTensors;
  ign.ignore = opt.ignore;
  std::map<std::string, const LinearInfo*> todo;  // module -> info
  QuantizeSummary sum;
  sum.converted = convert;
  for (const LinearInfo& li : ck->linears()) {
    if (convert) {
      if (li.scheme == QuantScheme::None) sum.ignored.push_back(li.name);
      else todo[li.name] = &li;
      continue;
    }
    if (ign.ignored(li.name)) {
      sum.ignored.push_back(li.name);
      continue;
    }
    if (li.in_features % kGroupSize != 0)
      fail("tensor '" + li.name + ".weight' in '" + *tm.get(li.name + ".weight").file + "': K = " +
           std::to_string(li.in_features) + " is not a multiple of 16 (exclude the module with --ignore)");
    todo[li.name] = &li;
  }
  if (todo.empty()) fail("input '" + in + "' has no linear weights left to quantize");
  if (w4a4 && !convert) {
    for (const auto& kv : todo)
      if (!opt.calib_amax.count(kv.first))
        fail("calibration data has no amax for module '" + kv.first + "' (needed for --scheme nvfp4)");
    for (const auto& kv : opt.calib_amax)
      if (!todo.count(kv.first)) rep.warn("calibration entry '" + kv.first + "' matches no quantized module");
  }

  // ---- pass 1: amax per weight (exact), and the largest amax of each fused set ----
  std::map<std::string, float> amax;
  std::map<std::string, std::pair<float, DType>> set_amax;  // fused set -> (largest amax, its dtype)
  if (!convert) {
    for (const auto& [name, li] : todo) {
      const TensorView& w = tm.get(name + ".weight");
      const std::vector<float> v = to_f32(w);
      for (size_t i = 0; i < v.size(); ++i)
        if (!std::isfinite(v[i]))
          fail("tensor '" + w.name + "' in '" + *w.file + "' has a non-finite value at element " + std::to_string(i));
      const float a = abs_max(v.data(), static_cast<int64_t>(v.size()));
      amax[name] = a;
      const std::string key = fused_set_key(name);
      if (!key.empty()) {
        auto it = set_amax.find(key);
        if (it == set_amax.end() || a > it->second.first) set_amax[key] = {a, w.dtype};
      }
    }
  }
  // The amax a weight's global scale comes from: the largest of its fused set (both formats share one global
  // scale per fused set), else its own; and the dtype it is rounded in (compressed-tensors).
  auto scale_amax = [&](const std::string& name, DType t) -> std::pair<float, DType> {
    const std::string key = fused_set_key(name);
    if (!key.empty()) return set_amax.at(key);
    return {amax.at(name), t};
  };
  auto weight_gs_enc = [&](const std::string& name, DType t) {
    const auto [a, dt] = scale_amax(name, t);
    return ct_global_enc(a, dt);
  };
  // Tensors of a source module that the converted set replaces.
  auto source_part = [&](const TensorView& v, std::string* module) {
    static const char* kCt[] = {".weight_packed", ".weight_scale", ".weight_global_scale", ".input_global_scale"};
    static const char* kMo[] = {".weight", ".weight_scale", ".weight_scale_2", ".input_scale"};
    for (const char* suf : (ck->format() == CheckpointFormat::CompressedTensors ? kCt : kMo))
      if (has_suffix(v.name, suf, module) && todo.count(*module)) return true;
    return false;
  };

  // ---- build the output in a temporary folder next to `out` ----
  const fs::path out_p(out);
  const fs::path parent = out_p.has_parent_path() ? out_p.parent_path() : fs::path(".");
  if (!fs::is_directory(parent, ec)) fail("output folder's parent '" + parent.string() + "' does not exist");
  std::string tmpl = (parent / ("." + out_p.filename().string() + ".tmp.XXXXXX")).string();
  if (!mkdtemp(tmpl.data())) fail("cannot create a temporary folder next to '" + out + "': " + std::strerror(errno));
  TempDir tmp{tmpl};
  ::chmod(tmpl.c_str(), 0755);
  const fs::path tdir(tmpl);

  const size_t total = tm.names().size();
  size_t done = 0;
  std::map<std::string, std::string> new_weight_map;  // tensor -> shard (sharded input only)
  std::set<std::string> model_files;
  for (const auto& f : tm.files()) {
    const fs::path src(f->path());
    model_files.insert(canonical_loose(src).string());
    const std::string shard = tm.sharded() ? src.filename().string() : std::string("model.safetensors");
    SafetensorsWriter wr;
    for (const TensorView& v : f->tensors()) {
      sum.in_bytes += v.nbytes;
      std::string module;
      std::vector<std::string> names;
      if (convert) {
        if (!source_part(v, &module)) {
          wr.add(v.name, v.dtype, v.shape, v.data, v.nbytes);
          new_weight_map[v.name] = shard;
          ++sum.copied;
          rep.step(v.name, ++done, total);
          continue;
        }
        const bool codes = v.name == module + (ck->format() == CheckpointFormat::CompressedTensors
                                                   ? ".weight_packed" : ".weight");
        if (codes) {
          const LinearWeights lw = ck->load_linear(module, rep);
          names = emit_linear(wr, ct, module, lw.weight, lw.has_input_scale, lw.input_global);
          ++sum.quantized;
        }
        rep.step(v.name, ++done, total);
      } else {
        if (!has_suffix(v.name, ".weight", &module) || !todo.count(module)) {
          wr.add(v.name, v.dtype, v.shape, v.data, v.nbytes);
          new_weight_map[v.name] = shard;
          ++sum.copied;
          rep.step(v.name, ++done, total);
          continue;
        }
        const LinearInfo& li = *todo.at(module);
        const std::vector<float> w = to_f32(v);
        const Nvfp4Matrix q = ct ? ct_quantize(w.data(), li.out_features, li.in_features, v.dtype,
                                               weight_gs_enc(module, v.dtype))
                                 : modelopt_quantize(w.data(), li.out_features, li.in_features,
                                                     scale_amax(module, v.dtype).first);
        GlobalScale input;
        if (w4a4) {
          const float a = opt.calib_amax.at(module);
          // Activations use the weights' rule: compressed-tensors rounds 2688/amax to the model dtype;
          // ModelOpt keeps f32(amax/2688), 1.0 when amax == 0.
          input = ct ? GlobalScale::from_enc(ct_global_enc(a, model_dtype))
                     : GlobalScale::from_dec(modelopt_global_dec(a));
        }
        names = emit_linear(wr, ct, module, q, w4a4, input);
        ++sum.quantized;
        rep.step(v.name + " -> nvfp4 (global scale " + fmt_float(q.global.enc) + ")", ++done, total);
      }
      for (const auto& nm : names) new_weight_map[nm] = shard;
    }
    sum.out_bytes += wr.data_bytes();
    wr.write((tdir / shard).string());
  }

  // ---- configs ----
  ojson cfg = ojson::object();
  if (ck->has_config()) {
    cfg = ojson::parse(ck->config().raw_json);
  } else {
    cfg["torch_dtype"] = torch_dtype_name(model_dtype);
  }
  if (ct) {
    ojson qc;
    qc["quant_method"] = "compressed-tensors";
    qc["format"] = "nvfp4-pack-quantized";
    ojson g;
    g["targets"] = ojson::array({"Linear"});
    g["weights"] = nvfp4_args(false);
    g["input_activations"] = w4a4 ? nvfp4_args(true) : ojson(nullptr);
    qc["config_groups"] = ojson::object();
    qc["config_groups"]["group_0"] = g;
    qc["ignore"] = convert ? sum.ignored : opt.ignore;
    qc["quantization_status"] = "compressed";
    cfg["quantization_config"] = qc;
  } else {
    // ModelOpt lists the excluded modules by name (exact, unambiguous for every reader).
    ojson qc;
    qc["quant_method"] = "modelopt";
    qc["quant_algo"] = "NVFP4";
    qc["group_size"] = 16;
    qc["exclude_modules"] = sum.ignored;
    cfg["quantization_config"] = qc;
    ojson h;
    h["producer"] = {{"name", "nvfp4"}, {"version", "0.1.0"}};
    h["quantization"] = {{"quant_algo", "NVFP4"}, {"kv_cache_quant_algo", nullptr}, {"group_size", 16},
                         {"exclude_modules", sum.ignored}};
    write_text_file_atomic((tdir / "hf_quant_config.json").string(), h.dump(4) + "\n");
  }
  write_text_file_atomic((tdir / "config.json").string(), cfg.dump(2) + "\n");
  if (tm.sharded()) {
    ojson idx;
    idx["metadata"] = {{"total_size", sum.out_bytes}};
    idx["weight_map"] = ojson::object();
    for (const auto& kv : new_weight_map) idx["weight_map"][kv.first] = kv.second;
    write_text_file_atomic((tdir / "model.safetensors.index.json").string(), idx.dump(2) + "\n");
  }

  // ---- other files of a model directory (tokenizer, generation config, ...) ----
  if (fs::is_directory(in, ec)) {
    for (const auto& e : fs::directory_iterator(in, ec)) {
      const std::string fname = e.path().filename().string();
      if (fname.empty() || fname[0] == '.') continue;
      if (fname == "config.json" || fname == "hf_quant_config.json" || fname == "model.safetensors.index.json")
        continue;
      if (model_files.count(canonical_loose(e.path()).string())) continue;
      std::error_code cec;
      fs::copy(e.path(), tdir / fname, fs::copy_options::recursive, cec);
      if (cec) fail("cannot copy '" + e.path().string() + "' to the output: " + cec.message());
    }
  }

  // ---- move into place ----
  if (out_exists) {
    std::string old = (parent / ("." + out_p.filename().string() + ".old.XXXXXX")).string();
    if (!mkdtemp(old.data())) fail("cannot replace '" + out + "': " + std::strerror(errno));
    if (std::rename(out.c_str(), old.c_str()) != 0) {
      // rename(dir, empty dir) replaces it; a file output needs the placeholder removed first.
      fs::remove(old, ec);
      if (std::rename(out.c_str(), old.c_str()) != 0) fail("cannot replace '" + out + "': " + std::strerror(errno));
    }
    if (std::rename(tmp.path.c_str(), out.c_str()) != 0) {
      const int e = errno;
      std::rename(old.c_str(), out.c_str());
      fail("cannot move the output into '" + out + "': " + std::strerror(e));
    }
    tmp.path.clear();
    fs::remove_all(old, ec);
  } else {
    if (std::rename(tmp.path.c_str(), out.c_str()) != 0)
      fail("cannot move the output into '" + out + "': " + std::strerror(errno));
    tmp.path.clear();
  }
  return sum;
}

}  // namespace nvfp4::io
