// CPU executor: the reference for every semantics (f64) and a fast path: threads over blocks of weight rows,
// each block decoded once per call into a small f32 buffer and reused by every token (cache-blocked over rows,
// tokens and K), f32 accumulation in 8 independent lanes per output (AVX2 where the CPU has it).
#include "backends/cpu/linear.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>

#include "common/error.h"
#include "common/parallel.h"
#include "format/numerics.h"

// NVFP4_CPU_AVX2 (common/cpu_isa.h): the x86 intrinsics are compiled.
#ifdef NVFP4_CPU_AVX2
#include <immintrin.h>
#endif

namespace nvfp4 {

namespace {

void validate(const LinearWeights& w, Semantics s, DType act) {
  const std::string& name = w.name.empty() ? std::string("linear") : w.name;
  if (act != DType::BF16 && act != DType::F16)
    fail(name + ": activation dtype " + dtype_name(act) + " is not supported, expected BF16 or F16");
  if (w.weight.cols % kGroupSize != 0)
    fail(name + ": K = " + std::to_string(w.weight.cols) + " is not a multiple of 16");
  if (w.weight.codes.size() != static_cast<size_t>(w.weight.rows * (w.weight.cols / 2)) ||
      w.weight.scales.size() != static_cast<size_t>(w.weight.rows * (w.weight.cols / kGroupSize)))
    fail(name + ": weight codes/scales do not match shape [" + std::to_string(w.weight.rows) + ", " +
         std::to_string(w.weight.cols) + "]");
  if (!w.bias.empty() && static_cast<int64_t>(w.bias.size()) != w.weight.rows)
    fail(name + ": bias has " + std::to_string(w.bias.size()) + " values, expected " +
         std::to_string(w.weight.rows));
  if (s != Semantics::W4A16 && !w.has_input_scale)
    fail(name + ": " + semantics_name(s) + " needs an input global scale; this layer is weight-only (W4A16)");
}

// ---- The blocked kernel --------------------------------------------------------------------------------
// Every output (m, n) is the sum of K exact f32 products x[m,k]·w[n,k], taken in a FIXED order: 8 lanes, lane j
// adds the products k ≡ j (mod 8) in increasing k, starting from +0; then the tree
// ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)); then ·post; then the output rounding. Blocking over rows, tokens and K
// only changes when each lane's next addition happens, never which additions or in which order, so every
// block size and every code path below (AVX2 or portable) gives the same bits.
constexpr int64_t kLanes = 8;
constexpr int64_t kKBlock = 512;     // K columns per block (multiple of 16)
constexpr int64_t kTokenBlock = 64;  // tokens whose lane sums are kept at once
// Weight rows decoded together. Up to kTokenBlock tokens: 8 (a tile of 8 × 512 f32 = 16 KiB stays in L1 from its
// decode to its last use). More tokens: up to 64, so that each activation block, read from L3 once per row
// block, feeds 64 rows instead of 8 (the 64 × 512 tile, 128 KiB, sits in L2; a 4-row slice of it in L1).
constexpr int64_t kRowBlock = 8;
constexpr int64_t kRowBlockMany = 64;
constexpr int kMr = 2, kNr = 4;      // register tile: 2 tokens × 4 rows = 8 vector accumulators
constexpr int kMr512 = 4;            // with AVX-512VL's 32 registers: 4 tokens × 4 rows
static_assert(kKBlock % kGroupSize == 0 && kRowBlock % kNr == 0, "block sizes");

// Pairs of E2M1 values for every byte (low nibble first): one table load decodes two weights.
struct PairTable {
  std::array<std::array<float, 2>, 256> v;
  PairTable() {
    for (int b = 0; b < 256; ++b) v[b] = {e2m1_decode(static_cast<uint8_t>(b & 0xF)), e2m1_decode(static_cast<uint8_t>(b >> 4))};
  }
};
const PairTable& pairs() {
  static const PairTable t;
  return t;
}

// Portable versions. decode: out[0, 16·groups) = e2m1(code) · scale[g] (then T-rounded when round_t != F32).
void decode_portable(const uint8_t* codes, const float* sc, int64_t groups, DType round_t, float* out) {
  const auto& lut = pairs().v;
  for (int64_t g = 0; g < groups; ++g) {
    const float s = sc[g];
    for (int j = 0; j < 8; ++j) {
      const auto& p = lut[codes[g * 8 + j]];
      out[g * kGroupSize + 2 * j] = p[0] * s;
      out[g * kGroupSize + 2 * j + 1] = p[1] * s;
    }
  }
  if (round_t != DType::F32)
    for (int64_t c = 0; c < groups * kGroupSize; ++c) out[c] = round_to(round_t, out[c]);
}

// acc[(i·acc_ld + j)·8 + l] += Σ_{k ≡ l mod 8, k < kk} x[i·ldx + k] · w[j·ldw + k], i < mr, j < nr.
void tile_portable(const float* x, int64_t ldx, int mr, const float* w, int64_t ldw, int nr, int64_t kk,
                   float* acc, int64_t acc_ld) {
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j) {
      float a[kLanes];
      float* dst = acc + (i * acc_ld + j) * kLanes;
      for (int l = 0; l < kLanes; ++l) a[l] = dst[l];
      const float* xi = x + i * ldx;
      const float* wj = w + j * ldw;
      for (int64_t k = 0; k < kk; k += kLanes)
        for (int l = 0; l < kLanes; ++l) a[l] += xi[k + l] * wj[k + l];
      for (int l = 0; l < kLanes; ++l) dst[l] = a[l];
    }
}

#if defined(NVFP4_CPU_AVX2)
// AVX2 versions: the same operations lane for lane (one ymm = the 8 lanes; mul then add, never FMA).
template <int MR, int NR>
__attribute__((target("avx2"), always_inline)) inline void tile_body(const float* x, int64_t ldx, const float* w,
                                                                     int64_t ldw, int64_t kk, float* acc,
                                                                     int64_t acc_ld) {
  __m256 a[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) a[i][j] = _mm256_loadu_ps(acc + (i * acc_ld + j) * kLanes);
  for (int64_t k = 0; k < kk; k += kLanes) {
    __m256 wv[NR];
    for (int j = 0; j < NR; ++j) {
      wv[j] = _mm256_loadu_ps(w + j * ldw + k);
      asm("" : "+x"(wv[j]));  // keep w in a register: folding it into each mul doubles the loads
    }
    for (int i = 0; i < MR; ++i) {
      const __m256 xv = _mm256_loadu_ps(x + i * ldx + k);
      for (int j = 0; j < NR; ++j) a[i][j] = _mm256_add_ps(a[i][j], _mm256_mul_ps(xv, wv[j]));
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) _mm256_storeu_ps(acc + (i * acc_ld + j) * kLanes, a[i][j]);
}

template <int MR, int NR>
__attribute__((target("avx2"))) void tile_avx2_fixed(const float* x, int64_t ldx, const float* w, int64_t ldw,
                                                     int64_t kk, float* acc, int64_t acc_ld) {
  tile_body<MR, NR>(x, ldx, w, ldw, kk, acc, acc_ld);
}
// The same code where AVX-512VL gives 32 vector registers: 4 tokens × 4 rows (16 accumulators) fit, halving the
// loads per product.
template <int MR, int NR>
__attribute__((target("avx2,avx512f,avx512vl"))) void tile_avx512_fixed(const float* x, int64_t ldx, const float* w,
                                                                       int64_t ldw, int64_t kk, float* acc,
                                                                       int64_t acc_ld) {
  tile_body<MR, NR>(x, ldx, w, ldw, kk, acc, acc_ld);
}

template <int MR, bool k512>
void tile_rows(const float* x, int64_t ldx, const float* w, int64_t ldw, int nr, int64_t kk, float* acc,
               int64_t acc_ld) {
  constexpr auto f4 = k512 ? tile_avx512_fixed<MR, 4> : tile_avx2_fixed<MR, 4>;
  constexpr auto f3 = k512 ? tile_avx512_fixed<MR, 3> : tile_avx2_fixed<MR, 3>;
  constexpr auto f2 = k512 ? tile_avx512_fixed<MR, 2> : tile_avx2_fixed<MR, 2>;
  constexpr auto f1 = k512 ? tile_avx512_fixed<MR, 1> : tile_avx2_fixed<MR, 1>;
  switch (nr) {
    case 4: return f4(x, ldx, w, ldw, kk, acc, acc_ld);
    case 3: return f3(x, ldx, w, ldw, kk, acc, acc_ld);
    case 2: return f2(x, ldx, w, ldw, kk, acc, acc_ld);
    default: return f1(x, ldx, w, ldw, kk, acc, acc_ld);
  }
}

// mr <= 4 tokens with k512, else <= 2.
void tile_avx2(const float* x, int64_t ldx, int mr, const float* w, int64_t ldw, int nr, int64_t kk, float* acc,
               int64_t acc_ld, bool k512) {
  if (k512) {
    switch (mr) {
      case 4: return tile_rows<4, true>(x, ldx, w, ldw, nr, kk, acc, acc_ld);
      case 3: return tile_rows<3, true>(x, ldx, w, ldw, nr, kk, acc, acc_ld);
      case 2: return tile_rows<2, true>(x, ldx, w, ldw, nr, kk, acc, acc_ld);
      default: return tile_rows<1, true>(x, ldx, w, ldw, nr, kk, acc, acc_ld);
    }
  }
  if (mr == 2) return tile_rows<2, false>(x, ldx, w, ldw, nr, kk, acc, acc_ld);
  tile_rows<1, false>(x, ldx, w, ldw, nr, kk, acc, acc_ld);
}

// decode8's table: entry m holds the bits of the E2M1 magnitude m XOR m << 28. The permute reads an index's low 3
// bits, so a code c (0-15) fetches entry c & 7, and XOR with c << 28 then cancels bits 28-30 and puts c's sign
// bit at bit 31: ±magnitude without a separate mask of the sign.
__attribute__((target("avx2"))) inline __m256 decode8_table() {
  const __m256i m = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_castsi256_ps(
      _mm256_xor_si256(_mm256_castps_si256(_mm256_loadu_ps(kE2M1Values)), _mm256_slli_epi32(m, 28)));
}

// The shifts that spread one 32-bit word of 8 codes (column l in bits 4l..4l+3, as the packing puts them) over
// the 8 lanes: lane l shifted right by 4l has code l in its low bits (the permute's index; the codes above it
// are not read), and shifted left by 28 - 4l then masked to bits 28-31 holds exactly code l << 28.
struct CodeSpread {
  __m256i right, left, top;
};
__attribute__((target("avx2"))) inline CodeSpread code_spread() {
  return {_mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28), _mm256_setr_epi32(28, 24, 20, 16, 12, 8, 4, 0),
          _mm256_set1_epi32(static_cast<int>(0xF0000000u))};
}

// The vLLM flavour's rounding of f32 lanes to bf16 and back, f32_to_bf16's rule (RNE on the high half; with
// kNanTest a NaN becomes quiet and keeps its sign), on the lanes' bits: one body for the AVX2 kernels' 8 lanes and
// the AVX-512F kernels' 16 (GCC vectors, inlined into and compiled for each kernel's instruction set). Without
// kNanTest (no block scale of the layer is NaN, round_code 3) a product of a code and a scale is NaN only as the
// invalid product 0 · inf, whose default NaN keeps its quiet bit through the plain rounding.
// Always inlined, so GCC's note that passing these vectors by value changes the ABI does not apply (the note comes
// where the template is instantiated, so it is silenced for the rest of the file).
#pragma GCC diagnostic ignored "-Wpsabi"
typedef uint32_t u32x8 __attribute__((vector_size(32)));
typedef uint32_t u32x16 __attribute__((vector_size(64)));
template <bool kNanTest, typename U>
__attribute__((always_inline)) inline U bf16_round_lanes(U u) {
  U r = u + 0x7FFFu + ((u >> 16) & 1u);
  if constexpr (kNanTest) r = (u & 0x7FFFFFFFu) > 0x7F800000u ? (u | 0x00400000u) : r;
  return r & 0xFFFF0000u;
}

// Decode the 8 codes of the 4 bytes at p (low nibble first) at once: one broadcast load, two shifts and a mask
// give each lane its code as an index and at bits 28-31, then the signed value from decode8_table, then
// · scale; the vLLM flavour's T rounding is the scalar rule of format/numerics.h done 8 lanes at a time. kRound:
// 0 none, 1 bf16, 2 f16, 3 bf16 without the NaN test where no block scale is NaN (round_code, bf16_round_lanes).
template <int kRound>
__attribute__((target("avx2,f16c"))) inline __m256 decode8(const uint8_t* p, const CodeSpread& cs, __m256 table,
                                                          __m256 s) {
  int32_t word;
  std::memcpy(&word, p, sizeof word);
  const __m256i w = _mm256_set1_epi32(word);
  const __m256i idx = _mm256_srlv_epi32(w, cs.right);
  const __m256i top = _mm256_and_si256(_mm256_sllv_epi32(w, cs.left), cs.top);
  const __m256 q = _mm256_xor_ps(_mm256_permutevar8x32_ps(table, idx), _mm256_castsi256_ps(top));
  __m256 v = _mm256_mul_ps(q, s);
  if constexpr (kRound == 1 || kRound == 3) {
    v = reinterpret_cast<__m256>(bf16_round_lanes<kRound == 1>(reinterpret_cast<u32x8>(v)));
  } else if constexpr (kRound == 2) {  // IEEE RNE with subnormals and overflow to inf, as f32_to_f16
    v = _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  return v;
}

// nan_free: no block scale of the layer is NaN (CpuLinear's nan_free_scales_).
constexpr int round_code(DType round_t, bool nan_free) {
  return round_t == DType::BF16 ? (nan_free ? 3 : 1) : round_t == DType::F16 ? 2 : 0;
}

template <int kRound>
__attribute__((target("avx2,f16c"))) void decode_avx2_r(const uint8_t* codes, const float* sc, int64_t groups,
                                                         float* out) {
  const __m256 table = decode8_table();
  const CodeSpread cs = code_spread();
  for (int64_t g = 0; g < groups; ++g) {
    const __m256 s = _mm256_set1_ps(sc[g]);
    _mm256_storeu_ps(out + g * kGroupSize, decode8<kRound>(codes + g * 8, cs, table, s));
    _mm256_storeu_ps(out + g * kGroupSize + 8, decode8<kRound>(codes + g * 8 + 4, cs, table, s));
  }
}

void decode_avx2(const uint8_t* codes, const float* sc, int64_t groups, DType round_t, bool nan_free, float* out) {
  switch (round_code(round_t, nan_free)) {
    case 1: return decode_avx2_r<1>(codes, sc, groups, out);
    case 3: return decode_avx2_r<3>(codes, sc, groups, out);
    case 2: return decode_avx2_r<2>(codes, sc, groups, out);
    default: return decode_avx2_r<0>(codes, sc, groups, out);
  }
}

// One token (M = 1): NR rows' lane sums over all of K, each weight decoded in registers and multiplied at once
// (no f32 tile: with one token nothing would reuse it). The same products added in the same lane order as
// decode_avx2 + tile_avx2: lane l adds columns k ≡ l (mod 8) in increasing k.
template <int NR, int kRound>
__attribute__((target("avx2,f16c"))) void rows_one_token_fixed(const float* x, const uint8_t* codes, int64_t ldc,
                                                               const float* sc, int64_t lds, int64_t groups,
                                                               float* acc) {
  const __m256 table = decode8_table();
  const CodeSpread cs = code_spread();
  __m256 a[NR];
  for (int j = 0; j < NR; ++j) a[j] = _mm256_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    const __m256 x0 = _mm256_loadu_ps(x + g * kGroupSize), x1 = _mm256_loadu_ps(x + g * kGroupSize + 8);
    for (int j = 0; j < NR; ++j) {
      const uint8_t* c = codes + j * ldc + g * 8;
      const __m256 s = _mm256_set1_ps(sc[j * lds + g]);
      a[j] = _mm256_add_ps(a[j], _mm256_mul_ps(x0, decode8<kRound>(c, cs, table, s)));
      a[j] = _mm256_add_ps(a[j], _mm256_mul_ps(x1, decode8<kRound>(c + 4, cs, table, s)));
    }
  }
  for (int j = 0; j < NR; ++j) _mm256_storeu_ps(acc + j * kLanes, a[j]);
}

// GCC 12's AVX-512 headers start several intrinsics from an "undefined" register and then warn about it.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// The same with AVX-512F: 16 codes decoded at once through the 16-entry signed table (code 8 is -0, as the
// AVX2 path's sign flip gives; the permute reads each index's low 4 bits, so the bytes need no masking), one
// multiply by the scale and one by the 16 activations; the two 8-lane halves
// of the products are then added to the lane sums in column order, as the AVX2 path adds them.
template <int kRound>
__attribute__((target("avx512f,avx2,f16c"))) inline __m512 round512(__m512 v) {
  if constexpr (kRound == 1 || kRound == 3) {
    return reinterpret_cast<__m512>(bf16_round_lanes<kRound == 1>(reinterpret_cast<u32x16>(v)));
  } else if constexpr (kRound == 2) {  // IEEE RNE with subnormals and overflow to inf, as f32_to_f16
    return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  return v;
}

template <int NR, int kRound>
__attribute__((target("avx512f,avx2,f16c"))) void rows_one_token_fixed512(const float* x, const uint8_t* codes,
                                                                          int64_t ldc, const float* sc, int64_t lds,
                                                                          int64_t groups, float* acc) {
  alignas(64) float signed_table[16];
  for (int c = 0; c < 16; ++c) signed_table[c] = c & 8 ? -kE2M1Values[c & 7] : kE2M1Values[c & 7];
  const __m512 table = _mm512_load_ps(signed_table);
  // Lane 2i holds byte i (the permute reads only its low nibble), lane 2i + 1 byte i >> 4 (its high nibble).
  const __m512i shifts = _mm512_set_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0);
  __m256 a[NR];
  for (int j = 0; j < NR; ++j) a[j] = _mm256_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    const __m512 xv = _mm512_loadu_ps(x + g * kGroupSize);
    for (int j = 0; j < NR; ++j) {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + j * ldc + g * 8));
      const __m512i idx = _mm512_srlv_epi32(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(b, b)), shifts);
      const __m512 w = round512<kRound>(_mm512_mul_ps(_mm512_permutexvar_ps(idx, table), _mm512_set1_ps(sc[j * lds + g])));
      const __m512 p = _mm512_mul_ps(xv, w);
      a[j] = _mm256_add_ps(a[j], _mm512_castps512_ps256(p));
      a[j] = _mm256_add_ps(a[j], _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(p), 1)));
    }
  }
  for (int j = 0; j < NR; ++j) _mm256_storeu_ps(acc + j * kLanes, a[j]);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// One token's rows through the AVX2 (k512 false) or AVX-512F kernel, the rounding and row count as template
