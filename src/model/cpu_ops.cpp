#include "model/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "common/error.h"
#include "common/parallel.h"
#include "format/numerics.h"

#include "common/cpu_isa.h"

// NVFP4_CPU_AVX2 (common/cpu_isa.h): the AVX2 kernels below are compiled.
#ifdef NVFP4_CPU_AVX2
#include <immintrin.h>
#endif

// The 16-lane helpers are always inlined into their callers; the ABI note about passing them is moot.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace nvfp4::model {

namespace {

typedef float v16f __attribute__((vector_size(64)));
typedef uint32_t v16u __attribute__((vector_size(64)));
typedef uint16_t v16h __attribute__((vector_size(32)));

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define NVFP4_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define NVFP4_CLONES
#endif

inline v16f load16(const float* p) {
  v16f v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline v16f load16_bf16(const uint16_t* p) {
  v16h h;
  std::memcpy(&h, p, sizeof(h));
  v16u u = __builtin_convertvector(h, v16u) << 16;
  v16f f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
// fp16 -> f32, exact for every code: the 15 magnitude bits shifted into f32 position are the value scaled by
// 2^-112 (f16 subnormals land on f32 subnormals, exactly), so one multiplication by 2^112 restores it; inf
// and NaN (all exponent bits set) get the f32 all-ones exponent instead. Same bits as format's f16_to_f32
// (the 16-bit dense test compares every code).
inline v16f load16_f16(const uint16_t* p) {
  v16h h;
  std::memcpy(&h, p, sizeof(h));
  const v16u u = __builtin_convertvector(h, v16u);
  const v16u mag = u & 0x7fffu;
  const v16u shifted = mag << 13;
  v16f f;
  std::memcpy(&f, &shifted, sizeof(f));
  f = f * 0x1p112f;
  v16u r;
  std::memcpy(&r, &f, sizeof(r));
  const v16u special = (v16u)(mag >= 0x7c00u);  // all ones in the lanes holding inf / NaN
  r = (r & ~special) | ((shifted | 0x7f800000u) & special);
  r |= (u & 0x8000u) << 16;
  std::memcpy(&f, &r, sizeof(f));
  return f;
}

// Rows of f32, bf16 or f16 values (cache rows, weights), widened exactly to f32: 16 at a time or one.
struct F32Values {
  using E = float;
  static v16f load(const float* p) { return load16(p); }
  static float one(float v) { return v; }
};
struct Bf16Values {
  using E = uint16_t;
  static v16f load(const uint16_t* p) { return load16_bf16(p); }
  static float one(uint16_t b) { return bf16_to_f32(b); }
};
struct F16Values {
  using E = uint16_t;
  static v16f load(const uint16_t* p) { return load16_f16(p); }
  static float one(uint16_t b) { return f16_to_f32(b); }
};

// Σ of the 16 lanes in a fixed pairwise order: a[i] + a[i + w] for w = 8, 4, 2, 1 (as vector halves, which
// the compiler otherwise turned into 15 scalar additions).
inline float hsum(v16f v) {
  typedef float v8f __attribute__((vector_size(32)));
  typedef float v4f __attribute__((vector_size(16)));
  v8f lo, hi;
  std::memcpy(&lo, &v, sizeof(lo));
  std::memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof(lo), sizeof(hi));
  const v8f s8 = lo + hi;
  v4f l4, h4;
  std::memcpy(&l4, &s8, sizeof(l4));
  std::memcpy(&h4, reinterpret_cast<const char*>(&s8) + sizeof(l4), sizeof(h4));
  const v4f s4 = l4 + h4;
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

constexpr int kRowBlock = 4;  // tokens processed per pass over a weight row

// Rows n0..n1 of a 16-bit weight, kRowBlock tokens per pass over a row. Each output is the same sequence of f32
// operations as matmul_rows_f32 performs on the widened weight (the blocking only shares the weight loads).
template <class W>
__attribute__((always_inline)) inline void matmul_rows_16(const float* x, int64_t m, int64_t k, const uint16_t* w,
                                                          int64_t n, int64_t n0, int64_t n1, float* acc) {
  const int64_t kv = k / 16 * 16;
  for (int64_t r = n0; r < n1; ++r) {
    const uint16_t* wr = w + r * k;
    for (int64_t i0 = 0; i0 < m; i0 += kRowBlock) {
      const int64_t mb = m - i0 < kRowBlock ? m - i0 : kRowBlock;
      v16f s0 = {}, s1 = {}, s2 = {}, s3 = {};
      const float* x0 = x + i0 * k;
      if (mb == kRowBlock) {
        for (int64_t j = 0; j < kv; j += 16) {
          const v16f wv = W::load(wr + j);
          s0 += load16(x0 + j) * wv;
          s1 += load16(x0 + k + j) * wv;
          s2 += load16(x0 + 2 * k + j) * wv;
          s3 += load16(x0 + 3 * k + j) * wv;
        }
        float t[4] = {hsum(s0), hsum(s1), hsum(s2), hsum(s3)};
        for (int64_t j = kv; j < k; ++j) {
          const float wv = W::one(wr[j]);
          for (int q = 0; q < 4; ++q) t[q] += x0[q * k + j] * wv;
        }
        for (int q = 0; q < 4; ++q) acc[(i0 + q) * n + r] = t[q];
      } else {
        for (int64_t q = 0; q < mb; ++q) {
          v16f s = {};
          const float* xq = x0 + q * k;
          for (int64_t j = 0; j < kv; j += 16) s += load16(xq + j) * W::load(wr + j);
          float t = hsum(s);
          for (int64_t j = kv; j < k; ++j) t += xq[j] * W::one(wr[j]);
          acc[(i0 + q) * n + r] = t;
        }
      }
    }
  }
}

NVFP4_CLONES
void matmul_rows_bf16(const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n, int64_t n0, int64_t n1,
                      float* acc) {
  matmul_rows_16<Bf16Values>(x, m, k, w, n, n0, n1, acc);
}

NVFP4_CLONES
void matmul_rows_f16(const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n, int64_t n0, int64_t n1,
                     float* acc) {
  matmul_rows_16<F16Values>(x, m, k, w, n, n0, n1, acc);
}

NVFP4_CLONES
void matmul_rows_f32(const float* x, int64_t m, int64_t k, const float* w, int64_t n, int64_t n0, int64_t n1,
                     float* acc) {
  const int64_t kv = k / 16 * 16;
  for (int64_t r = n0; r < n1; ++r) {
    const float* wr = w + r * k;
    for (int64_t q = 0; q < m; ++q) {
      v16f s = {};
      const float* xq = x + q * k;
      for (int64_t j = 0; j < kv; j += 16) s += load16(xq + j) * load16(wr + j);
      float t = hsum(s);
      for (int64_t j = kv; j < k; ++j) t += xq[j] * wr[j];
      acc[q * n + r] = t;
    }
  }
}

#ifdef NVFP4_CPU_AVX2
// The dense rows written for AVX2 (8-lane registers): the portable code's AVX2 clone kept its 16-lane sums in
// memory and widened the 16-bit weights element by element (SmolLM2's lm_head, 49152 x 576 bf16 at one token:
// 11.3 ms on 2 cores, 5 GB/s of a 34 GB/s memory; docs/PERF.md "CPU kernels on an AVX2 CPU"). Every output is the portable
// code's sequence of operations: lanes 0-7 and 8-15 of its 16-lane sum are the two registers of a pair, each
// product x·w added in increasing K, then hsum's pairwise order, then the scalar tail.
namespace avx2 {
struct Bf16x8 {
  using E = uint16_t;
  __attribute__((target("avx2"), always_inline)) static inline __m256 load(const uint16_t* p) {
    const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
  }
  static float one(uint16_t b) { return bf16_to_f32(b); }
};
// load16_f16's integer and f32 steps, 8 lanes.
struct F16x8 {
  using E = uint16_t;
  __attribute__((target("avx2"), always_inline)) static inline __m256 load(const uint16_t* p) {
    const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256i mag = _mm256_and_si256(u, _mm256_set1_epi32(0x7fff));
    const __m256i shifted = _mm256_slli_epi32(mag, 13);
    const __m256 f = _mm256_mul_ps(_mm256_castsi256_ps(shifted), _mm256_set1_ps(0x1p112f));
    const __m256i special = _mm256_cmpgt_epi32(mag, _mm256_set1_epi32(0x7bff));
    __m256i r = _mm256_blendv_epi8(_mm256_castps_si256(f), _mm256_or_si256(shifted, _mm256_set1_epi32(0x7f800000)),
                                   special);
    r = _mm256_or_si256(r, _mm256_slli_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x8000)), 16));
    return _mm256_castsi256_ps(r);
  }
  static float one(uint16_t b) { return f16_to_f32(b); }
};
struct F32x8 {
  using E = float;
  __attribute__((target("avx2"), always_inline)) static inline __m256 load(const float* p) { return _mm256_loadu_ps(p); }
  static float one(float v) { return v; }
};

// hsum of the 16 lanes (lo: 0-7, hi: 8-15) in the same order.
__attribute__((target("avx2"), always_inline)) inline float hsum(__m256 lo, __m256 hi) {
  const __m256 s8 = _mm256_add_ps(lo, hi);
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 t = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));  // s4[0] + s4[2], s4[1] + s4[3]
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

