// safetensors reader (validated, memory-mapped) and atomic writer. See io/safetensors.h.
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "common/error.h"
#include "format/numerics.h"
#include "io/file_util.h"

namespace nvfp4::io {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// Headers larger than this are refused (the reference implementation uses the same limit).
constexpr uint64_t kMaxHeaderBytes = 100u << 20;
// JSON nesting deeper than this is refused before parsing (a real header is 3 levels deep).
constexpr int kMaxJsonDepth = 64;

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Depth of [] / {} nesting outside strings; stops early once above the limit.
bool json_depth_ok(const char* s, size_t n) {
  int depth = 0;
  bool in_str = false;
  for (size_t i = 0; i < n; ++i) {
    const char c = s[i];
    if (in_str) {
      if (c == '\\') ++i;
      else if (c == '"') in_str = false;
      continue;
    }
    if (c == '"') in_str = true;
    else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// numel · elem, or false on overflow.
bool checked_nbytes(const std::vector<int64_t>& shape, size_t elem, uint64_t* out) {
  uint64_t n = elem;
  for (int64_t d : shape) {
    if (d < 0) return false;
    if (d != 0 && n > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d)) return false;
    n *= static_cast<uint64_t>(d);
  }
  *out = n;
  return true;
}

}  // namespace

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorView::shape_str() const { return shape_string(shape); }

ParsedHeader parse_safetensors(const uint8_t* bytes, size_t size, const std::string& path) {
  const std::string where = "'" + path + "'";
  if (size < 8)
    fail("safetensors file " + where + " is truncated: " + std::to_string(size) + " bytes, expected at least 8");
  const uint64_t n = read_u64_le(bytes);
  if (n > size - 8)
    fail("safetensors file " + where + ": header length " + std::to_string(n) + " runs past the end of the file (" +
         std::to_string(size) + " bytes)");
  if (n > kMaxHeaderBytes)
    fail("safetensors file " + where + ": header length " + std::to_string(n) + " exceeds the " +
         std::to_string(kMaxHeaderBytes) + "-byte limit");
  if (n < 2) fail("safetensors file " + where + ": header length " + std::to_string(n) + " is too small for JSON");
  const char* text = reinterpret_cast<const char*>(bytes + 8);
  if (!json_depth_ok(text, n))
    fail("safetensors file " + where + ": header JSON nests deeper than " + std::to_string(kMaxJsonDepth));
  json h;
  try {
    h = json::parse(text, text + n);
  } catch (const json::exception& e) {
    std::string msg = e.what();
    std::replace(msg.begin(), msg.end(), '\n', ' ');
    fail("safetensors file " + where + ": header is not valid JSON (" + msg + ")");
  }
  if (!h.is_object()) fail("safetensors file " + where + ": header is not a JSON object");

  ParsedHeader out;
  out.data_offset = 8 + n;
  const uint64_t data_size = size - out.data_offset;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail("safetensors file " + where + ": __metadata__ is not a JSON object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          fail("safetensors file " + where + ": __metadata__ entry '" + m.key() + "' is not a string");
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string tw = "safetensors file " + where + ": tensor '" + name + "'";
    if (!v.is_object()) fail(tw + " has an entry that is not a JSON object");
    const auto dt = v.find("dtype");
    const auto sh = v.find("shape");
    const auto of = v.find("data_offsets");
    if (dt == v.end() || !dt->is_string()) fail(tw + " has no string 'dtype'");
    if (sh == v.end() || !sh->is_array()) fail(tw + " has no 'shape' array");
    if (of == v.end() || !of->is_array() || of->size() != 2) fail(tw + " has no 'data_offsets' pair");
    HeaderEntry e;
    e.name = name;
    const std::string dts = dt->get<std::string>();
    if (!dtype_from_name(dts, &e.dtype)) fail(tw + " has unknown dtype '" + dts + "'");
    for (const json& d : *sh) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail(tw + " has a shape entry that is not a non-negative integer: " + d.dump());
      e.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
    }
    for (int k = 0; k < 2; ++k)
      if (!(*of)[k].is_number_unsigned()) fail(tw + " has a data offset that is not a non-negative integer");
    e.begin = (*of)[0].get<uint64_t>();
    e.end = (*of)[1].get<uint64_t>();
    if (e.begin > e.end)
      fail(tw + " has data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "] with begin > end");
    if (e.end > data_size)
      fail(tw + " has data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
           "] outside the data buffer of " + std::to_string(data_size) + " bytes");
    uint64_t want = 0;
    if (!checked_nbytes(e.shape, dtype_size(e.dtype), &want))
      fail(tw + " has shape " + shape_string(e.shape) + " whose size overflows");
    if (want != e.end - e.begin)
      fail(tw + ": shape " + shape_string(e.shape) + " of " + dts + " needs " + std::to_string(want) +
           " bytes but data_offsets span " + std::to_string(e.end - e.begin));
    out.tensors.push_back(std::move(e));
  }
  // Tensors must tile the data buffer: sorted by offset, each begins where the previous ended.
  std::vector<const HeaderEntry*> order;
  for (const auto& e : out.tensors) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const HeaderEntry* a, const HeaderEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t pos = 0;
  const HeaderEntry* prev = nullptr;
  for (const HeaderEntry* e : order) {
    if (e->begin < pos)
      fail("safetensors file " + where + ": tensor '" + e->name + "' [" + std::to_string(e->begin) + ", " +
           std::to_string(e->end) + ") overlaps tensor '" + prev->name + "' ending at " + std::to_string(pos));
    if (e->begin > pos)
      fail("safetensors file " + where + ": bytes [" + std::to_string(pos) + ", " + std::to_string(e->begin) +
           ") of the data buffer belong to no tensor (before tensor '" + e->name + "')");
    pos = e->end;
    prev = e;
  }
  if (pos != data_size)
    fail("safetensors file " + where + ": data buffer has " + std::to_string(data_size) + " bytes but tensors cover " +
         std::to_string(pos) + " (truncated or trailing bytes)");
  return out;
}

