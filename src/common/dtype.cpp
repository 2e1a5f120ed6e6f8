#include "common/dtype.h"

namespace nvfp4 {

namespace {
struct Row {
  DType t;
  const char* name;
  size_t size;
};
constexpr Row kRows[] = {
    {DType::F32, "F32", 4},     {DType::F16, "F16", 2}, {DType::BF16, "BF16", 2},
    {DType::F8_E4M3, "F8_E4M3", 1}, {DType::U8, "U8", 1},   {DType::I8, "I8", 1},
    {DType::I16, "I16", 2},     {DType::I32, "I32", 4}, {DType::I64, "I64", 8},
    {DType::F64, "F64", 8},     {DType::BOOL, "BOOL", 1},
};
}  // namespace

const char* dtype_name(DType t) {
  for (const Row& r : kRows)
    if (r.t == t) return r.name;
  return "?";
}

size_t dtype_size(DType t) {
  for (const Row& r : kRows)
    if (r.t == t) return r.size;
  return 0;
}

bool dtype_from_name(const std::string& s, DType* out) {
  for (const Row& r : kRows)
    if (s == r.name) {
      *out = r.t;
      return true;
    }
  return false;
}

}  // namespace nvfp4