// Outputs of kR weight rows from r0 and kT tokens from t0: 2·kR·kT running sums in registers.
template <class W, int kR, int kT>
__attribute__((target("avx2"), always_inline)) inline void tile(const float* x, int64_t k, const typename W::E* w,
                                                               int64_t n, int64_t r0, int64_t t0, float* acc) {
  const int64_t kv = k / 16 * 16;
  __m256 s[kR][kT][2];
  for (int i = 0; i < kR; ++i)
    for (int t = 0; t < kT; ++t) s[i][t][0] = s[i][t][1] = _mm256_setzero_ps();
  // One token over four rows: the hardware prefetcher does not follow four interleaved rows far enough ahead to
  // stream at the memory's rate, so the next four rows (contiguous after these) are fetched ahead, evenly over
  // this pass: kAheadStep bytes per 16 columns. Past the weight's end that fetches nothing useful, and a prefetch
  // never faults; the address is formed as an integer so that no pointer leaves the array.
  const uintptr_t ahead = reinterpret_cast<uintptr_t>(w + r0 * k) + kR * k * sizeof(typename W::E);
  constexpr uintptr_t kAheadStep = 16 * kR * sizeof(typename W::E);
  for (int64_t j = 0; j < kv; j += 16) {
    if constexpr (kT == 1 && kR == 4)
      for (uintptr_t b = 0; b < kAheadStep; b += 64)
        _mm_prefetch(reinterpret_cast<const char*>(ahead + static_cast<uintptr_t>(j / 16) * kAheadStep + b),
                     _MM_HINT_T0);
    for (int i = 0; i < kR; ++i) {
      const typename W::E* wr = w + (r0 + i) * k + j;
      const __m256 w0 = W::load(wr), w1 = W::load(wr + 8);
      for (int t = 0; t < kT; ++t) {
        const float* xt = x + (t0 + t) * k + j;
        s[i][t][0] = _mm256_add_ps(s[i][t][0], _mm256_mul_ps(_mm256_loadu_ps(xt), w0));
        s[i][t][1] = _mm256_add_ps(s[i][t][1], _mm256_mul_ps(_mm256_loadu_ps(xt + 8), w1));
      }
    }
  }
  for (int i = 0; i < kR; ++i) {
    const typename W::E* wr = w + (r0 + i) * k;
    for (int t = 0; t < kT; ++t) {
      const float* xt = x + (t0 + t) * k;
      float v = hsum(s[i][t][0], s[i][t][1]);
      for (int64_t j = kv; j < k; ++j) v += xt[j] * W::one(wr[j]);
      acc[(t0 + t) * n + r0 + i] = v;
    }
  }
}

