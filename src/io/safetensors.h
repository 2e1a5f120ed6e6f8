// safetensors files in and out (https://huggingface.co/docs/safetensors, format summary in docs/FORMAT.md).
//
// File layout: u64 little-endian N, then N bytes of UTF-8 JSON (the header), then the data buffer. The header
// maps tensor name -> {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]} (offsets relative to the
// data buffer), plus an optional "__metadata__" object of string -> string.
//
// Reading: the file is memory-mapped and the whole header is validated before any tensor byte is touched:
// N fits in the file, JSON parses, every dtype is known, nbytes(shape, dtype) == end - begin, offsets lie
// inside the data buffer, tensors do not overlap and together cover the data buffer exactly.
// Writing: tensors sorted by name, header padded with spaces to a multiple of 8 bytes, "__metadata__"
// {"format": "pt"}, written to a temporary file in the same folder and renamed only when complete.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"

namespace nvfp4::io {

// A read-only view of one tensor inside a mapped file. Valid while the file object that returned it lives.
struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;   // row-major, outermost first; {} for a scalar
  const uint8_t* data = nullptr;  // nbytes bytes, little-endian elements (not necessarily aligned)
  size_t nbytes = 0;
  const std::string* file = nullptr;  // path of the file that holds it (for error messages)
  int64_t numel() const;
  std::string shape_str() const;      // "[4096, 2048]"
};

// One entry of a parsed header (offsets relative to the data buffer).
struct HeaderEntry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

struct ParsedHeader {
  std::vector<HeaderEntry> tensors;              // in header order
  std::map<std::string, std::string> metadata;   // "__metadata__"
  uint64_t data_offset = 0;                      // 8 + N: where the data buffer starts in the file
};

// Parses and validates a complete safetensors file image (bytes [0, size)). `path` is used in messages only.
// Throws nvfp4::Error with a one-line message naming the file (and tensor) on any violation. This is the
// function the fuzz target drives.
ParsedHeader parse_safetensors(const uint8_t* bytes, size_t size, const std::string& path);

// One memory-mapped .safetensors file.
class SafetensorsFile {
 public:
  // Maps and validates `path`. Throws nvfp4::Error.
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<TensorView>& tensors() const { return views_; }  // sorted by name
  const TensorView* find(const std::string& name) const;             // nullptr when absent
  const TensorView& get(const std::string& name) const;              // throws "file: no tensor 'x'"
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  size_t file_size() const { return size_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  std::vector<TensorView> views_;
  std::map<std::string, std::string> metadata_;
};

// A model's tensors: one .safetensors file, or shards listed by model.safetensors.index.json
// ({"weight_map": {tensor name: shard file name}}), all mapped. Every tensor the index names must be in its
// shard, and a tensor name may appear in only one shard.
class SafetensorsModel {
 public:
  // path: a .safetensors file, an *.safetensors.index.json file, or a directory holding
  // model.safetensors.index.json or model.safetensors (or exactly one *.safetensors). Throws nvfp4::Error.
  static std::unique_ptr<SafetensorsModel> open(const std::string& path);

  const std::vector<std::string>& names() const { return names_; }  // all tensor names, sorted
  const TensorView* find(const std::string& name) const;
  const TensorView& get(const std::string& name) const;             // throws naming the model path
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  bool sharded() const { return sharded_; }
  const std::string& path() const { return path_; }
  uint64_t total_bytes() const;                                     // sum of tensor nbytes

 private:
  std::string path_;
  bool sharded_ = false;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> index_;
  std::vector<std::string> names_;
};

// Converts a floating tensor (F32, F16, BF16, F8_E4M3, F64) to f32 values, numel() of them. Throws for
// other dtypes, naming the tensor.
std::vector<float> to_f32(const TensorView& t);

// One tensor of a safetensors header; its data take `nbytes` bytes.
struct SafetensorsHeaderEntry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t nbytes;
};
// The bytes that start every .safetensors file this project writes: the 8-byte little-endian header length,
// then the JSON header (the tensors with consecutive data offsets in the order given, and "__metadata__"
// {"format": "pt"} plus `metadata`), padded with spaces so that the data that follow start 8-byte aligned.
std::string safetensors_header(const std::vector<SafetensorsHeaderEntry>& tensors,
                               const std::map<std::string, std::string>& metadata = {});

// Collects tensors and writes one .safetensors file atomically.
class SafetensorsWriter {
 public:
  // Copies `nbytes` bytes; nbytes must equal numel(shape) · dtype_size(dtype) (checked). Duplicate names throw.
  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data, size_t nbytes);
  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes);
  // Convenience: f32 values stored as `dtype` (F32, F16 or BF16, rounded to nearest even).
  void add_f32(const std::string& name, DType dtype, std::vector<int64_t> shape, const float* values);
  // Extra "__metadata__" entries ("format": "pt" is always written).
  void set_metadata(const std::string& key, const std::string& value);
  size_t size() const { return entries_.size(); }
  uint64_t data_bytes() const;
  // Writes `path` (temp file in the same folder, fsync, rename). Throws nvfp4::Error; leaves no temp file.
  void write(const std::string& path) const;

 private:
  struct Entry {
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace nvfp4::io