// ---- SafetensorsFile --------------------------------------------------------------------------------------

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open safetensors file '" + path + "': " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("'" + path + "' is not a regular file");
  }
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    void* m = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      fail("cannot map safetensors file '" + path + "': " + std::strerror(err));
    }
    f->map_ = m;
  }
  ::close(fd);
  const uint8_t* base = static_cast<const uint8_t*>(f->map_);
  ParsedHeader h = parse_safetensors(base, f->size_, path);
  f->metadata_ = std::move(h.metadata);
  for (auto& e : h.tensors) {
    TensorView v;
    v.name = std::move(e.name);
    v.dtype = e.dtype;
    v.shape = std::move(e.shape);
    v.data = base + h.data_offset + e.begin;
    v.nbytes = static_cast<size_t>(e.end - e.begin);
    v.file = &f->path_;
    f->views_.push_back(std::move(v));
  }
  std::sort(f->views_.begin(), f->views_.end(),
            [](const TensorView& a, const TensorView& b) { return a.name < b.name; });
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) munmap(map_, size_);
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  auto it = std::lower_bound(views_.begin(), views_.end(), name,
                             [](const TensorView& v, const std::string& n) { return v.name < n; });
  return it != views_.end() && it->name == name ? &*it : nullptr;
}

const TensorView& SafetensorsFile::get(const std::string& name) const {
  const TensorView* v = find(name);
  if (!v) fail("safetensors file '" + path_ + "' has no tensor '" + name + "'");
  return *v;
}

// ---- SafetensorsModel -------------------------------------------------------------------------------------

namespace {
bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}
}  // namespace

