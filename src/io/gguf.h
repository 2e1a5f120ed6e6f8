// GGUF files (llama.cpp's model format), read-only: header, metadata key/values, tensor infos, and
// dequantization of the block formats a Llama-family file uses. Used by `nvfp4 import-gguf`.
//
// Layout (little-endian, GGUF v2/v3):
//   u32 magic "GGUF", u32 version, u64 tensor_count, u64 kv_count,
//   kv_count × { string key, u32 value_type, value },   string = u64 length + bytes (no NUL)
//   tensor_count × { string name, u32 n_dims, u64 ne[n_dims] (ne[0] innermost), u32 ggml_type, u64 offset },
//   padding to `general.alignment` (default 32), then the data section; each tensor's offset is relative to
//   the data section and a multiple of the alignment.
// Shapes: GGUF lists ne[0] (the contiguous dimension) first; `shape()` below returns the row-major order
// (outermost first), which is what safetensors/HF use: a GGUF [576, 49152] tensor is HF [49152, 576].
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace nvfp4::io {

// Metadata value types.
enum class GgufValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8, ARRAY = 9,
  U64 = 10, I64 = 11, F64 = 12,
};

// Tensor element types (ggml_type numbering). Only those listed are accepted.
enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q4_K = 12, Q6_K = 14, BF16 = 30,
};
const char* ggml_type_name(GgmlType t);   // "Q4_1", ...
int64_t ggml_block_size(GgmlType t);      // elements per block (1 for F32/F16/BF16, 32, or 256 for K-quants)
int64_t ggml_block_bytes(GgmlType t);     // bytes per block
bool ggml_type_known(uint32_t t);

// One metadata value. Scalars: integers in `i` (signed types) or `u` (unsigned, bool), floats in `f`,
// strings in `s`. Arrays: `elem` is the element type and exactly one of strs / ints / uints / floats is
// filled (arrays of arrays are rejected).
struct GgufValue {
  GgufValueType type = GgufValueType::U32;
  GgufValueType elem = GgufValueType::U32;
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<std::string> strs;
  std::vector<int64_t> ints;   // signed integer arrays, and bool arrays
  std::vector<uint64_t> uints; // unsigned integer arrays
  std::vector<double> floats;
  size_t array_size() const { return strs.size() + ints.size() + uints.size() + floats.size(); }
};

struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> ne;      // GGUF order: ne[0] innermost
  uint64_t offset = 0;          // relative to the data section
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;  // inside the mapping (valid while the GgufFile lives)
  int64_t numel() const;
  std::vector<int64_t> shape() const;  // row-major: ne reversed
};

struct GgufHeader {
  uint32_t version = 0;
  std::map<std::string, GgufValue> kv;
  std::vector<GgufTensor> tensors;  // file order; data pointers set relative to the parsed image
  uint64_t alignment = 32;
  uint64_t data_offset = 0;         // where the data section starts in the file
};

// Parses and validates a whole GGUF image (bytes [0, size)): magic, version 2 or 3, every string/array length
// inside the file, known value and tensor types, ne[0] a multiple of the type's block size, tensor data
// inside the file and aligned, names unique. `path` is used in messages only. Throws nvfp4::Error. This is
// the function a fuzz target drives.
GgufHeader parse_gguf(const uint8_t* bytes, size_t size, const std::string& path);

class GgufFile {
 public:
  static std::unique_ptr<GgufFile> open(const std::string& path);  // maps + parse_gguf; throws nvfp4::Error
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return hdr_.version; }
  const std::map<std::string, GgufValue>& kv() const { return hdr_.kv; }
  const std::vector<GgufTensor>& tensors() const { return hdr_.tensors; }
  const GgufTensor* find(const std::string& name) const;
  uint64_t alignment() const { return hdr_.alignment; }

  // Metadata accessors; they throw "<file>: metadata 'key' missing" / "... has type X, expected Y".
  bool has(const std::string& key) const { return hdr_.kv.count(key) != 0; }
  const GgufValue& get(const std::string& key) const;
  uint64_t get_uint(const std::string& key) const;            // any non-negative integer type
  uint64_t get_uint(const std::string& key, uint64_t dflt) const;
  double get_float(const std::string& key, double dflt) const;  // F32/F64 (or an integer)
  std::string get_string(const std::string& key, const std::string& dflt) const;
  bool get_bool(const std::string& key, bool dflt) const;

  // Dequantizes one tensor to f32, numel() values in row-major (HF) order.
  std::vector<float> dequantize(const GgufTensor& t) const;

 private:
  GgufFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  GgufHeader hdr_;
};

// Dequantizes n elements (n a multiple of ggml_block_size(t)) of type t from `src` into dst (f32).
// Formulas (ggml's reference dequantizers, one f32 operation at a time):
//   Q4_0 (32/block: f16 d, 16 B nibbles):  x[j] = (lo(q[j]) - 8)·d, x[j+16] = (hi(q[j]) - 8)·d
//   Q4_1 (f16 d, f16 m, 16 B):             x[j] = lo(q[j])·d + m,  x[j+16] = hi(q[j])·d + m
//   Q5_0 / Q5_1: as Q4_0 / Q4_1 with a 5th bit per element from a u32 qh
//   Q8_0 (f16 d, 32 × i8):                 x[j] = q[j]·d
//   Q4_K, Q6_K (256/block): ggml's super-block formulas (6-bit sub-block scales/mins; 6-bit signed quants)
void ggml_dequantize(GgmlType t, const uint8_t* src, int64_t n, float* dst);

}  // namespace nvfp4::io
