// The documented order of one dot product of the model's CPU ops (model/cpu_ops.h: dense_matmul, dot_rows_f32), in
// scalars, for the tests to compare every path with.
#pragma once
#include <cstdint>

namespace nvfp4::model::testing {

// Lane l sums x[i]·w[i] for i ≡ l (mod 16), i < n rounded down to 16, in increasing i; then a[l] + a[l + 8], then
// the same with 4, then (b0 + b2) + (b1 + b3); then the tail.
inline float model_dot(const float* x, const float* w, int64_t n) {
  const int64_t nv = n / 16 * 16;
  float lane[16] = {};
  for (int64_t i = 0; i < nv; ++i) lane[i % 16] = lane[i % 16] + x[i] * w[i];
  float s8[8], s4[4];
  for (int l = 0; l < 8; ++l) s8[l] = lane[l] + lane[l + 8];
  for (int l = 0; l < 4; ++l) s4[l] = s8[l] + s8[l + 4];
  float t = (s4[0] + s4[2]) + (s4[1] + s4[3]);
  for (int64_t i = nv; i < n; ++i) t = t + x[i] * w[i];
  return t;
}

}  // namespace nvfp4::model::testing