std::unique_ptr<SafetensorsModel> SafetensorsModel::open(const std::string& path) {
  auto m = std::make_unique<SafetensorsModel>();
  m->path_ = path;
  std::error_code ec;
  std::string index_path, single_path;
  if (fs::is_directory(path, ec)) {
    const fs::path d(path);
    if (fs::exists(d / "model.safetensors.index.json")) {
      index_path = (d / "model.safetensors.index.json").string();
    } else if (fs::exists(d / "model.safetensors")) {
      single_path = (d / "model.safetensors").string();
    } else {
      std::vector<std::string> found;
      for (const auto& e : fs::directory_iterator(d, ec))
        if (e.is_regular_file() && ends_with(e.path().filename().string(), ".safetensors"))
          found.push_back(e.path().string());
      if (found.size() != 1)
        fail("model directory '" + path + "' has " + std::to_string(found.size()) +
             " .safetensors files and no model.safetensors.index.json; expected model.safetensors or an index");
      single_path = found[0];
    }
  } else if (ends_with(path, ".json")) {
    index_path = path;
  } else {
    single_path = path;
  }

  if (!single_path.empty()) {
    m->files_.push_back(SafetensorsFile::open(single_path));
    for (const auto& v : m->files_[0]->tensors()) m->index_[v.name] = &v;
  } else {
    m->sharded_ = true;
    std::string text;
    {
      FILE* f = std::fopen(index_path.c_str(), "rb");
      if (!f) fail("cannot open index '" + index_path + "': " + std::strerror(errno));
      char buf[65536];
      size_t r;
      while ((r = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, r);
      std::fclose(f);
    }
    json idx;
    try {
      idx = json::parse(text);
    } catch (const json::exception& e) {
      std::string msg = e.what();
      std::replace(msg.begin(), msg.end(), '\n', ' ');
      fail("index '" + index_path + "' is not valid JSON (" + msg + ")");
    }
    if (!idx.is_object() || !idx.contains("weight_map") || !idx["weight_map"].is_object())
      fail("index '" + index_path + "' has no 'weight_map' object");
    const fs::path dir = fs::path(index_path).parent_path();
    std::map<std::string, size_t> shard_no;
    std::map<std::string, std::string> wanted;  // tensor -> shard
    for (auto it = idx["weight_map"].begin(); it != idx["weight_map"].end(); ++it) {
      if (!it.value().is_string()) fail("index '" + index_path + "': entry for '" + it.key() + "' is not a string");
      const std::string shard = it.value().get<std::string>();
      if (shard.empty() || shard.find('/') != std::string::npos || shard.find('\\') != std::string::npos ||
          shard == "." || shard == "..")
        fail("index '" + index_path + "': shard name '" + shard + "' for tensor '" + it.key() +
             "' is not a plain file name");
      wanted[it.key()] = shard;
      if (!shard_no.count(shard)) {
        shard_no[shard] = m->files_.size();
        m->files_.push_back(SafetensorsFile::open((dir / shard).string()));
      }
    }
    for (const auto& [name, shard] : wanted) {
      const SafetensorsFile& f = *m->files_[shard_no[shard]];
      const TensorView* v = f.find(name);
      if (!v) fail("index '" + index_path + "' places tensor '" + name + "' in '" + shard + "', which lacks it");
      m->index_[name] = v;
    }
    // A tensor present in a shard but missing from the index, or present in two shards, is an error.
    for (const auto& f : m->files_)
      for (const auto& v : f->tensors()) {
        auto it = m->index_.find(v.name);
        if (it == m->index_.end())
          fail("shard '" + f->path() + "' holds tensor '" + v.name + "' that index '" + index_path + "' does not list");
        if (it->second != &v)
          fail("tensor '" + v.name + "' appears in shard '" + f->path() + "' and in '" + *it->second->file + "'");
      }
  }
  for (const auto& kv : m->index_) m->names_.push_back(kv.first);
  return m;
}

const TensorView* SafetensorsModel::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

const TensorView& SafetensorsModel::get(const std::string& name) const {
  const TensorView* v = find(name);
  if (!v) fail("model '" + path_ + "' has no tensor '" + name + "'");
  return *v;
}

uint64_t SafetensorsModel::total_bytes() const {
  uint64_t n = 0;
  for (const auto& kv : index_) n += kv.second->nbytes;
  return n;
}

// ---- conversion -------------------------------------------------------------------------------------------

std::vector<float> to_f32(const TensorView& t) {
  const int64_t n = t.numel();
  std::vector<float> out(static_cast<size_t>(n));
  const uint8_t* p = t.data;
  switch (t.dtype) {
    case DType::F32:
      std::memcpy(out.data(), p, static_cast<size_t>(n) * 4);
      break;
    case DType::F64:
      for (int64_t i = 0; i < n; ++i) {
        double d;
        std::memcpy(&d, p + i * 8, 8);
        out[i] = static_cast<float>(d);
      }
      break;
    case DType::F16:
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, p + i * 2, 2);
        out[i] = from_bits16(t.dtype, b);
      }
      break;
    case DType::F8_E4M3:
      for (int64_t i = 0; i < n; ++i) out[i] = e4m3_decode(p[i]);
      break;
    default:
      fail("tensor '" + t.name + "' in '" + (t.file ? *t.file : std::string("?")) + "' has dtype " +
           dtype_name(t.dtype) + ", expected a floating type (F32, F16, BF16, F8_E4M3, F64)");
  }
  return out;
}

