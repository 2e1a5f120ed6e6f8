// The error bound of a CUDA linear output against the f64 reference (derivation in docs/TESTING.md).
// Plain C++, used by the GPU tests and the benchmark's pre-timing check.
#pragma once
#include <cmath>
#include <cstdint>

#include "common/dtype.h"

namespace nvfp4::cuda {

// acc: reference value before rounding (f64); pabs: the same reference on |x| and |W| (Σ|products|, scaled);
// bias: the bias value added (0 if none); y: the executor's output value. K: reduction length.
inline double linear_error_bound(DType t, int64_t k, double acc, double pabs, double y) {
  const double nk = static_cast<double>(k + 2) * std::ldexp(1.0, -22);
  const double gamma = nk / (1.0 - nk);
  const double u = t == DType::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  const double tiny = t == DType::BF16 ? 0.0 : std::ldexp(1.0, -25);
  const double gp = gamma * pabs;
  return gp + u * (std::fabs(acc) + gp) + u * std::fabs(y) + 2.0 * tiny;
}

}  // namespace nvfp4::cuda