// Rows n0..n1: four tokens at a time per row (each weight vector widened once for them), the tokens left one
// at a time over four rows at once (four independent pairs of sums: decode's one token is not bound by the add
// latency of one).
template <class W>
__attribute__((target("avx2"))) void rows(const float* x, int64_t m, int64_t k, const typename W::E* w, int64_t n,
                                          int64_t n0, int64_t n1, float* acc) {
  for (int64_t r = n0; r < n1; r += 4) {
    const int64_t rr = std::min<int64_t>(4, n1 - r);
    int64_t t = 0;
    for (; t + 4 <= m; t += 4)
      for (int64_t i = 0; i < rr; ++i) tile<W, 1, 4>(x, k, w, n, r + i, t, acc);
    for (; t < m; ++t) {
      if (rr == 4) {
        tile<W, 4, 1>(x, k, w, n, r, t, acc);
      } else {
        for (int64_t i = 0; i < rr; ++i) tile<W, 1, 1>(x, k, w, n, r + i, t, acc);
      }
    }
  }
}
// The attention's row products (dot_rows_t, dot_rows_q, axpy_rows_t, axpy_rows_q): each result the portable
// code's sequence of operations. Queries and running outputs are read from memory as they are used rather than
// held in registers (16 of them here against AVX-512's 32), and the several-query weighted sum makes as many
// passes over the rows as its outputs need blocks of at most 12 registers; each element still adds its rows'
// products in row order.
template <class W, int kR>
__attribute__((target("avx2"), always_inline)) inline void dot_tile(const float* q, const typename W::E* b, int64_t ld,
                                                                   int64_t n, float* out) {
  const int64_t nv = n / 16 * 16;
  __m256 s[kR][2];
  for (int i = 0; i < kR; ++i) s[i][0] = s[i][1] = _mm256_setzero_ps();
  for (int64_t j = 0; j < nv; j += 16) {
    const __m256 q0 = _mm256_loadu_ps(q + j), q1 = _mm256_loadu_ps(q + j + 8);
    for (int i = 0; i < kR; ++i) {
      s[i][0] = _mm256_add_ps(s[i][0], _mm256_mul_ps(q0, W::load(b + i * ld + j)));
      s[i][1] = _mm256_add_ps(s[i][1], _mm256_mul_ps(q1, W::load(b + i * ld + j + 8)));
    }
  }
  for (int i = 0; i < kR; ++i) {
    float t = hsum(s[i][0], s[i][1]);
    for (int64_t j = nv; j < n; ++j) t += q[j] * W::one(b[i * ld + j]);
    out[i] = t;
  }
}

template <class W>
__attribute__((target("avx2"))) void dot_rows(const float* q, const typename W::E* rows, int64_t ld, int64_t count,
                                              int64_t n, float* out) {
  int64_t r = 0;
  for (; r + 4 <= count; r += 4) dot_tile<W, 4>(q, rows + r * ld, ld, n, out + r);
  for (; r < count; ++r) dot_tile<W, 1>(q, rows + r * ld, ld, n, out + r);
}

