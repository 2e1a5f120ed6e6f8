#include "io/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "common/error.h"
#include "format/numerics.h"

namespace nvfp4::io {

const char* ggml_type_name(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return "F32";
    case GgmlType::F16: return "F16";
    case GgmlType::Q4_0: return "Q4_0";
    case GgmlType::Q4_1: return "Q4_1";
    case GgmlType::Q5_0: return "Q5_0";
    case GgmlType::Q5_1: return "Q5_1";
    case GgmlType::Q8_0: return "Q8_0";
    case GgmlType::Q4_K: return "Q4_K";
    case GgmlType::Q6_K: return "Q6_K";
    case GgmlType::BF16: return "BF16";
  }
  return "?";
}

bool ggml_type_known(uint32_t t) {
  switch (t) {
    case 0: case 1: case 2: case 3: case 6: case 7: case 8: case 12: case 14: case 30: return true;
    default: return false;
  }
}

int64_t ggml_block_size(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: return 1;
    case GgmlType::Q4_K: case GgmlType::Q6_K: return 256;
    default: return 32;
  }
}

int64_t ggml_block_bytes(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return 4;
    case GgmlType::F16: case GgmlType::BF16: return 2;
    case GgmlType::Q4_0: return 2 + 16;
    case GgmlType::Q4_1: return 4 + 16;
    case GgmlType::Q5_0: return 2 + 4 + 16;
    case GgmlType::Q5_1: return 4 + 4 + 16;
    case GgmlType::Q8_0: return 2 + 32;
    case GgmlType::Q4_K: return 4 + 12 + 128;
    case GgmlType::Q6_K: return 128 + 64 + 16 + 2;
  }
  return 0;
}

int64_t GgufTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

std::vector<int64_t> GgufTensor::shape() const { return std::vector<int64_t>(ne.rbegin(), ne.rend()); }

namespace {

const char* value_type_name(GgufValueType t) {
  static const char* names[] = {"U8", "I8", "U16", "I16", "U32", "I32", "F32", "BOOL", "STRING", "ARRAY",
                                "U64", "I64", "F64"};
  const auto i = static_cast<uint32_t>(t);
  return i < 13 ? names[i] : "?";
}

// Bounds-checked little-endian cursor over the file image.
struct Cursor {
  const uint8_t* p;
  size_t size;
  size_t pos = 0;
  const std::string& path;
  void need(uint64_t n, const char* what) const {
    if (n > size - pos) {
      fail(path + ": truncated GGUF file: " + what + " needs " + std::to_string(n) + " bytes at offset " +
           std::to_string(pos) + ", file has " + std::to_string(size));
    }
  }
  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  std::string str(const char* what) {
    const uint64_t n = read<uint64_t>(what);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(p + pos), n);
    pos += n;
    return s;
  }
};

void read_scalar(Cursor& c, GgufValueType t, GgufValue& v, const std::string& key) {
  v.type = t;
  switch (t) {
    case GgufValueType::U8: v.u = c.read<uint8_t>("value"); break;
    case GgufValueType::I8: v.i = c.read<int8_t>("value"); break;
    case GgufValueType::U16: v.u = c.read<uint16_t>("value"); break;
    case GgufValueType::I16: v.i = c.read<int16_t>("value"); break;
    case GgufValueType::U32: v.u = c.read<uint32_t>("value"); break;
    case GgufValueType::I32: v.i = c.read<int32_t>("value"); break;
    case GgufValueType::U64: v.u = c.read<uint64_t>("value"); break;
    case GgufValueType::I64: v.i = c.read<int64_t>("value"); break;
    case GgufValueType::F32: v.f = c.read<float>("value"); break;
    case GgufValueType::F64: v.f = c.read<double>("value"); break;
    case GgufValueType::BOOL: {
      const uint8_t b = c.read<uint8_t>("value");
      if (b > 1) fail(c.path + ": metadata '" + key + "': bool value " + std::to_string(b) + ", expected 0 or 1");
      v.u = b;
      break;
    }
    case GgufValueType::STRING: v.s = c.str("string value"); break;
    default:
      fail(c.path + ": metadata '" + key + "': unknown value type " + std::to_string(static_cast<uint32_t>(t)));
  }
}

