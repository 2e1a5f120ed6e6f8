// CPU kernels of the decoder's non-linear parts and its unquantized (dense) linears. Activations are f32
// arrays whose values are already rounded to the activation dtype T; each op says where it rounds to T.
// The inner loops use GCC/Clang vector extensions (16 lanes) so they vectorise with -O2 under the project's
// -ffp-contract=off (no reassociation is needed: the lanes are explicit); hot functions are compiled for
// AVX-512, AVX2 and the baseline, picked at load time (target_clones). The dense matmul and the attention's row
// products also have AVX2 intrinsics (8-lane register pairs, the same order of operations) for CPUs with AVX2 and
// no AVX-512, where the AVX2 clone of the 16-lane code kept its sums on the stack (chosen by common/cpu_isa.h:
// the AVX2 intrinsics where it says Avx2, the portable code otherwise).
#pragma once
#include <cstdint>

#include "common/dtype.h"

namespace nvfp4::model {

// Dense weight storage of one unquantized linear.
struct DenseWeight {
  int64_t n = 0, k = 0;          // (N out, K in)
  // BF16 / F16: `bits` holds (N, K) bf16 / fp16 bit patterns, row-major; F32: `f32` holds (N, K) f32.
  DType dtype = DType::BF16;
  const uint16_t* bits = nullptr;
  const float* f32 = nullptr;
};

// acc (m, N) f32 = x (m, K) f32 · Wᵀ, accumulated in f32 (16 lanes, i ≡ lane mod 16 in increasing i, then a fixed
// pairwise lane sum, then the scalar tail past the last multiple of 16). A 16-bit weight is widened to f32 on use;
// the widening is exact, so the result is bit-identical to that of an F32 DenseWeight holding the same values.
// Thread-parallel over N (common/parallel.h).
void dense_matmul(const float* x, int64_t m, const DenseWeight& w, float* acc);

// The attention's products over `count` rows of n values, ld apart (cache rows):
// out[t] = Σ_i q[i]·rows[t·ld + i], each in 16 f32 lanes (i ≡ lane mod 16, in increasing i) then a fixed
// pairwise lane sum, then the tail; rows are taken 4 at a time (the same operations per row).
void dot_rows_f32(const float* q, const float* rows, int64_t ld, int64_t count, int64_t n, float* out);
// y[i] += a[t] · rows[t·ld + i] for t = 0, 1, ..., count - 1 in that order (per element: multiply, then add).
void axpy_rows_f32(const float* a, const float* rows, int64_t ld, int64_t count, float* y, int64_t n);
// The same two for nq <= kRowsMaxQueries queries (weight vectors) at once, a prompt's consecutive tokens of one head: query a
// takes rows 0 .. count[a] - 1 (count non-decreasing), each result bit for bit what the one-query function
// gives, the rows the queries share loaded once for all of them (where nq · ceil(n / 16) fits the registers:
// attention_tokens_per_pass(n) queries per call). Rows of f32, or of T bit patterns (t BF16 or F16: a 16-bit
// model's KV cache), widened exactly on load, so the same values give the same bits either way.
constexpr int kRowsMaxQueries = 4;
void dot_rows_multi(const float* const* q, int nq, const float* rows, int64_t ld, const int64_t* count, int64_t n,
                    float* const* out);
void axpy_rows_multi(const float* const* w, int nq, const float* rows, int64_t ld, const int64_t* count,
                     float* const* y, int64_t n);
void dot_rows_multi(const float* const* q, int nq, const uint16_t* rows, DType t, int64_t ld, const int64_t* count,
                    int64_t n, float* const* out);
void axpy_rows_multi(const float* const* w, int nq, const uint16_t* rows, DType t, int64_t ld, const int64_t* count,
                     float* const* y, int64_t n);
int attention_tokens_per_pass(int64_t n);

// out (m, d) = T( T(x · r) · w ), r = 1/sqrt(mean(x²) + eps) per row (HF LlamaRMSNorm: normalise in f32,
// round to T, multiply by the weight in T).
void rmsnorm(const float* x, const float* w, int64_t m, int64_t d, float eps, DType t, float* out);

// HF rotate_half RoPE on one head vector v (hd values): v'[i] = v[i]·c[i] - v[i+hd/2]·s[i],
// v'[i+hd/2] = v[i+hd/2]·c[i] + v[i]·s[i], i < hd/2, then rounded to T. cs: (hd/2) cos, then (hd/2) sin.
void rope_apply(float* v, const float* cs, int64_t hd, DType t);

// Rounds n values to T in place.
void round_to_dtype(float* x, int64_t n, DType t);

}  // namespace nvfp4::model