template <class W, int kQ>
__attribute__((target("avx2"), always_inline)) inline void dot_rows_q(const float* const* q, const typename W::E* rows,
                                                                     int64_t ld, int64_t count, int64_t n,
                                                                     float* const* out) {
  const int64_t nv = n / 16 * 16;
  for (int64_t r = 0; r < count; ++r) {
    const typename W::E* b = rows + r * ld;
    __m256 s[kQ][2];
    for (int a = 0; a < kQ; ++a) s[a][0] = s[a][1] = _mm256_setzero_ps();
    for (int64_t j = 0; j < nv; j += 16) {
      const __m256 b0 = W::load(b + j), b1 = W::load(b + j + 8);
      for (int a = 0; a < kQ; ++a) {
        s[a][0] = _mm256_add_ps(s[a][0], _mm256_mul_ps(_mm256_loadu_ps(q[a] + j), b0));
        s[a][1] = _mm256_add_ps(s[a][1], _mm256_mul_ps(_mm256_loadu_ps(q[a] + j + 8), b1));
      }
    }
    for (int a = 0; a < kQ; ++a) {
      float t = hsum(s[a][0], s[a][1]);
      for (int64_t j = nv; j < n; ++j) t += q[a][j] * W::one(b[j]);
      out[a][r] = t;
    }
  }
}

// y[a][16c .. 16(c + kC)) for the kQ weight vectors over rows [0, count).
template <class W, int kQ, int kC>
__attribute__((target("avx2"), always_inline)) inline void axpy_block(const float* const* w, const typename W::E* rows,
                                                                     int64_t ld, int64_t count, float* const* y,
                                                                     int64_t c) {
  __m256 acc[kQ][kC][2];
  for (int a = 0; a < kQ; ++a)
    for (int i = 0; i < kC; ++i)
      for (int h = 0; h < 2; ++h) acc[a][i][h] = _mm256_loadu_ps(y[a] + 16 * (c + i) + 8 * h);
  for (int64_t t = 0; t < count; ++t) {
    const typename W::E* r = rows + t * ld + 16 * c;
    __m256 wt[kQ];
    for (int a = 0; a < kQ; ++a) wt[a] = _mm256_set1_ps(w[a][t]);
    for (int i = 0; i < kC; ++i)
      for (int h = 0; h < 2; ++h) {
        const __m256 bv = W::load(r + 16 * i + 8 * h);
        for (int a = 0; a < kQ; ++a) acc[a][i][h] = _mm256_add_ps(acc[a][i][h], _mm256_mul_ps(wt[a], bv));
      }
  }
  for (int a = 0; a < kQ; ++a)
    for (int i = 0; i < kC; ++i)
      for (int h = 0; h < 2; ++h) _mm256_storeu_ps(y[a] + 16 * (c + i) + 8 * h, acc[a][i][h]);
}

// The last block of `left` < kC vectors: one pass of axpy_block<left>.
template <class W, int kQ, int kC>
__attribute__((target("avx2"), always_inline)) inline void axpy_last(const float* const* w, const typename W::E* rows,
                                                                    int64_t ld, int64_t count, float* const* y,
                                                                    int64_t c, int64_t left) {
  if constexpr (kC > 1) {
    if (left == kC - 1) axpy_block<W, kQ, kC - 1>(w, rows, ld, count, y, c);
    else axpy_last<W, kQ, kC - 1>(w, rows, ld, count, y, c, left);
  }
}

// kQ weight vectors (1-4) over rows of n values: blocks of 6 / kQ vectors of 16 per pass over the rows, a last
// shorter block, then the tail elements.
template <class W, int kQ>
__attribute__((target("avx2"), always_inline)) inline void axpy_rows_q(const float* const* w, const typename W::E* rows,
                                                                      int64_t ld, int64_t count, float* const* y,
                                                                      int64_t n) {
  constexpr int kBlock = 6 / kQ;
  const int64_t chunks = n / 16;
  int64_t c = 0;
  for (; c + kBlock <= chunks; c += kBlock) axpy_block<W, kQ, kBlock>(w, rows, ld, count, y, c);
  if (c < chunks) axpy_last<W, kQ, kBlock>(w, rows, ld, count, y, c, chunks - c);
  for (int a = 0; a < kQ; ++a)
    for (int64_t j = 16 * chunks; j < n; ++j)
      for (int64_t t = 0; t < count; ++t) y[a][j] += w[a][t] * W::one(rows[t * ld + j]);
}

template <class W>
__attribute__((target("avx2"))) void axpy_rows(const float* a, const typename W::E* rows, int64_t ld, int64_t count,
                                               float* y, int64_t n) {
  axpy_rows_q<W, 1>(&a, rows, ld, count, &y, n);
}