// arguments.
template <bool k512, int NR, int kRound>
void rows_one_token_kernel(const float* x, const uint8_t* codes, int64_t ldc, const float* sc, int64_t lds,
                           int64_t groups, float* acc) {
  if constexpr (k512) rows_one_token_fixed512<NR, kRound>(x, codes, ldc, sc, lds, groups, acc);
  else rows_one_token_fixed<NR, kRound>(x, codes, ldc, sc, lds, groups, acc);
}

template <bool k512, int kRound>
void rows_one_token_nr(const float* x, const uint8_t* codes, int64_t ldc, const float* sc, int64_t lds,
                       int64_t groups, int nr, float* acc) {
  switch (nr) {
    case 4: return rows_one_token_kernel<k512, 4, kRound>(x, codes, ldc, sc, lds, groups, acc);
    case 3: return rows_one_token_kernel<k512, 3, kRound>(x, codes, ldc, sc, lds, groups, acc);
    case 2: return rows_one_token_kernel<k512, 2, kRound>(x, codes, ldc, sc, lds, groups, acc);
    default: return rows_one_token_kernel<k512, 1, kRound>(x, codes, ldc, sc, lds, groups, acc);
  }
}

template <bool k512>
void rows_one_token_simd(const float* x, const uint8_t* codes, int64_t ldc, const float* sc, int64_t lds,
                         int64_t groups, DType round_t, bool nan_free, int nr, float* acc) {
  switch (round_code(round_t, nan_free)) {
    case 1: return rows_one_token_nr<k512, 1>(x, codes, ldc, sc, lds, groups, nr, acc);
    case 3: return rows_one_token_nr<k512, 3>(x, codes, ldc, sc, lds, groups, nr, acc);
    case 2: return rows_one_token_nr<k512, 2>(x, codes, ldc, sc, lds, groups, nr, acc);
    default: return rows_one_token_nr<k512, 0>(x, codes, ldc, sc, lds, groups, nr, acc);
  }
}
#endif