// ---- SafetensorsWriter ------------------------------------------------------------------------------------

void SafetensorsWriter::add(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data,
                            size_t nbytes) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  add(name, dtype, std::move(shape), std::vector<uint8_t>(p, p + nbytes));
}

void SafetensorsWriter::add(const std::string& name, DType dtype, std::vector<int64_t> shape,
                            std::vector<uint8_t> bytes) {
  if (name.empty() || name == "__metadata__") fail("cannot write a tensor named '" + name + "'");
  if (entries_.count(name)) fail("tensor '" + name + "' added twice to a safetensors file");
  uint64_t want = 0;
  if (!checked_nbytes(shape, dtype_size(dtype), &want) || want != bytes.size())
    fail("tensor '" + name + "': shape " + shape_string(shape) + " of " + dtype_name(dtype) + " needs " +
         std::to_string(want) + " bytes, got " + std::to_string(bytes.size()));
  entries_[name] = Entry{dtype, std::move(shape), std::move(bytes)};
}

void SafetensorsWriter::add_f32(const std::string& name, DType dtype, std::vector<int64_t> shape,
                                const float* values) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<uint8_t> bytes(static_cast<size_t>(n) * dtype_size(dtype));
  if (dtype == DType::F32) {
    std::memcpy(bytes.data(), values, bytes.size());
  } else if (dtype == DType::F16 || dtype == DType::BF16) {
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t b = to_bits16(dtype, values[i]);
      std::memcpy(bytes.data() + i * 2, &b, 2);
    }
  } else {
    fail(std::string("add_f32: cannot store f32 values as ") + dtype_name(dtype) + " (tensor '" + name + "')");
  }
  add(name, dtype, std::move(shape), std::move(bytes));
}

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }

uint64_t SafetensorsWriter::data_bytes() const {
  uint64_t n = 0;
  for (const auto& kv : entries_) n += kv.second.bytes.size();
  return n;
}

std::string safetensors_header(const std::vector<SafetensorsHeaderEntry>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  json h = json::object();
  json meta = json::object();
  meta["format"] = "pt";
  for (const auto& kv : metadata) meta[kv.first] = kv.second;
  h["__metadata__"] = meta;
  uint64_t off = 0;
  for (const auto& e : tensors) {
    json t;
    t["dtype"] = dtype_name(e.dtype);
    t["shape"] = e.shape;
    t["data_offsets"] = {off, off + e.nbytes};
    off += e.nbytes;
    h[e.name] = std::move(t);
  }
  std::string text = h.dump();
  while (text.size() % 8) text += ' ';  // data buffer starts 8-byte aligned
  std::string out(8, '\0');
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>(static_cast<uint8_t>(n >> (8 * i)));
  return out + text;
}

void SafetensorsWriter::write(const std::string& path) const {
  std::vector<SafetensorsHeaderEntry> tensors;
  for (const auto& [name, e] : entries_)  // std::map: sorted by name; data in the same order
    tensors.push_back({name, e.dtype, e.shape, e.bytes.size()});
  const std::string header = safetensors_header(tensors, metadata_);
  std::vector<std::pair<const void*, size_t>> chunks = {{header.data(), header.size()}};
  for (const auto& kv : entries_) chunks.emplace_back(kv.second.bytes.data(), kv.second.bytes.size());
  write_file_atomic(path, chunks);
}

}  // namespace nvfp4::io