// 2-4 queries over the rows they share (always applies: no register budget to refuse).
template <class W>
__attribute__((target("avx2"))) bool dot_rows_multi(int nq, const float* const* q, const typename W::E* rows, int64_t ld,
                                                    int64_t count, int64_t n, float* const* out) {
  switch (nq) {
    case 2: dot_rows_q<W, 2>(q, rows, ld, count, n, out); return true;
    case 3: dot_rows_q<W, 3>(q, rows, ld, count, n, out); return true;
    case 4: dot_rows_q<W, 4>(q, rows, ld, count, n, out); return true;
    default: return false;
  }
}
template <class W>
__attribute__((target("avx2"))) bool axpy_rows_multi(int nq, const float* const* w, const typename W::E* rows,
                                                     int64_t ld, int64_t count, int64_t n, float* const* y) {
  switch (nq) {
    case 2: axpy_rows_q<W, 2>(w, rows, ld, count, y, n); return true;
    case 3: axpy_rows_q<W, 3>(w, rows, ld, count, y, n); return true;
    case 4: axpy_rows_q<W, 4>(w, rows, ld, count, y, n); return true;
    default: return false;
  }
}
}  // namespace avx2
#endif

// Whether the AVX2 intrinsics run: where the CPU (or the cap, common/cpu_isa.h) stops at AVX2. With AVX-512 the
// portable code's AVX-512 clone runs.
bool use_avx2() { return cpu_isa() == CpuIsa::Avx2; }

}  // namespace

void dense_matmul(const float* x, int64_t m, const DenseWeight& w, float* acc) {
  if (m <= 0) return;
  const bool avx2_rows = use_avx2();
  const bool is16 = w.dtype == DType::BF16 || w.dtype == DType::F16;
  if (is16) {
    NVFP4_CHECK(w.bits != nullptr, "dense_matmul: missing 16-bit weight");
  } else {
    NVFP4_CHECK(w.dtype == DType::F32, "dense_matmul: weight dtype must be bf16, f16 or f32");
    NVFP4_CHECK(w.f32 != nullptr, "dense_matmul: missing f32 weight");
  }
  parallel_for(static_cast<size_t>(w.n), 32, [&](size_t a, size_t b) {
    const int64_t n0 = static_cast<int64_t>(a), n1 = static_cast<int64_t>(b);
#ifdef NVFP4_CPU_AVX2
    if (avx2_rows) {
      if (w.dtype == DType::BF16) avx2::rows<avx2::Bf16x8>(x, m, w.k, w.bits, w.n, n0, n1, acc);
      else if (w.dtype == DType::F16) avx2::rows<avx2::F16x8>(x, m, w.k, w.bits, w.n, n0, n1, acc);
      else avx2::rows<avx2::F32x8>(x, m, w.k, w.f32, w.n, n0, n1, acc);
      return;
    }
#endif
    (void)avx2_rows;
    if (w.dtype == DType::BF16) matmul_rows_bf16(x, m, w.k, w.bits, w.n, n0, n1, acc);
    else if (w.dtype == DType::F16) matmul_rows_f16(x, m, w.k, w.bits, w.n, n0, n1, acc);
    else matmul_rows_f32(x, m, w.k, w.f32, w.n, n0, n1, acc);
  });
}

