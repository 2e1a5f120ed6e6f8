// CUDA kernels for the non-linear parts of the Llama decoder (model/llama.h) and its unquantized linears, so
// that activations stay on the device between the quantized linears. Plain C++ header (no CUDA types); only
// built with CUDA (NVFP4_HAVE_CUDA).
//
// Conventions (the same as the CPU path, model/cpu_ops.h, so both compute the same numbers up to f32
// summation order):
//   - every pointer is device memory; `stream` is a cudaStream_t or nullptr (the legacy default stream);
//   - activations are f32 arrays whose values are representable in the activation dtype t (F32, F16 or
//     BF16); each op says where it rounds to t (RNE);
//   - launches are asynchronous; a launch error is thrown as nvfp4::Error naming the op.
#pragma once
#include <cstdint>
#include <memory>

#include "common/dtype.h"

namespace nvfp4::cuda_ops {

// x (n, h) = table[ids[i]] (table: (V, h) f32, values in t).
void embed(const float* table, const int32_t* ids, int64_t n, int64_t h, float* x, void* stream);

// out (n) = bit patterns of x in t (F16 or BF16; x must already be representable, rounding is RNE anyway).
void to_bits16(const float* x, int64_t n, DType t, uint16_t* out, void* stream);
// x (n) = values of the t bit patterns.
void from_bits16(const uint16_t* in, int64_t n, DType t, float* x, void* stream);

// y (m, n) = T(T(y) + bias[col]) when bias is non-null, else T(y).
void round_bias(float* y, int64_t m, int64_t n, const float* bias, DType t, void* stream);

// Optional 16-bit sides (t F16 or BF16): where a `*_bits` input is given the op reads that operand from its T bit
// patterns instead of the f32 array (the output of an NVFP4 linear, no conversion kernel), and an `out_bits`
// output also receives the result's bit patterns (the input of the next NVFP4 linear). Values are the same
// either way.

// out (m, d) = T(T(x · r) · w), r = 1/sqrt(mean(x²) + eps) per row (sum of squares in f64).
void rmsnorm(const float* x, const float* w, int64_t m, int64_t d, float eps, DType t, float* out, void* stream,
             uint16_t* out_bits = nullptr);

// Positions in rope_store_kv and attention: pos0 + i for token i; or, where pos_dev is non-null, *pos_dev + i
// with *pos_dev read when the kernel runs (a captured graph replayed at a new position); pos0 is then the
// largest value *pos_dev will hold, for the bounds checks and the shared memory size.

// For token i: RoPE (HF rotate_half, cs: (cap, hd) = hd/2 cos then hd/2 sin per position)
// on q (n, nh, hd) in place and on k (n, nkv, hd) in place, results rounded to t; then k and v (n, nkv, hd)
// are stored into the layer's cache (KvCache). With `bits`, q / k / v are read from those
// bit patterns (the rotated q and k are still written to q and k); token i's row of each starts at i · stride
// elements (stride 0: rows packed, nh · hd for q and nkv · hd for k and v; a fused q/k/v linear's output has
// one row of (nh + 2 nkv) · hd per token, q, k and v side by side).
// A layer's KV cache: keys and values, (nkv, cap, hd) each, as f32 or (bits; t F16 or BF16) as the T bit
// patterns of the same values: every cached value is representable in t, so half the bytes hold the same
// numbers and attention computes the same bits from either form.
struct KvCache {
  void* k = nullptr;
  void* v = nullptr;
  bool bits = false;
};
struct QkvBits {
  const uint16_t* q = nullptr;
  const uint16_t* k = nullptr;
  const uint16_t* v = nullptr;
  int64_t stride = 0;
};
void rope_store_kv(float* q, float* k, const float* v, int64_t n, int64_t nh, int64_t nkv, int64_t hd,
                   const float* cs, int64_t pos0, const KvCache& cache, int64_t cap, DType t, void* stream,
                   const int32_t* pos_dev = nullptr, const QkvBits& bits = {});

// Causal attention with GQA (query head j reads kv head j / (nh/nkv)): for token i at position p = pos0 + i,
// out[i, j] = T( Σ_{s<=p} softmax_s(q·k_s / sqrt(hd)) · v_s ). q, out: (n, nh, hd); the cache as rope_store_kv's.
// A prompt's block takes up to 4 query heads of one kv head and reads each cached row once for them. Decoding (n == 1)
// splits the positions over up to attention_splits(n, nh, cap) blocks per head (1 + p / 32 of them at most:
// the count depends on p, the cache and the device alone, so a replayed graph and a direct call compute the
// same numbers; no more blocks than one wave of the device holds), each summing
// its positions against its own maximum; the last block of a head to finish adds the splits' sums in split
// order. Their partial sums meet in `scratch`: attention_scratch_bytes(nh, hd, cap) bytes of device memory,
// zeroed before its first use (the kernel leaves it zeroed again); needed when attention_splits > 1. Limits:
// hd <= 256, at most 32768 scores per block (they live in shared memory): a prompt's tokens see up to 32768
// positions (its blocks take fewer heads as that grows), a one-token step up to 32768 per split. Throws
// otherwise.
// sms: the device's SM count (<= 0: the current device's).
int attention_splits(int64_t n, int64_t nh, int64_t cap, int sms = 0);
size_t attention_scratch_bytes(int64_t nh, int64_t hd, int64_t cap);
void attention(const float* q, const KvCache& cache, int64_t n, int64_t pos0, int64_t nh, int64_t nkv, int64_t hd,
               int64_t cap, DType t, float* out, void* stream, const int32_t* pos_dev = nullptr,
               uint16_t* out_bits = nullptr, void* scratch = nullptr);

// g (n) = T(T(silu(g)) · u)   (silu in f64). With bits_cols > 0, element i of g_bits and u_bits is at
// (i / bits_cols) · bits_stride + i % bits_cols (rows of a fused gate/up linear's output: gate then up).
void silu_mul(float* g, const float* u, int64_t n, DType t, void* stream, const uint16_t* g_bits = nullptr,
              const uint16_t* u_bits = nullptr, uint16_t* out_bits = nullptr, int64_t bits_cols = 0,
              int64_t bits_stride = 0);
// x (n) = T(x + y)
void residual_add(float* x, const float* y, int64_t n, DType t, void* stream, const uint16_t* y_bits = nullptr);

// Dense y (m, N) f32 = x (m, K) · Wᵀ with W (N, K) row-major, through cuBLAS, f32 accumulation:
//   wt == BF16: x and W are bf16 bit patterns (cublasGemmEx, CUBLAS_COMPUTE_32F);
//   wt == F32:  x and W are f32 (cublasGemmEx with CUBLAS_COMPUTE_32F, pedantic math: no TF32).
class Gemm {
 public:
  static std::unique_ptr<Gemm> create(int device);  // throws nvfp4::Error
  virtual ~Gemm() = default;
  virtual void run(const void* x, int64_t m, int64_t k, const void* w, DType wt, int64_t n, float* y,
                   void* stream) = 0;
};

// Waits for the stream; throws nvfp4::Error with the pending CUDA error, if any.
void synchronize(void* stream);

}  // namespace nvfp4::cuda_ops