// The kernels below take the instruction set CpuLinear::run read once (cpu_isa) for the whole call.
void decode_rows(CpuIsa isa, const uint8_t* codes, const float* sc, int64_t groups, DType round_t, bool nan_free,
                 float* out) {
#if defined(NVFP4_CPU_AVX2)
  if (isa >= CpuIsa::Avx2) return decode_avx2(codes, sc, groups, round_t, nan_free, out);
#else
  (void)isa, (void)nan_free;
#endif
  decode_portable(codes, sc, groups, round_t, out);
}

// mr <= tokens_per_tile(isa).
void tile(CpuIsa isa, const float* x, int64_t ldx, int mr, const float* w, int64_t ldw, int nr, int64_t kk,
          float* acc, int64_t acc_ld) {
#if defined(NVFP4_CPU_AVX2)
  if (isa >= CpuIsa::Avx2) return tile_avx2(x, ldx, mr, w, ldw, nr, kk, acc, acc_ld, isa == CpuIsa::Avx512);
#else
  (void)isa;
#endif
  tile_portable(x, ldx, mr, w, ldw, nr, kk, acc, acc_ld);
}

// Tokens per register tile of `tile`.
int64_t tokens_per_tile(CpuIsa isa) { return isa == CpuIsa::Avx512 ? kMr512 : kMr; }