namespace {

// The several-query row products keep kQ·kC vectors of queries (or outputs) in registers: kQ <= kRowQueries
// queries of kC <= kRowChunks 16-value chunks, kQ·kC <= kRowVectors.
constexpr int kRowVectors = 16, kRowQueries = kRowsMaxQueries, kRowChunks = 8;

// The attention's row products (cpu_ops.h), over rows of R's element type.
template <class R>
__attribute__((always_inline)) inline void dot_rows_t(const float* q, const typename R::E* rows, int64_t ld,
                                                      int64_t count, int64_t n, float* out) {
  const int64_t nv = n / 16 * 16;
  auto finish = [&](v16f s, const typename R::E* b) {
    float t = hsum(s);
    for (int64_t j = nv; j < n; ++j) t += q[j] * R::one(b[j]);
    return t;
  };
  int64_t r = 0;
  for (; r + 4 <= count; r += 4) {  // four independent sums in flight
    const typename R::E *b0 = rows + r * ld, *b1 = b0 + ld, *b2 = b1 + ld, *b3 = b2 + ld;
    v16f s0 = {}, s1 = {}, s2 = {}, s3 = {};
    for (int64_t j = 0; j < nv; j += 16) {
      const v16f qv = load16(q + j);
      s0 += qv * R::load(b0 + j);
      s1 += qv * R::load(b1 + j);
      s2 += qv * R::load(b2 + j);
      s3 += qv * R::load(b3 + j);
    }
    out[r] = finish(s0, b0);
    out[r + 1] = finish(s1, b1);
    out[r + 2] = finish(s2, b2);
    out[r + 3] = finish(s3, b3);
  }
  for (; r < count; ++r) {
    const typename R::E* b = rows + r * ld;
    v16f s = {};
    for (int64_t j = 0; j < nv; j += 16) s += load16(q + j) * R::load(b + j);
    out[r] = finish(s, b);
  }
}

// kQ queries (a prompt's consecutive tokens of one head) against rows [0, count) of kC·16 + tail values: each
// row's vectors loaded (and widened) once for all of them; every product is dot_rows_t's sequence of operations.
template <class R, int kQ, int kC>
__attribute__((always_inline)) inline void dot_rows_q(const float* const* q, const typename R::E* rows, int64_t ld,
                                                      int64_t count, int64_t n, float* const* out) {
  v16f qv[kQ][kC];
  for (int a = 0; a < kQ; ++a)
    for (int c = 0; c < kC; ++c) qv[a][c] = load16(q[a] + 16 * c);
  for (int64_t r = 0; r < count; ++r) {
    const typename R::E* b = rows + r * ld;
    v16f s[kQ] = {};
    for (int c = 0; c < kC; ++c) {
      const v16f bv = R::load(b + 16 * c);
      for (int a = 0; a < kQ; ++a) s[a] += qv[a][c] * bv;
    }
    for (int a = 0; a < kQ; ++a) {
      float t = hsum(s[a]);
      for (int64_t j = 16 * kC; j < n; ++j) t += q[a][j] * R::one(b[j]);
      out[a][r] = t;
    }
  }
}

// kQ weight vectors over rows [0, count): y[a] += Σ_t w[a][t]·row_t, each element in t order (axpy_rows_t's
// operations), each row's vectors loaded (and widened) once for all of them.
template <class R, int kQ, int kC>
__attribute__((always_inline)) inline void axpy_rows_q(const float* const* w, const typename R::E* rows, int64_t ld,
                                                       int64_t count, float* const* y, int64_t n) {
  v16f yv[kQ][kC];
  for (int a = 0; a < kQ; ++a)
    for (int c = 0; c < kC; ++c) yv[a][c] = load16(y[a] + 16 * c);
  for (int64_t t = 0; t < count; ++t) {
    const typename R::E* r = rows + t * ld;
    float wt[kQ];
    for (int a = 0; a < kQ; ++a) wt[a] = w[a][t];
    for (int c = 0; c < kC; ++c) {
      const v16f bv = R::load(r + 16 * c);
      for (int a = 0; a < kQ; ++a) yv[a][c] = yv[a][c] + wt[a] * bv;
    }
  }
  for (int a = 0; a < kQ; ++a) std::memcpy(y[a], yv[a], sizeof(yv[a]));
  for (int a = 0; a < kQ; ++a)
    for (int64_t j = 16 * kC; j < n; ++j)
      for (int64_t t = 0; t < count; ++t) y[a][j] += w[a][t] * R::one(rows[t * ld + j]);
}

// One weight vector over rows of any length: up to 8 vectors of y per pass over the rows (axpy_rows_q with one
// query and no tail), then the tail elements, each element's products added in row order.
template <class R>
__attribute__((always_inline)) inline void axpy_rows_t(const float* a, const typename R::E* rows, int64_t ld,
                                                       int64_t count, float* y, int64_t n) {
  const int64_t nv = n / 16 * 16;
  for (int64_t j = 0; j < nv; j += 16 * 8) {
    const typename R::E* r = rows + j;
    float* yj = y + j;
    switch ((nv - j) / 16 < 8 ? (nv - j) / 16 : 8) {
      case 1: axpy_rows_q<R, 1, 1>(&a, r, ld, count, &yj, 16); break;
      case 2: axpy_rows_q<R, 1, 2>(&a, r, ld, count, &yj, 32); break;
      case 3: axpy_rows_q<R, 1, 3>(&a, r, ld, count, &yj, 48); break;
      case 4: axpy_rows_q<R, 1, 4>(&a, r, ld, count, &yj, 64); break;
      case 5: axpy_rows_q<R, 1, 5>(&a, r, ld, count, &yj, 80); break;
      case 6: axpy_rows_q<R, 1, 6>(&a, r, ld, count, &yj, 96); break;
      case 7: axpy_rows_q<R, 1, 7>(&a, r, ld, count, &yj, 112); break;
      default: axpy_rows_q<R, 1, 8>(&a, r, ld, count, &yj, 128); break;
    }
  }
  for (int64_t j = nv; j < n; ++j)
    for (int64_t t = 0; t < count; ++t) y[j] += a[t] * R::one(rows[t * ld + j]);
}

// Dispatch on (queries, 16-value chunks) within the register budget; false where it does not apply.
// Function templates, not lambdas: a lambda would be compiled apart from the caller's instruction-set clone.
template <class R, bool kDot, int kQ, int kC>
__attribute__((always_inline)) inline bool rows_run(const float* const* x, const typename R::E* rows, int64_t ld,
                                                    int64_t count, int64_t n, float* const* out) {
  if constexpr (kQ * kC <= kRowVectors) {
    if constexpr (kDot) dot_rows_q<R, kQ, kC>(x, rows, ld, count, n, out);
    else axpy_rows_q<R, kQ, kC>(x, rows, ld, count, out, n);
    return true;
  }
  return false;
}

template <class R, bool kDot, int kQ>
__attribute__((always_inline)) inline bool rows_chunks(const float* const* x, const typename R::E* rows, int64_t ld,
                                                       int64_t count, int64_t n, float* const* out) {
  switch (n / 16) {
    case 1: return rows_run<R, kDot, kQ, 1>(x, rows, ld, count, n, out);
    case 2: return rows_run<R, kDot, kQ, 2>(x, rows, ld, count, n, out);
    case 3: return rows_run<R, kDot, kQ, 3>(x, rows, ld, count, n, out);
    case 4: return rows_run<R, kDot, kQ, 4>(x, rows, ld, count, n, out);
    case 5: return rows_run<R, kDot, kQ, 5>(x, rows, ld, count, n, out);
    case 6: return rows_run<R, kDot, kQ, 6>(x, rows, ld, count, n, out);
    case 7: return rows_run<R, kDot, kQ, 7>(x, rows, ld, count, n, out);
    case 8: return rows_run<R, kDot, kQ, 8>(x, rows, ld, count, n, out);
    default: static_assert(kRowChunks == 8, "rows_chunks' cases"); return false;
  }
}

template <class R, bool kDot>
__attribute__((always_inline)) inline bool rows_q(int nq, const float* const* x, const typename R::E* rows, int64_t ld,
                                                  int64_t count, int64_t n, float* const* out) {
  switch (nq) {
    case 2: return rows_chunks<R, kDot, 2>(x, rows, ld, count, n, out);
    case 3: return rows_chunks<R, kDot, 3>(x, rows, ld, count, n, out);
    case 4: return rows_chunks<R, kDot, 4>(x, rows, ld, count, n, out);
    default: static_assert(kRowQueries == 4, "rows_q's cases"); return false;
  }
}

// One function per row type and instruction-set clone: one query (dot_rows / axpy_rows), or 2-4 over the rows
// they share (false where the register budget does not allow them).
#define NVFP4_ROW_FUNCTIONS(NAME, R)                                                                              \
  NVFP4_CLONES void dot_rows_##NAME(const float* q, const R::E* rows, int64_t ld, int64_t count, int64_t n,      \
                                    float* out) {                                                               \
    dot_rows_t<R>(q, rows, ld, count, n, out);                                                                  \
  }                                                                                                             \
  NVFP4_CLONES void axpy_rows_##NAME(const float* a, const R::E* rows, int64_t ld, int64_t count, float* y,      \
                                     int64_t n) {                                                               \
    axpy_rows_t<R>(a, rows, ld, count, y, n);                                                                   \
  }                                                                                                             \
  NVFP4_CLONES bool dot_rows_q_##NAME(int nq, const float* const* q, const R::E* rows, int64_t ld, int64_t count, \
                                      int64_t n, float* const* out) {                                           \
    return rows_q<R, true>(nq, q, rows, ld, count, n, out);                                                     \
  }                                                                                                             \
  NVFP4_CLONES bool axpy_rows_q_##NAME(int nq, const float* const* w, const R::E* rows, int64_t ld, int64_t count, \
                                       int64_t n, float* const* y) {                                            \
    return rows_q<R, false>(nq, w, rows, ld, count, n, y);                                                      \
  }
