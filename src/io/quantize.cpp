// bf16/fp16/fp32 HF model -> NVFP4 checkpoint. See io/quantize.h.
#include "io/quantize.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
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

// One output .safetensors file, streamed: the header is written from the declared names, dtypes and shapes,
// then the data in header order. Pass-through tensors are written straight from the memory-mapped input;
// the tensors of a quantized linear are declared up front and produced (quantized, or loaded for a format
// conversion) only when the first of them is due, then freed once written, so that at most one module's
// results are held in memory. The bytes are those of SafetensorsWriter::write (tensors sorted by name, data in
// that order, the header of safetensors_header); the Quantize tests check the output against
// SafetensorsWriter byte for byte. The file is
// written in place: quantize_model builds the whole output in a temporary folder that is renamed when
// complete.
class ShardWriter {
 public:
  // `v` must stay mapped until write() returns (the input Checkpoint outlives the writer).
  void borrow(const TensorView& v) { put(v.name, Entry{v.dtype, v.shape, v.data, v.nbytes, {}, {}}); }
  // A tensor of `module` whose bytes the `produce` callback of write() supplies through own().
  void defer(const std::string& name, DType dtype, std::vector<int64_t> shape, const std::string& module) {
    const size_t nbytes = expected_nbytes(dtype, shape);
    put(name, Entry{dtype, std::move(shape), nullptr, nbytes, {}, module});
  }
  // Supplies the bytes of a deferred tensor (dtype and shape must be the declared ones).
  void own(const std::string& name, DType dtype, const std::vector<int64_t>& shape, std::vector<uint8_t> bytes) {
    auto it = entries_.find(name);
    if (it == entries_.end() || it->second.module.empty() || it->second.data)
      fail("tensor '" + name + "' was not declared for writing, or was produced twice");
    Entry& e = it->second;
    if (e.dtype != dtype || e.shape != shape || bytes.size() != e.nbytes)
      fail("tensor '" + name + "': produced " + dtype_name(dtype) + " " + std::to_string(bytes.size()) +
           " bytes, declared " + dtype_name(e.dtype) + " " + std::to_string(e.nbytes) + " bytes");
    e.owned = std::move(bytes);
    e.data = e.owned.data();
  }
  void own_f32(const std::string& name, const std::vector<int64_t>& shape, float value) {
    std::vector<uint8_t> b(4);
    std::memcpy(b.data(), &value, 4);
    own(name, DType::F32, shape, std::move(b));
  }
  uint64_t data_bytes() const {
    uint64_t n = 0;
    for (const auto& kv : entries_) n += kv.second.nbytes;
    return n;
  }
  // Creates `path` (which must not exist), writes it and fsyncs it. `produce(module)` must own() every
  // tensor deferred for `module`; `copied(name)` is called after each borrowed tensor is written. Throws
  // nvfp4::Error naming the path.
  void write(const std::string& path, const std::function<void(const std::string& module)>& produce,
             const std::function<void(const std::string& name)>& copied) {
    std::vector<SafetensorsHeaderEntry> tensors;
    for (const auto& [name, e] : entries_)  // std::map: sorted by name; data in the same order
      tensors.push_back({name, e.dtype, e.shape, e.nbytes});
    const std::string header = safetensors_header(tensors);

    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) fail("cannot create '" + path + "': " + std::strerror(errno));
    struct Closer {
      int fd;
      ~Closer() { if (fd >= 0) ::close(fd); }
    } closer{fd};
    auto put_bytes = [&](const void* p, size_t sz) {
      if (!write_all(fd, p, sz)) fail("cannot write '" + path + "': " + std::strerror(errno));
    };
    put_bytes(header.data(), header.size());
    for (auto& [name, e] : entries_) {
      if (!e.data) produce(e.module);
      if (!e.data) fail("tensor '" + name + "' of module '" + e.module + "' was not produced");
      put_bytes(e.data, e.nbytes);
      if (e.module.empty()) copied(name);
      else std::vector<uint8_t>().swap(e.owned);  // written: free it
    }
    if (::fchmod(fd, 0644) != 0 || ::fsync(fd) != 0) fail("cannot write '" + path + "': " + std::strerror(errno));
    closer.fd = -1;
    if (::close(fd) != 0) fail("cannot write '" + path + "': " + std::strerror(errno));
  }

 private:
  struct Entry {
    DType dtype;
    std::vector<int64_t> shape;
    const uint8_t* data;          // the mapped input or owned.data(); nullptr until a deferred tensor is produced
    size_t nbytes;
    std::vector<uint8_t> owned;   // a produced tensor's bytes until written
    std::string module;           // the module that produces a deferred tensor; "" for a borrowed one
  };
  static size_t expected_nbytes(DType dtype, const std::vector<int64_t>& shape) {
    uint64_t n = dtype_size(dtype);
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);
    return static_cast<size_t>(n);
  }
  void put(const std::string& name, Entry e) {
    if (name.empty() || name == "__metadata__") fail("cannot write a tensor named '" + name + "'");
    if (expected_nbytes(e.dtype, e.shape) != e.nbytes)
      fail("tensor '" + name + "' of " + dtype_name(e.dtype) + " needs " +
           std::to_string(expected_nbytes(e.dtype, e.shape)) + " bytes, got " + std::to_string(e.nbytes));
    if (!entries_.emplace(name, std::move(e)).second) fail("tensor '" + name + "' added twice to a safetensors file");
  }
  std::map<std::string, Entry> entries_;
};

