// The cuBLASLt descriptors of the native FP4 executor, built with the cuBLASLt this binary runs with: every
// attribute (TRANSA/B, A/B_SCALE_MODE = VEC16_UE4M3, scale pointers, POINTER_MODE) and every layout
// (CUDA_R_4F_E2M1 operands, bf16/fp16 output) must be accepted. Host-only cuBLASLt calls: no GPU needed, so
// this runs in every CUDA build (label unit). Whether an algorithm exists is a question for the hardware
// (tests/backends/cublaslt).
#include <gtest/gtest.h>

#include <string>

#ifdef NVFP4_HAVE_CUDA
#include "backends/cublaslt/cublaslt_internal.h"
#endif

namespace nvfp4 {
namespace {

#ifdef NVFP4_HAVE_CUDA
TEST(CublasLtDescriptors, AcceptedByThisCublasLt) {
  struct Case {
    int64_t k, rows, tokens;
  };
  const Case cases[] = {{4096, 4096, 1}, {1040, 208, 37}, {48, 16, 16}, {14336, 4096, 4096}, {64, 128, 128}};
  for (DType t : {DType::BF16, DType::F16})
    for (bool dev_scalars : {true, false})
      for (const Case& c : cases) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " K=" + std::to_string(c.k) + " rows=" + std::to_string(c.rows) +
                     " tokens=" + std::to_string(c.tokens) + (dev_scalars ? " device alpha" : " host alpha"));
        EXPECT_EQ(cublaslt::internal::check_descriptors(t, c.k, c.rows, c.tokens, dev_scalars), "");
      }
}
#else
TEST(CublasLtDescriptors, AcceptedByThisCublasLt) { GTEST_SKIP() << "CPU-only build (no cuBLASLt)"; }
#endif

}  // namespace
}  // namespace nvfp4