NVFP4_ROW_FUNCTIONS(f32_rows, F32Values)
NVFP4_ROW_FUNCTIONS(bf16_rows, Bf16Values)
NVFP4_ROW_FUNCTIONS(f16_rows, F16Values)
#undef NVFP4_ROW_FUNCTIONS

// The multi-query forms' arguments: 1 to 4 queries whose row counts do not decrease.
void check_multi(int nq, const int64_t* count, const char* what) {
  NVFP4_CHECK(nq >= 1 && nq <= kRowQueries, std::string(what) + ": 1 to " + std::to_string(kRowQueries) + " queries");
  for (int a = 1; a < nq; ++a) NVFP4_CHECK(count[a] >= count[a - 1], std::string(what) + ": counts must not decrease");
}

// The multi-query forms over rows of any type: the shared rows for all queries at once, then each query's own.
template <class E, class Dot, class DotQ>
void dot_multi(const float* const* q, int nq, const E* rows, int64_t ld, const int64_t* count, int64_t n,
               float* const* out, Dot dot, DotQ dot_q) {
  check_multi(nq, count, "dot_rows_multi");
  const int64_t shared = count[0];
  if (nq == 1 || !dot_q(nq, q, rows, ld, shared, n, out)) {
    for (int a = 0; a < nq; ++a) dot(q[a], rows, ld, count[a], n, out[a]);
    return;
  }
  for (int a = 1; a < nq; ++a)  // the rows only the later tokens read
    dot(q[a], rows + shared * ld, ld, count[a] - shared, n, out[a] + shared);
}

template <class E, class Axpy, class AxpyQ>
void axpy_multi(const float* const* w, int nq, const E* rows, int64_t ld, const int64_t* count, float* const* y,
                int64_t n, Axpy axpy, AxpyQ axpy_q) {
  check_multi(nq, count, "axpy_rows_multi");
  const int64_t shared = count[0];
  if (nq == 1 || !axpy_q(nq, w, rows, ld, shared, n, y)) {
    for (int a = 0; a < nq; ++a) axpy(w[a], rows, ld, count[a], y[a], n);
    return;
  }
  for (int a = 1; a < nq; ++a)  // the later rows, after the shared ones: each element still in row order
    axpy(w[a] + shared, rows + shared * ld, ld, count[a] - shared, y[a], n);
}

void check_bits16_rows(DType t, const char* what) {
  NVFP4_CHECK(t == DType::BF16 || t == DType::F16, std::string(what) + ": 16-bit rows must be bf16 or f16");
}

}  // namespace