// acc[j·8 + l] = the lane sums of rows j < nr for one token x over all K; isa >= Avx2 (there is no portable
// version: the portable path decodes a tile as for more tokens).
void rows_one_token(CpuIsa isa, const float* x, const uint8_t* codes, int64_t ldc, const float* sc, int64_t lds,
                    int64_t groups, DType round_t, bool nan_free, int nr, float* acc) {
#if defined(NVFP4_CPU_AVX2)
  if (isa == CpuIsa::Avx512)
    return rows_one_token_simd<true>(x, codes, ldc, sc, lds, groups, round_t, nan_free, nr, acc);
  if (isa == CpuIsa::Avx2)
    return rows_one_token_simd<false>(x, codes, ldc, sc, lds, groups, round_t, nan_free, nr, acc);
#endif
  (void)x, (void)codes, (void)ldc, (void)sc, (void)lds, (void)groups, (void)round_t, (void)nan_free, (void)nr,
      (void)acc;
  fail(std::string("rows_one_token: no ") + cpu_isa_name(isa) + " kernel");
}

// Activations converted to f32 in the form each semantics multiplies: x itself (w4a16), e2m1·sx (w4a4),
// T(e2m1·f32(sx/gs_x)) (w4a4-vllm), with the codes and scales of format/quant.h's quantize_activations (its
// per-group steps, without packing the codes). (m, k) row-major; the W4A4 rows in parallel (a conversion alone is
// cheaper than waking the pool).
std::vector<float> prepare_activations(const LinearWeights& w, Semantics s, DType act, const uint16_t* x,
                                       int64_t m) {
  const int64_t k = w.weight.cols, groups = k / kGroupSize;
  std::vector<float> xf(static_cast<size_t>(m * k));
  if (s == Semantics::W4A16) {
    for (int64_t i = 0; i < m * k; ++i) xf[i] = from_bits16(act, x[i]);
    return xf;
  }
  const float enc = w.input_global.enc, gs_dec = 1.0f / enc;
  parallel_for(static_cast<size_t>(m), 1, [&](size_t r0, size_t r1) {
    for (int64_t r = static_cast<int64_t>(r0); r < static_cast<int64_t>(r1); ++r) {
      float* const row = xf.data() + r * k;
      for (int64_t c = 0; c < k; ++c) row[c] = from_bits16(act, x[r * k + c]);
      for (int64_t g = 0; g < groups; ++g) {
        float* const v = row + g * kGroupSize;
        float os;
        const float sx = e4m3_decode(activation_group_scale(v, enc, gs_dec, &os));
        const float sv = s == Semantics::W4A4 ? 0.0f : sx / enc;  // the vLLM flavour's f32(sx/gs_x)
        for (int j = 0; j < kGroupSize; ++j) {
          const float q = e2m1_decode(activation_code(v[j], os));
          v[j] = s == Semantics::W4A4 ? q * sx : round_to(act, q * sv);
        }
      }
    }
  });
  return xf;
}

}  // namespace

