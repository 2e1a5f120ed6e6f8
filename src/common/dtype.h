// Element types that appear in checkpoints and activations.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace nvfp4 {

enum class DType : uint8_t {
  F32,
  F16,
  BF16,
  F8_E4M3,  // e4m3fn: bias 7, max 448, NaN 0x7F/0xFF, no Inf
  U8,
  I8,
  I16,
  I32,
  I64,
  F64,
  BOOL,
};

// Name as safetensors spells it ("F32", "BF16", "F8_E4M3", ...).
const char* dtype_name(DType t);
// Bytes per element.
size_t dtype_size(DType t);
// Parse a safetensors dtype string; returns false when unknown.
bool dtype_from_name(const std::string& s, DType* out);
// True for F32, F16, BF16 (the types a model's floating weights and activations can have).
inline bool is_model_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

}  // namespace nvfp4