// The tensors of one quantized linear in the target layout: codes, block scales, weight global scale and,
// for W4A4, the input global scale. compressed-tensors stores the scalars as shape [1] in the divisor form
// (2688 / amax), ModelOpt as shape [] in the multiplier form (amax / 2688).
struct OutTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
};
std::vector<OutTensor> linear_outputs(CheckpointFormat format, const std::string& module, int64_t n, int64_t k,
                                      bool has_input) {
  const LinearTensorSuffixes& sfx = linear_tensor_suffixes(format);
  const std::vector<int64_t> scalar = format == CheckpointFormat::CompressedTensors ? std::vector<int64_t>{1}
                                                                                     : std::vector<int64_t>{};
  std::vector<OutTensor> out = {{module + sfx.codes, DType::U8, {n, k / 2}},
                                {module + sfx.block_scales, DType::F8_E4M3, {n, k / kGroupSize}},
                                {module + sfx.weight_global, DType::F32, scalar}};
  if (has_input) out.push_back({module + sfx.input_global, DType::F32, scalar});
  return out;
}

// Declares the tensors of one quantized linear (linear_outputs) in `wr`; returns their names.
std::vector<std::string> declare_linear(ShardWriter& wr, CheckpointFormat format, const std::string& module,
                                        int64_t n, int64_t k, bool has_input) {
  std::vector<std::string> names;
  for (auto& t : linear_outputs(format, module, n, k, has_input)) {
    wr.defer(t.name, t.dtype, t.shape, module);
    names.push_back(t.name);
  }
  return names;
}

// Supplies the declared tensors of one quantized linear (codes and block scales moved in).
void emit_linear(ShardWriter& wr, CheckpointFormat format, const std::string& module, Nvfp4Matrix&& q,
                 bool has_input, const GlobalScale& input) {
  const bool ct = format == CheckpointFormat::CompressedTensors;
  const std::vector<OutTensor> out = linear_outputs(format, module, q.rows, q.cols, has_input);
  wr.own(out[0].name, out[0].dtype, out[0].shape, std::move(q.codes));
  wr.own(out[1].name, out[1].dtype, out[1].shape, std::move(q.scales));
  wr.own_f32(out[2].name, out[2].shape, ct ? q.global.enc : q.global.dec);
  if (has_input) wr.own_f32(out[3].name, out[3].shape, ct ? input.enc : input.dec);
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
    // Plan the shard: pass-through tensors borrowed, quantized modules declared (produced while writing).
    // Progress: one step per input tensor, when it is written (pass-through), quantized or converted.
    std::map<std::string, std::vector<std::string>> parts;  // module -> its input tensors stepped with it
    for (const TensorView& v : f->tensors()) {
      sum.in_bytes += v.nbytes;
      std::string module;
      std::vector<std::string> names;
      const bool replaced = convert ? source_part(v, &module)
                                    : has_suffix(v.name, kWeightSuffix, &module) && todo.count(module);
      if (!replaced) {
        wr.borrow(v);
        new_weight_map[v.name] = shard;
        ++sum.copied;
        continue;
      }
      const LinearInfo& li = *todo.at(module);
      if (convert) {
        // The converted module goes where its codes are; its other source tensors are only read.
        const TensorView& codes = tm.get(module + linear_tensor_suffixes(ck->format()).codes);
        if (codes.file != v.file) {
          rep.step(v.name, ++done, total);  // read when the module is converted, in the codes' shard
          continue;
        }
        parts[module].push_back(v.name);
        if (&codes != &v) continue;
        names = declare_linear(wr, opt.format, module, li.out_features, li.in_features,
                               li.scheme == QuantScheme::NVFP4);
      } else {
        names = declare_linear(wr, opt.format, module, li.out_features, li.in_features, w4a4);
      }
      for (const auto& nm : names) new_weight_map[nm] = shard;
    }
    auto produce = [&](const std::string& module) {
      if (convert) {
        LinearWeights lw = ck->load_linear(module, rep);
        emit_linear(wr, opt.format, module, std::move(lw.weight), lw.has_input_scale, lw.input_global);
        ++sum.quantized;
        for (const auto& nm : parts[module]) rep.step(nm, ++done, total);
        return;
      }
      const TensorView& v = tm.get(module + kWeightSuffix);
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
      emit_linear(wr, opt.format, module, std::move(q), w4a4, input);
      ++sum.quantized;
      rep.step(v.name + " -> nvfp4 (global scale " + fmt_float(gs_enc) + ")", ++done, total);
    };
    sum.out_bytes += wr.data_bytes();
    wr.write((tdir / shard).string(), produce,
             [&](const std::string& name) { rep.step(name, ++done, total); });
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