uint16_t linear_output(DType act, float acc, const float* bias_n) {
  return to_bits16(act, round_linear_output(act, acc, bias_n));
}

CpuLinear::CpuLinear(const LinearWeights& w, Semantics s, DType act) : w_(w), sem_(s), act_(act) {
  validate(w, s, act);
  const size_t n = w.weight.scales.size();
  wscale_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const float sc = e4m3_decode(w.weight.scales[i]);
    wscale_[i] = s == Semantics::W4A4_VLLM ? sc * w.weight.global.dec : sc;  // vLLM: f32(S·D_w)
    nan_free_scales_ = nan_free_scales_ && wscale_[i] == wscale_[i];
  }
}

void CpuLinear::run(const uint16_t* x, int64_t m, uint16_t* y) const {
  const int64_t n = w_.weight.rows, k = w_.weight.cols, groups = k / kGroupSize;
  const std::vector<float> xc = prepare_activations(w_, sem_, act_, x, m);
  // Rows of x at a stride of K + 16 floats: a power-of-two stride (K = 4096) would put the same column of every
  // token in one cache set.
  const int64_t ldx = k + kGroupSize;
  std::vector<float> xf(static_cast<size_t>(m * ldx));
  for (int64_t i = 0; i < m; ++i) std::copy(xc.begin() + i * k, xc.begin() + (i + 1) * k, xf.begin() + i * ldx);
  // Factor applied to the f32 sum before rounding to T.
  const float post = linear_output_factor(w_, sem_);
  const DType wround = sem_ == Semantics::W4A4_VLLM ? act_ : DType::F32;  // w_dq = T(e2m1 · f32(S·D_w))
  int64_t rows = m > kTokenBlock ? kRowBlockMany : kRowBlock;
  while (rows > kRowBlock && (n + rows - 1) / rows < 4 * num_threads()) rows /= 2;  // keep every thread busy
  const int64_t blocks = (n + rows - 1) / rows;
  // Threads over blocks of `rows` weight rows. Per block: each K block of the rows is decoded once per call
  // (while the first token block runs) into wbuf, then reused by every token block; the lane sums of one token
  // block live in acc (kTokenBlock, rows, 8) f32 across the K blocks. wbuf holds, for the K block starting at
  // column kc (width kk), the (nb, kk) f32 tile at offset kc·rows, rows kk apart: a tile is contiguous, so its
  // rows do not evict each other from L1 as rows K·4 bytes apart would. Within a K block, 4 rows at a time
  // (in L1) meet every token pair of the block (from L2).
  // With a single token block nothing is reused across token blocks, so every K block goes to offset 0 and the
  // tile stays in L1.
  const bool keep = m > kTokenBlock;
  const CpuIsa isa = cpu_isa();
  // One token: each weight decoded in registers and used at once (rows_one_token), where that exists.
  const bool one_token = m == 1 && isa >= CpuIsa::Avx2;
  const int64_t mr = tokens_per_tile(isa);
  const size_t wbuf_size = static_cast<size_t>(rows * (keep ? k : std::min(k, kKBlock)));
  const size_t acc_size = static_cast<size_t>(std::min(m, kTokenBlock) * rows * kLanes);
  parallel_for(static_cast<size_t>(blocks), 1, [&](size_t b0, size_t b1) {
    // Per-thread scratch, kept between calls: allocating it per call costs page faults on every call.
    thread_local std::vector<float> scratch;
    if (scratch.size() < wbuf_size + acc_size) scratch.resize(wbuf_size + acc_size);
    float* const wbuf = scratch.data();
    float* const acc = wbuf + wbuf_size;
    for (int64_t rb = static_cast<int64_t>(b0) * rows; rb < std::min(n, static_cast<int64_t>(b1) * rows);
         rb += rows) {
      const int64_t nb = std::min(rows, n - rb);
      for (int64_t mb = 0; mb < m; mb += kTokenBlock) {
        const int64_t mbn = std::min(kTokenBlock, m - mb);
        std::fill(acc, acc + mbn * nb * kLanes, 0.0f);
        for (int64_t r = 0; one_token && r < nb; r += kNr)
          rows_one_token(isa, xf.data(), w_.weight.codes.data() + (rb + r) * (k / 2), k / 2,
                         wscale_.data() + (rb + r) * groups, groups, groups, wround, nan_free_scales_,
                         static_cast<int>(std::min<int64_t>(kNr, nb - r)), acc + r * kLanes);
        for (int64_t kc = 0; !one_token && kc < k; kc += kKBlock) {
          const int64_t kk = std::min(kKBlock, k - kc);
          float* const wt = wbuf + (keep ? kc * rows : 0);  // this K block's (nb, kk) tile
          if (mb == 0)
            for (int64_t r = 0; r < nb; ++r)
              decode_rows(isa, w_.weight.codes.data() + (rb + r) * (k / 2) + kc / 2,
                          wscale_.data() + (rb + r) * groups + kc / kGroupSize, kk / kGroupSize, wround,
                          nan_free_scales_, wt + r * kk);
          for (int64_t r = 0; r < nb; r += kNr)
            for (int64_t i = 0; i < mbn; i += mr)
              tile(isa, xf.data() + (mb + i) * ldx + kc, ldx, static_cast<int>(std::min<int64_t>(mr, mbn - i)),
                   wt + r * kk, kk, static_cast<int>(std::min<int64_t>(kNr, nb - r)), kk,
                   acc + (i * nb + r) * kLanes, nb);
        }
        for (int64_t i = 0; i < mbn; ++i)
          for (int64_t r = 0; r < nb; ++r) {
            const float* l = acc + (i * nb + r) * kLanes;
            const float sum = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
            const float* bias = w_.bias.empty() ? nullptr : &w_.bias[rb + r];
            y[(mb + i) * n + rb + r] = linear_output(act_, sum * post, bias);
          }
      }
    }
  });
}

void cpu_linear_reference_f64(const LinearWeights& w, Semantics s, DType act, const uint16_t* x, int64_t m,
                              double* acc) {
  validate(w, s, act);
  const int64_t n = w.weight.rows, k = w.weight.cols, groups = k / kGroupSize;
  const std::vector<float> xf = prepare_activations(w, s, act, x, m);
  const double post = linear_output_factor(w, s);
  std::vector<double> wrow(static_cast<size_t>(k));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      const float sc = e4m3_decode(w.weight.scales[r * groups + c / kGroupSize]);
      const float q = e2m1_decode(get_e2m1(w.weight.codes.data() + r * (k / 2), c));
      wrow[c] = s == Semantics::W4A4_VLLM ? round_to(act, q * (sc * w.weight.global.dec)) : q * sc;
    }
    for (int64_t i = 0; i < m; ++i) {
      double sum = 0.0;
      for (int64_t c = 0; c < k; ++c) sum += static_cast<double>(xf[i * k + c]) * wrow[c];
      acc[i * n + r] = sum * post;
    }
  }
}

}  // namespace nvfp4
