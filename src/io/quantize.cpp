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
#include "io/file_util.h"

namespace nvfp4::io {

namespace fs = std::filesystem;
using json = nlohmann::json;
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

// One output .safetensors file, built so that nothing is copied twice: pass-through tensors are borrowed from
// the memory-mapped input and written straight from the mapping; quantized tensors are moved in. The bytes
// are those of SafetensorsWriter::write (tensors sorted by name, data in that order, header = nlohmann::json
// dump with "__metadata__" {"format": "pt"}, padded with spaces to a multiple of 8); the Quantize tests check
// the output against SafetensorsWriter byte for byte.
class ShardWriter {
 public:
  // `v` must stay mapped until write() returns (the input Checkpoint outlives the writer).
  void borrow(const TensorView& v) { put(v.name, Entry{v.dtype, v.shape, v.data, v.nbytes, {}}); }
  void own(const std::string& name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
    Entry e{dtype, std::move(shape), nullptr, bytes.size(), std::move(bytes)};
    e.data = e.owned.data();
    put(name, std::move(e));
  }
  void own_f32(const std::string& name, std::vector<int64_t> shape, float value) {
    std::vector<uint8_t> b(4);
    std::memcpy(b.data(), &value, 4);
    own(name, DType::F32, std::move(shape), std::move(b));
  }
  uint64_t data_bytes() const {
    uint64_t n = 0;
    for (const auto& kv : entries_) n += kv.second.nbytes;
    return n;
  }
  void write(const std::string& path) const {
    json h = json::object();
    h["__metadata__"] = json::object({{"format", "pt"}});
    uint64_t off = 0;
    for (const auto& [name, e] : entries_) {  // std::map: sorted by name; data in the same order
      json t;
      t["dtype"] = dtype_name(e.dtype);
      t["shape"] = e.shape;
      t["data_offsets"] = {off, off + e.nbytes};
      off += e.nbytes;
      h[name] = std::move(t);
    }
    std::string text = h.dump();
    while (text.size() % 8) text += ' ';  // data buffer starts 8-byte aligned
    uint8_t len[8];
    const uint64_t n = text.size();
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
    std::vector<std::pair<const void*, size_t>> chunks = {{len, 8}, {text.data(), text.size()}};
    for (const auto& kv : entries_) chunks.emplace_back(kv.second.data, kv.second.nbytes);
    write_file_atomic(path, chunks);
  }

 private:
  struct Entry {
    DType dtype;
    std::vector<int64_t> shape;
    const uint8_t* data;          // the mapped input, or owned.data()
    size_t nbytes;
    std::vector<uint8_t> owned;   // empty for a borrowed tensor
  };
  void put(const std::string& name, Entry e) {
    if (name.empty() || name == "__metadata__") fail("cannot write a tensor named '" + name + "'");
    uint64_t want = dtype_size(e.dtype);
    for (int64_t d : e.shape) want *= static_cast<uint64_t>(d);
    if (want != e.nbytes)
      fail("tensor '" + name + "' of " + dtype_name(e.dtype) + " needs " + std::to_string(want) + " bytes, got " +
           std::to_string(e.nbytes));
    if (!entries_.emplace(name, std::move(e)).second) fail("tensor '" + name + "' added twice to a safetensors file");
  }
  std::map<std::string, Entry> entries_;
};

// Adds the tensors of one quantized linear in the target layout (codes and block scales moved in); returns
// their names.
std::vector<std::string> emit_linear(ShardWriter& wr, CheckpointFormat format, const std::string& module,
                                     Nvfp4Matrix&& q, bool has_input, const GlobalScale& input) {
  const LinearTensorSuffixes& sfx = linear_tensor_suffixes(format);
  // compressed-tensors stores the divisor form (2688 / amax) as shape [1], ModelOpt the multiplier form
  // (amax / 2688) as a scalar.
  const bool ct = format == CheckpointFormat::CompressedTensors;
  const std::vector<int64_t> scalar = ct ? std::vector<int64_t>{1} : std::vector<int64_t>{};
  const int64_t n = q.rows, k = q.cols;
  std::vector<std::string> names = {module + sfx.codes, module + sfx.block_scales, module + sfx.weight_global};
  wr.own(names[0], DType::U8, {n, k / 2}, std::move(q.codes));
  wr.own(names[1], DType::F8_E4M3, {n, k / kGroupSize}, std::move(q.scales));
  wr.own_f32(names[2], scalar, ct ? q.global.enc : q.global.dec);
  if (has_input) {
    names.push_back(module + sfx.input_global);
    wr.own_f32(names[3], scalar, ct ? input.enc : input.dec);
  }
  return names;
}

// max |w| over `n` decoded values of tensor `w` starting at element `first`; a non-finite value is an error.
float finite_abs_max(const TensorView& w, const float* v, size_t n, size_t first) {
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(v[i]))
      fail("tensor '" + w.name + "' in '" + *w.file + "' has a non-finite value at element " +
           std::to_string(first + i));
  return abs_max(v, static_cast<int64_t>(n));
}

