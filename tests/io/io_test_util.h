// Helpers shared by the io tests: temporary folders, raw safetensors images, small NVFP4 checkpoints.
#pragma once
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "format/numerics.h"
#include "format/quant.h"
#include "io/safetensors.h"

namespace nvfp4::io::testing {

namespace fs = std::filesystem;

// A temporary folder removed at the end of the test.
struct TmpDir {
  std::string path;
  TmpDir() {
    std::string t = (fs::temp_directory_path() / "nvfp4-io-test.XXXXXX").string();
    if (!mkdtemp(t.data())) throw std::runtime_error("mkdtemp failed");
    path = t;
  }
  ~TmpDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (fs::path(path) / name).string(); }
  // Names of the entries in the folder (to check that nothing was left behind).
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

inline void write_text(const std::string& path, const std::string& s) {
  std::ofstream f(path, std::ios::binary);
  f << s;
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// A safetensors image: u64 LE header length, the header text as given, `data_bytes` bytes of data.
inline std::vector<uint8_t> raw_file(const std::string& header, size_t data_bytes, uint64_t declared_len = ~0ull) {
  const uint64_t n = declared_len == ~0ull ? header.size() : declared_len;
  std::vector<uint8_t> b;
  b.reserve(8 + header.size() + data_bytes);
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(n >> (8 * i)));
  for (const char c : header) b.push_back(static_cast<uint8_t>(c));
  for (size_t i = 0; i < data_bytes; ++i) b.push_back(static_cast<uint8_t>(i * 7 + 1));
  return b;
}

// Random weights exactly representable in bf16.
inline std::vector<float> bf16_weights(int64_t rows, int64_t cols, uint32_t seed, float scale = 0.05f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (auto& v : w) v = bf16_to_f32(f32_to_bf16(nd(rng)));
  return w;
}

// Writes a compressed-tensors NVFP4 linear `module` (optionally W4A4 and with bias) into `wr`.
inline Nvfp4Matrix add_ct_linear(SafetensorsWriter& wr, const std::string& module, int64_t n, int64_t k,
                                 uint32_t seed, bool w4a4, bool bias) {
  const std::vector<float> w = bf16_weights(n, k, seed);
  const float gs = ct_global_enc(abs_max(w.data(), n * k), DType::BF16);
  Nvfp4Matrix q = ct_quantize(w.data(), n, k, DType::BF16, gs);
  wr.add(module + ".weight_packed", DType::U8, {n, k / 2}, q.codes.data(), q.codes.size());
  wr.add(module + ".weight_scale", DType::F8_E4M3, {n, k / 16}, q.scales.data(), q.scales.size());
  wr.add(module + ".weight_global_scale", DType::F32, {1}, &q.global.enc, 4);
  if (w4a4) {
    const float gx = ct_global_enc(3.0f, DType::BF16);
    wr.add(module + ".input_global_scale", DType::F32, {1}, &gx, 4);
  }
  if (bias) {
    std::vector<float> b(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) b[i] = bf16_to_f32(f32_to_bf16(0.01f * static_cast<float>(i - n / 2)));
    wr.add_f32(module + ".bias", DType::BF16, {n}, b.data());
  }
  return q;
}

inline const char* kCtConfigW4A4 = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "bfloat16",
  "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
  "quantization_config": {
    "quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
    "config_groups": {"group_0": {"targets": ["Linear"],
      "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16,
                  "symmetric": true, "dynamic": false},
      "input_activations": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16,
                  "symmetric": true, "dynamic": "local"}}},
    "ignore": ["lm_head", "re:.*mlp.gate.*"], "quantization_status": "compressed"}})";

inline const char* kCtConfigW4A16 = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "bfloat16",
  "quantization_config": {
    "quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
    "config_groups": {"group_0": {"targets": ["Linear"],
      "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16,
                  "symmetric": true, "dynamic": false},
      "input_activations": null}},
    "ignore": ["lm_head"], "quantization_status": "compressed"}})";

}  // namespace nvfp4::io::testing