namespace {

// The four row functions of one row type: the portable clones, or the AVX2 intrinsics where use_avx2 says so.
template <class E>
struct RowFunctions {
  void (*dot)(const float*, const E*, int64_t, int64_t, int64_t, float*);
  void (*axpy)(const float*, const E*, int64_t, int64_t, float*, int64_t);
  bool (*dot_q)(int, const float* const*, const E*, int64_t, int64_t, int64_t, float* const*);
  bool (*axpy_q)(int, const float* const*, const E*, int64_t, int64_t, int64_t, float* const*);
};

// NAME: the portable functions' suffix, E: the row element, W: the AVX2 row loader.
#ifdef NVFP4_CPU_AVX2
#define NVFP4_ROW_SET(NAME, E, W)                                                                           \
  use_avx2() ? RowFunctions<E>{avx2::dot_rows<avx2::W>, avx2::axpy_rows<avx2::W>, avx2::dot_rows_multi<avx2::W>, \
                               avx2::axpy_rows_multi<avx2::W>}                                                 \
             : RowFunctions<E>{dot_rows_##NAME, axpy_rows_##NAME, dot_rows_q_##NAME, axpy_rows_q_##NAME}
#else
#define NVFP4_ROW_SET(NAME, E, W) \
  RowFunctions<E> { dot_rows_##NAME, axpy_rows_##NAME, dot_rows_q_##NAME, axpy_rows_q_##NAME }
#endif

RowFunctions<float> f32_row_functions() { return NVFP4_ROW_SET(f32_rows, float, F32x8); }

// Rows of T bit patterns (t: BF16 or F16; what: the caller, for the error).
RowFunctions<uint16_t> bits16_row_functions(DType t, const char* what) {
  check_bits16_rows(t, what);
  if (t == DType::BF16) return NVFP4_ROW_SET(bf16_rows, uint16_t, Bf16x8);
  return NVFP4_ROW_SET(f16_rows, uint16_t, F16x8);
}
#undef NVFP4_ROW_SET

}  // namespace

void dot_rows_f32(const float* q, const float* rows, int64_t ld, int64_t count, int64_t n, float* out) {
  f32_row_functions().dot(q, rows, ld, count, n, out);
}

void axpy_rows_f32(const float* a, const float* rows, int64_t ld, int64_t count, float* y, int64_t n) {
  f32_row_functions().axpy(a, rows, ld, count, y, n);
}

int attention_tokens_per_pass(int64_t n) {
  const int64_t chunks = n / 16;
  if (chunks < 1 || chunks > kRowChunks) return 1;
  return static_cast<int>(std::min<int64_t>(kRowQueries, kRowVectors / chunks));
}

void dot_rows_multi(const float* const* q, int nq, const float* rows, int64_t ld, const int64_t* count, int64_t n,
                    float* const* out) {
  const auto f = f32_row_functions();
  dot_multi(q, nq, rows, ld, count, n, out, f.dot, f.dot_q);
}

void axpy_rows_multi(const float* const* w, int nq, const float* rows, int64_t ld, const int64_t* count,
                     float* const* y, int64_t n) {
  const auto f = f32_row_functions();
  axpy_multi(w, nq, rows, ld, count, y, n, f.axpy, f.axpy_q);
}

void dot_rows_multi(const float* const* q, int nq, const uint16_t* rows, DType t, int64_t ld, const int64_t* count,
                    int64_t n, float* const* out) {
  const auto f = bits16_row_functions(t, "dot_rows_multi");
  dot_multi(q, nq, rows, ld, count, n, out, f.dot, f.dot_q);
}

void axpy_rows_multi(const float* const* w, int nq, const uint16_t* rows, DType t, int64_t ld, const int64_t* count,
                     float* const* y, int64_t n) {
  const auto f = bits16_row_functions(t, "axpy_rows_multi");
  axpy_multi(w, nq, rows, ld, count, y, n, f.axpy, f.axpy_q);
}

void rmsnorm(const float* x, const float* w, int64_t m, int64_t d, float eps, DType t, float* out) {
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * d;
    double ss = 0;  // the mean of squares in f64: order-independent to well below f32 precision
    for (int64_t j = 0; j < d; ++j) ss += static_cast<double>(xi[j]) * xi[j];
    const float r = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + static_cast<double>(eps)));
    float* oi = out + i * d;
    for (int64_t j = 0; j < d; ++j) oi[j] = round_to(t, round_to(t, xi[j] * r) * w[j]);
  }
}

void rope_apply(float* v, const float* cs, int64_t hd, DType t) {
  const int64_t h = hd / 2;
  const float* c = cs;
  const float* s = cs + h;
  for (int64_t i = 0; i < h; ++i) {
    const float a = v[i], b = v[i + h];
    v[i] = round_to(t, a * c[i] - b * s[i]);
    v[i + h] = round_to(t, b * c[i] + a * s[i]);
  }
}

void round_to_dtype(float* x, int64_t n, DType t) {
  if (t == DType::F32) return;
  for (int64_t i = 0; i < n; ++i) x[i] = round_to(t, x[i]);
}

}  // namespace nvfp4::model