// max |w| of a 2-D weight, decoded a block of rows at a time (bounded memory, no whole-tensor copy). Used for
// the members of fused sets, whose global scale must be known before any member is quantized.
float streamed_abs_max(const TensorView& w) {
  const int64_t rows = w.shape[0], cols = w.shape[1];
  const size_t esize = dtype_size(w.dtype);
  const int64_t block = std::max<int64_t>(1, (int64_t{1} << 20) / std::max<int64_t>(cols, 1));
  float a = 0;
  for (int64_t r0 = 0; r0 < rows; r0 += block) {
    TensorView part = w;
    part.shape = {std::min(block, rows - r0), cols};
    part.data = w.data + static_cast<size_t>(r0 * cols) * esize;
    part.nbytes = static_cast<size_t>(part.shape[0] * cols) * esize;
    const std::vector<float> v = to_f32(part);
    a = std::max(a, finite_abs_max(w, v.data(), v.size(), static_cast<size_t>(r0 * cols)));
  }
  return a;
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
      fail("tensor '" + li.name + kWeightSuffix + "' in '" + *tm.get(li.name + kWeightSuffix).file + "': K = " +
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

  // ---- fused sets: the largest amax of each set, before any member is quantized ----
  // A weight in no fused set needs only its own amax, taken from the values decoded for quantizing it (one
  // decode per weight). A fused set's global scale needs the amax of every member first, so its members are
  // scanned here once more, a block of rows at a time.
  std::map<std::string, std::pair<float, DType>> set_amax;  // fused set -> (largest amax, its dtype)
  if (!convert) {
    for (const auto& [name, li] : todo) {
      const std::string key = fused_set_key(name);
      if (key.empty()) continue;
      const TensorView& w = tm.get(name + kWeightSuffix);
      const float a = streamed_abs_max(w);
      auto it = set_amax.find(key);
      if (it == set_amax.end() || a > it->second.first) set_amax[key] = {a, w.dtype};
    }
  }
  // The amax a weight's global scale comes from: the largest of its fused set (both formats share one global
  // scale per fused set), else its own (`own`, of dtype t); and the dtype it is rounded in (compressed-tensors).
  auto scale_amax = [&](const std::string& name, float own, DType t) -> std::pair<float, DType> {
    const std::string key = fused_set_key(name);
    if (!key.empty()) return set_amax.at(key);
    return {own, t};
  };
  // Tensors of a source module that the converted set replaces.
  auto source_part = [&](const TensorView& v, std::string* module) {
    const LinearTensorSuffixes& src = linear_tensor_suffixes(ck->format());
    for (const char* suf : {src.codes, src.block_scales, src.weight_global, src.input_global})
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
    ShardWriter wr;
    for (const TensorView& v : f->tensors()) {
      sum.in_bytes += v.nbytes;
      std::string module;
      std::vector<std::string> names;
      if (convert) {
        if (!source_part(v, &module)) {
          wr.borrow(v);
          new_weight_map[v.name] = shard;
          ++sum.copied;
          rep.step(v.name, ++done, total);
          continue;
        }
        if (v.name == module + linear_tensor_suffixes(ck->format()).codes) {
          LinearWeights lw = ck->load_linear(module, rep);
          names = emit_linear(wr, opt.format, module, std::move(lw.weight), lw.has_input_scale, lw.input_global);
          ++sum.quantized;
        }
        rep.step(v.name, ++done, total);
      } else {
        if (!has_suffix(v.name, kWeightSuffix, &module) || !todo.count(module)) {
          wr.borrow(v);
          new_weight_map[v.name] = shard;
          ++sum.copied;
          rep.step(v.name, ++done, total);
          continue;
        }
        const LinearInfo& li = *todo.at(module);
        const std::vector<float> w = to_f32(v);  // the only decode of a weight outside a fused set
        const float own = fused_set_key(module).empty() ? finite_abs_max(v, w.data(), w.size(), 0) : 0.0f;
        const auto [a, dt] = scale_amax(module, own, v.dtype);
        Nvfp4Matrix q = ct ? ct_quantize(w.data(), li.out_features, li.in_features, v.dtype, ct_global_enc(a, dt))
                           : modelopt_quantize(w.data(), li.out_features, li.in_features, a);
        GlobalScale input;
        if (w4a4) {
          const float x = opt.calib_amax.at(module);
          // Activations use the weights' rule: compressed-tensors rounds 2688/amax to the model dtype;
          // ModelOpt keeps f32(amax/2688), 1.0 when amax == 0.
          input = ct ? GlobalScale::from_enc(ct_global_enc(x, model_dtype))
                     : GlobalScale::from_dec(modelopt_global_dec(x));
        }
        const float gs_enc = q.global.enc;
        names = emit_linear(wr, opt.format, module, std::move(q), w4a4, input);
        ++sum.quantized;
        rep.step(v.name + " -> nvfp4 (global scale " + fmt_float(gs_enc) + ")", ++done, total);
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