bool is_signed_int(GgufValueType t) {
  return t == GgufValueType::I8 || t == GgufValueType::I16 || t == GgufValueType::I32 || t == GgufValueType::I64;
}

void read_array(Cursor& c, GgufValue& v, const std::string& key) {
  v.type = GgufValueType::ARRAY;
  const uint32_t et = c.read<uint32_t>("array type");
  const uint64_t n = c.read<uint64_t>("array length");
  if (et > 12) fail(c.path + ": metadata '" + key + "': unknown array element type " + std::to_string(et));
  v.elem = static_cast<GgufValueType>(et);
  if (v.elem == GgufValueType::ARRAY) fail(c.path + ": metadata '" + key + "': nested arrays are not supported");
  // Every element takes at least one byte: a length beyond the file is corrupt (and would exhaust memory).
  c.need(n, "array elements");
  GgufValue e;
  for (uint64_t i = 0; i < n; ++i) {
    read_scalar(c, v.elem, e, key);
    switch (v.elem) {
      case GgufValueType::STRING: v.strs.push_back(std::move(e.s)); break;
      case GgufValueType::F32: case GgufValueType::F64: v.floats.push_back(e.f); break;
      case GgufValueType::BOOL: v.ints.push_back(static_cast<int64_t>(e.u)); break;
      default:
        if (is_signed_int(v.elem)) v.ints.push_back(e.i); else v.uints.push_back(e.u);
    }
  }
}

}  // namespace

GgufHeader parse_gguf(const uint8_t* bytes, size_t size, const std::string& path) {
  GgufHeader h;
  Cursor c{bytes, size, 0, path};
  const uint32_t magic = c.read<uint32_t>("magic");
  if (magic != 0x46554747u) fail(path + ": not a GGUF file (magic is not 'GGUF')");
  h.version = c.read<uint32_t>("version");
  if (h.version != 2 && h.version != 3) {
    fail(path + ": GGUF version " + std::to_string(h.version) + ", expected 2 or 3");
  }
  const uint64_t n_tensors = c.read<uint64_t>("tensor count");
  const uint64_t n_kv = c.read<uint64_t>("kv count");
  // A tensor info takes >= 24 bytes, a kv >= 12: counts beyond the file are corrupt.
  if (n_tensors > size / 24 || n_kv > size / 12) {
    fail(path + ": GGUF header counts (" + std::to_string(n_tensors) + " tensors, " + std::to_string(n_kv) +
         " keys) do not fit in a " + std::to_string(size) + "-byte file");
  }
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.str("key");
    const uint32_t t = c.read<uint32_t>("value type");
    if (t > 12) fail(path + ": metadata '" + key + "': unknown value type " + std::to_string(t));
    GgufValue v;
    if (static_cast<GgufValueType>(t) == GgufValueType::ARRAY) read_array(c, v, key);
    else read_scalar(c, static_cast<GgufValueType>(t), v, key);
    if (h.kv.count(key)) fail(path + ": metadata key '" + key + "' appears twice");
    h.kv.emplace(std::move(key), std::move(v));
  }
  auto al = h.kv.find("general.alignment");
  if (al != h.kv.end()) {
    if (al->second.type != GgufValueType::U32 || al->second.u == 0 || (al->second.u & (al->second.u - 1))) {
      fail(path + ": general.alignment must be a power-of-two U32");
    }
    h.alignment = al->second.u;
  }
  std::set<std::string> names;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    t.name = c.str("tensor name");
    const uint32_t nd = c.read<uint32_t>("n_dims");
    if (nd == 0 || nd > 4) fail(path + ": tensor '" + t.name + "' has " + std::to_string(nd) + " dims, expected 1..4");
    for (uint32_t d = 0; d < nd; ++d) {
      const uint64_t e = c.read<uint64_t>("dim");
      if (e == 0 || e > (uint64_t(1) << 40)) {
        fail(path + ": tensor '" + t.name + "' has dimension " + std::to_string(e));
      }
      t.ne.push_back(static_cast<int64_t>(e));
    }
    const uint32_t ty = c.read<uint32_t>("tensor type");
    if (!ggml_type_known(ty)) {
      fail(path + ": tensor '" + t.name + "' has ggml type " + std::to_string(ty) +
           ", expected one of F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q6_K");
    }
    t.type = static_cast<GgmlType>(ty);
    t.offset = c.read<uint64_t>("tensor offset");
    const int64_t bs = ggml_block_size(t.type);
    if (t.ne[0] % bs != 0) {
      fail(path + ": tensor '" + t.name + "' row of " + std::to_string(t.ne[0]) + " elements is not a multiple of " +
           ggml_type_name(t.type) + "'s block size " + std::to_string(bs));
    }
    double approx = 1;
    for (int64_t d : t.ne) approx *= static_cast<double>(d);
    if (approx > 1e13) fail(path + ": tensor '" + t.name + "' is implausibly large");
    t.nbytes = static_cast<uint64_t>(t.numel() / bs * ggml_block_bytes(t.type));
    if (!names.insert(t.name).second) fail(path + ": tensor '" + t.name + "' appears twice");
    h.tensors.push_back(std::move(t));
  }
  h.data_offset = (c.pos + h.alignment - 1) / h.alignment * h.alignment;
  if (h.data_offset > size) h.data_offset = size;
  for (auto& t : h.tensors) {
    if (t.offset % h.alignment != 0) {
      fail(path + ": tensor '" + t.name + "' offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
           std::to_string(h.alignment));
    }
    const uint64_t avail = size - h.data_offset;
    if (t.offset > avail || t.nbytes > avail - t.offset) {
      fail(path + ": tensor '" + t.name + "' data [" + std::to_string(t.offset) + ", +" + std::to_string(t.nbytes) +
           ") lies outside the " + std::to_string(avail) + "-byte data section");
    }
    t.data = bytes + h.data_offset + t.offset;
  }
  return h;
}

GgufFile::~GgufFile() {
  if (map_) munmap(map_, size_);
}

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    fail(path + ": cannot stat: " + std::strerror(e));
  }
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ == 0) {
    ::close(fd);
    fail(path + ": empty file, expected a GGUF model");
  }
  void* m = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) fail(path + ": cannot map: " + std::strerror(errno));
  f->map_ = m;
  f->hdr_ = parse_gguf(static_cast<const uint8_t*>(m), f->size_, path);
  return f;
}

const GgufTensor* GgufFile::find(const std::string& name) const {
  for (const auto& t : hdr_.tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const GgufValue& GgufFile::get(const std::string& key) const {
  auto it = hdr_.kv.find(key);
  if (it == hdr_.kv.end()) fail(path_ + ": metadata '" + key + "' missing");
  return it->second;
}

uint64_t GgufFile::get_uint(const std::string& key) const {
  const GgufValue& v = get(key);
  switch (v.type) {
    case GgufValueType::U8: case GgufValueType::U16: case GgufValueType::U32: case GgufValueType::U64:
      return v.u;
    case GgufValueType::I8: case GgufValueType::I16: case GgufValueType::I32: case GgufValueType::I64:
      if (v.i < 0) fail(path_ + ": metadata '" + key + "' is negative (" + std::to_string(v.i) + ")");
      return static_cast<uint64_t>(v.i);
    default:
      fail(path_ + ": metadata '" + key + "' has type " + value_type_name(v.type) + ", expected an integer");
  }
}

uint64_t GgufFile::get_uint(const std::string& key, uint64_t dflt) const { return has(key) ? get_uint(key) : dflt; }

double GgufFile::get_float(const std::string& key, double dflt) const {
  if (!has(key)) return dflt;
  const GgufValue& v = get(key);
  if (v.type == GgufValueType::F32 || v.type == GgufValueType::F64) return v.f;
  return static_cast<double>(get_uint(key));
}

std::string GgufFile::get_string(const std::string& key, const std::string& dflt) const {
  if (!has(key)) return dflt;
  const GgufValue& v = get(key);
  if (v.type != GgufValueType::STRING) {
    fail(path_ + ": metadata '" + key + "' has type " + value_type_name(v.type) + ", expected STRING");
  }
  return v.s;
}

bool GgufFile::get_bool(const std::string& key, bool dflt) const {
  if (!has(key)) return dflt;
  const GgufValue& v = get(key);
  if (v.type != GgufValueType::BOOL) {
    fail(path_ + ": metadata '" + key + "' has type " + value_type_name(v.type) + ", expected BOOL");
  }
  return v.u != 0;
}

namespace {

float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// Q4_K: the j-th 6-bit (scale, min) pair of the 12 packed bytes.
void scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

}  // namespace

void ggml_dequantize(GgmlType t, const uint8_t* src, int64_t n, float* dst) {
  const int64_t bs = ggml_block_size(t);
  if (n % bs != 0) {
    fail(std::string("ggml_dequantize: ") + std::to_string(n) + " elements is not a multiple of " + ggml_type_name(t) +
         "'s block size");
  }
  const int64_t nb = n / bs;
  const int64_t bb = ggml_block_bytes(t);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* x = src + b * bb;
    float* y = dst + b * bs;
    switch (t) {
      case GgmlType::F32: std::memcpy(y, x, 4); break;
      case GgmlType::F16: y[0] = half_at(x); break;
      case GgmlType::BF16: {
        uint16_t h;
        std::memcpy(&h, x, 2);
        y[0] = bf16_to_f32(h);
        break;
      }
      case GgmlType::Q4_0: {
        const float d = half_at(x);
        const uint8_t* q = x + 2;
        for (int j = 0; j < 16; ++j) {
          y[j] = static_cast<float>((q[j] & 0xF) - 8) * d;
          y[j + 16] = static_cast<float>((q[j] >> 4) - 8) * d;
        }
        break;
      }
      case GgmlType::Q4_1: {
        const float d = half_at(x), m = half_at(x + 2);
        const uint8_t* q = x + 4;
        for (int j = 0; j < 16; ++j) {
          y[j] = static_cast<float>(q[j] & 0xF) * d + m;
          y[j + 16] = static_cast<float>(q[j] >> 4) * d + m;
        }
        break;
      }
      case GgmlType::Q5_0:
      case GgmlType::Q5_1: {
        const bool has_min = t == GgmlType::Q5_1;
        const float d = half_at(x), m = has_min ? half_at(x + 2) : 0.0f;
        const uint8_t* p = x + (has_min ? 4 : 2);
        uint32_t qh;
        std::memcpy(&qh, p, 4);
        const uint8_t* q = p + 4;
        for (int j = 0; j < 16; ++j) {
          const int h0 = ((qh >> j) << 4) & 0x10;
          const int h1 = (qh >> (j + 12)) & 0x10;
          int x0 = (q[j] & 0xF) | h0, x1 = (q[j] >> 4) | h1;
          if (has_min) {
            y[j] = static_cast<float>(x0) * d + m;
            y[j + 16] = static_cast<float>(x1) * d + m;
          } else {
            y[j] = static_cast<float>(x0 - 16) * d;
            y[j + 16] = static_cast<float>(x1 - 16) * d;
          }
        }
        break;
      }
      case GgmlType::Q8_0: {
        const float d = half_at(x);
        const int8_t* q = reinterpret_cast<const int8_t*>(x + 2);
        for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(q[j]) * d;
        break;
      }
      case GgmlType::Q4_K: {
        const float d = half_at(x), dmin = half_at(x + 2);
        const uint8_t* scales = x + 4;
        const uint8_t* q = x + 16;
        int is = 0;
        for (int j = 0; j < 256; j += 64) {
          uint8_t sc, mm;
          scale_min_k4(is, scales, &sc, &mm);
          const float d1 = d * sc, m1 = dmin * mm;
          scale_min_k4(is + 1, scales, &sc, &mm);
          const float d2 = d * sc, m2 = dmin * mm;
          for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
          for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
          q += 32;
          is += 2;
        }
        break;
      }
      case GgmlType::Q6_K: {
        const uint8_t* ql = x;
        const uint8_t* qh = x + 128;
        const int8_t* sc = reinterpret_cast<const int8_t*>(x + 192);
        const float d = half_at(x + 208);
        for (int nn = 0; nn < 256; nn += 128) {
          for (int l = 0; l < 32; ++l) {
            const int is = l / 16;
            const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
            y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
            y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
            y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
          }
          y += 128;
          ql += 64;
          qh += 32;
          sc += 8;
        }
        break;
      }
    }
  }
}

std::vector<float> GgufFile::dequantize(const GgufTensor& t) const {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  ggml_dequantize(t.type, t.data, t.numel(), out.data());
  return out;
}

}  // namespace nvfp4::io
