// The decoder's CUDA ops (backends/cuda/ops/decoder_ops.h) against host references written here, op by op,
// so that a failure of the model-level GPU test (tests/model: Decoder.GpuOps...) can be located.
// Exact where both sides evaluate the same IEEE f32 operations (bit patterns, bias/residual, RoPE, KV store);
// within one ulp of T where a transcendental or an f64 reduction order can differ in the last bit before the
// rounding to T (silu, rmsnorm); within the f32 dot-product bound γ_n (n = terms) for attention and GEMM.
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/device/device_info.h"
#include "backends/cuda/ops/decoder_ops.h"
#include "backends/cuda/ops/device_memory.h"
#include "common/error.h"
#include "format/numerics.h"

using namespace nvfp4;
namespace co = nvfp4::cuda_ops;

namespace {

bool have_gpu(std::string* why) { return cuda_device_count(why) > 0; }

template <typename T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(const std::vector<T>& h) : n(h.size()) {
    p = static_cast<T*>(co::device_alloc(n * sizeof(T), 0));
    co::copy_to_device(p, h.data(), n * sizeof(T));
  }
  explicit Dev(size_t count) : n(count) { p = static_cast<T*>(co::device_alloc(n * sizeof(T), 0)); }
  ~Dev() { co::device_free(p); }
  std::vector<T> get() const {
    std::vector<T> h(n);
    co::synchronize(nullptr);
    co::copy_to_host(h.data(), p, n * sizeof(T));
    return h;
  }
};

std::vector<float> rnd(size_t n, float scale, unsigned seed, DType t = DType::F32) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = round_to(t, d(g));
  return v;
}

double ulp_of(DType t, float v) {
  const int bits = t == DType::BF16 ? 8 : t == DType::F16 ? 11 : 24;
  return std::ldexp(1.0, std::ilogb(std::max(std::fabs(v), 1e-30f)) - (bits - 1));
}

}  // namespace

#define NEED_GPU()                                            \
  std::string why;                                            \
  if (!have_gpu(&why)) GTEST_SKIP() << "no GPU: " << why

TEST(CudaDecoderOps, BitsRoundTripAndElementwiseExact) {
  NEED_GPU();
  for (DType t : {DType::BF16, DType::F16}) {
    const auto x = rnd(4096, 3.0f, 1, t), y = rnd(4096, 3.0f, 2, t), bias = rnd(64, 1.0f, 3, t);
    Dev<float> dx(x), dy(y), db(bias), back(x.size());
    Dev<uint16_t> bits(x.size());
    co::to_bits16(dx.p, x.size(), t, bits.p, nullptr);
    co::from_bits16(bits.p, x.size(), t, back.p, nullptr);
    const auto hb = bits.get();
    const auto hx = back.get();
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(hb[i], to_bits16(t, x[i])) << i;
      ASSERT_EQ(hx[i], x[i]) << i;
    }
    co::residual_add(dx.p, dy.p, x.size(), t, nullptr);  // x = T(x + y)
    const auto r = dx.get();
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(r[i], round_to(t, x[i] + y[i])) << i;
    Dev<float> yy(y);
    co::round_bias(yy.p, 64, 64, db.p, t, nullptr);  // y = T(T(y) + b)
    const auto rb = yy.get();
    for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(rb[i], round_to(t, round_to(t, y[i]) + bias[i % 64])) << i;
  }
}

TEST(CudaDecoderOps, SiluMulAndRmsnormWithinOneUlp) {
  NEED_GPU();
  const DType t = DType::BF16;
  const auto g = rnd(3000, 2.0f, 4, t), u = rnd(3000, 2.0f, 5, t);
  Dev<float> dg(g), du(u);
  co::silu_mul(dg.p, du.p, g.size(), t, nullptr);
  const auto r = dg.get();
  for (size_t i = 0; i < g.size(); ++i) {
    const float s = round_to(t, static_cast<float>(g[i] / (1.0 + std::exp(-static_cast<double>(g[i])))));
    const float want = round_to(t, s * u[i]);
    ASSERT_LE(std::fabs(r[i] - want), ulp_of(t, want) * 2.0) << i;  // silu's T-rounding may flip: 1 ulp of s times |u|
  }
  // Rows of 576 (one round of loads per thread, values kept in registers) and of 9000 (more than one round:
  // reloaded for the output).
  double nz = 0;
  for (const int64_t d : {576, 9000}) {
    const int64_t m = 5;
    const auto x = rnd(m * d, 1.5f, 6, t), w = rnd(d, 0.3f, 7);
    Dev<float> dx(x), dw(w), out(std::vector<float>(m * d, NAN));
    co::rmsnorm(dx.p, dw.p, m, d, 1e-5f, t, out.p, nullptr);
    const auto o = out.get();
    for (int64_t i = 0; i < m; ++i) {
      double ss = 0;
      for (int64_t j = 0; j < d; ++j) ss += static_cast<double>(x[i * d + j]) * x[i * d + j];
      const float rr = static_cast<float>(1.0 / std::sqrt(ss / d + 1e-5));
      for (int64_t j = 0; j < d; ++j) {
        const float want = round_to(t, round_to(t, x[i * d + j] * rr) * w[j]);
        nz += std::fabs(want);
        ASSERT_LE(std::fabs(o[i * d + j] - want), 2.0 * ulp_of(t, want) * (1 + std::fabs(w[j])))
            << d << ": " << i << "," << j;
      }
    }
  }
  EXPECT_GT(nz, 0.0);
}

// RoPE and the KV store exactly; attention against f64 within the bound of docs/TESTING.md ("Decoder ops on the
// GPU"), computed per output from the data. Shapes: a short cache, and caches long enough that every warp
// of the attention kernel takes several rounds of positions, with head sizes that fill 2, 4 and (partly) 3
// of its per-lane element slots, and 8 (hd 256); prompts in blocks of 1, 2 and 4 query heads sharing a kv head;
// one-token steps whose positions are split over 1, 4, 8, 16 and 64 blocks (the largest cache: several rounds
// per warp in each split), each run a second time on the same scratch, which must give the same bits (the
// kernel leaves its counters ready).
TEST(CudaDecoderOps, RopeStoreAndAttentionAgainstF64) {
  NEED_GPU();
  struct Shape {
    int64_t n, pos0, nh, nkv, hd, cap;
  };
  const DType t = DType::F32;
  unsigned seed = 8;
  for (const Shape& sh : {Shape{7, 3, 6, 2, 64, 16}, Shape{3, 200, 8, 2, 128, 256}, Shape{2, 61, 4, 4, 80, 64},
                          Shape{2, 40, 4, 2, 32, 64},
                          Shape{1, 5, 6, 2, 64, 2048}, Shape{1, 100, 4, 1, 64, 2048}, Shape{1, 900, 8, 2, 128, 1024},
                          Shape{1, 300, 2, 1, 256, 512}, Shape{1, 2999, 4, 2, 128, 4096}}) {
    const int64_t n = sh.n, pos0 = sh.pos0, nh = sh.nh, nkv = sh.nkv, hd = sh.hd, cap = sh.cap;
    const int splits = co::attention_splits(n, nh, cap);
    const std::string tag = "hd " + std::to_string(hd) + " pos0 " + std::to_string(pos0) + " splits " +
                            std::to_string(splits);
    auto q = rnd(n * nh * hd, 1.0f, seed++), k = rnd(n * nkv * hd, 1.0f, seed++), v = rnd(n * nkv * hd, 1.0f, seed++);
    std::vector<float> cs(cap * hd);
    for (int64_t p = 0; p < cap; ++p)
      for (int64_t i = 0; i < hd / 2; ++i) {
        const float ang = static_cast<float>(p) * static_cast<float>(std::pow(10000.0, -2.0 * i / hd));
        cs[p * hd + i] = static_cast<float>(std::cos(static_cast<double>(ang)));
        cs[p * hd + hd / 2 + i] = static_cast<float>(std::sin(static_cast<double>(ang)));
      }
    // Cache rows before pos0 hold earlier tokens.
    auto kc = rnd(nkv * cap * hd, 1.0f, seed++), vc = rnd(nkv * cap * hd, 1.0f, seed++);
    Dev<float> dq(q), dk(k), dv(v), dcs(cs), dkc(kc), dvc(vc), out(std::vector<float>(n * nh * hd, NAN));
    Dev<float> out2(std::vector<float>(n * nh * hd, NAN));
    Dev<uint8_t> scratch(std::vector<uint8_t>(co::attention_scratch_bytes(nh, hd, cap), 0));
    const co::KvCache cache{dkc.p, dvc.p};
    co::rope_store_kv(dq.p, dk.p, dv.p, n, nh, nkv, hd, dcs.p, pos0, cache, cap, t, nullptr);
    co::attention(dq.p, cache, n, pos0, nh, nkv, hd, cap, t, out.p, nullptr, nullptr, nullptr, scratch.p);
    co::attention(dq.p, cache, n, pos0, nh, nkv, hd, cap, t, out2.p, nullptr, nullptr, nullptr, scratch.p);
    const auto gq = dq.get(), gkc = dkc.get(), gvc = dvc.get(), go = out.get();
    ASSERT_EQ(go, out2.get()) << tag << ": a second call on the same scratch";
    // RoPE and the cache writes: the same f32 operations on both sides, exact.
    auto rope = [&](float* vec, int64_t p) {
      for (int64_t i = 0; i < hd / 2; ++i) {
        const float a = vec[i], b = vec[i + hd / 2], c = cs[p * hd + i], s = cs[p * hd + hd / 2 + i];
        vec[i] = a * c - b * s;
        vec[i + hd / 2] = b * c + a * s;
      }
    };
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t h = 0; h < nh; ++h) rope(&q[(i * nh + h) * hd], pos0 + i);
      for (int64_t h = 0; h < nkv; ++h) {
        rope(&k[(i * nkv + h) * hd], pos0 + i);
        for (int64_t e = 0; e < hd; ++e) {
          kc[(h * cap + pos0 + i) * hd + e] = k[(i * nkv + h) * hd + e];
          vc[(h * cap + pos0 + i) * hd + e] = v[(i * nkv + h) * hd + e];
        }
      }
    }
    ASSERT_EQ(gq, q) << tag;
    ASSERT_EQ(gkc, kc) << tag;
    ASSERT_EQ(gvc, vc) << tag;
    // Attention in f64. Bound (derived in docs/TESTING.md): with P = p + 1 positions, S splits, A = max over s
    // of scale·Σ_e|q_e·k_se|, Vmax = max |v| and u = 2^-24:
    //   |err| <= 1.01 · Vmax · (4·γ_{hd+2}·A + 2^-20 + 3·γ_{P+S+2}) + 2u·|o|.
    const double u = std::ldexp(1.0, -24);
    auto gam = [&](double m) { return m * u / (1 - m * u); };
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    double worst = 0;  // largest err / bound
    for (int64_t i = 0; i < n; ++i)
      for (int64_t h = 0; h < nh; ++h) {
        const int64_t g = h / (nh / nkv), p = pos0 + i;
        std::vector<double> s(p + 1);
        double mx = -1e300, sum = 0, A = 0, vmax = 0;
        for (int64_t j = 0; j <= p; ++j) {
          double d = 0, ad = 0;
          for (int64_t e = 0; e < hd; ++e) {
            const double prod = static_cast<double>(q[(i * nh + h) * hd + e]) * kc[(g * cap + j) * hd + e];
            d += prod;
            ad += std::fabs(prod);
            vmax = std::max(vmax, std::fabs(static_cast<double>(vc[(g * cap + j) * hd + e])));
          }
          s[j] = d * scale;
          A = std::max(A, ad * scale);
          mx = std::max(mx, s[j]);
        }
        for (auto& z : s) sum += (z = std::exp(z - mx));
        const double P = static_cast<double>(p + 1);
        for (int64_t e = 0; e < hd; ++e) {
          double o = 0;
          for (int64_t j = 0; j <= p; ++j) o += s[j] / sum * vc[(g * cap + j) * hd + e];
          const double bound = 1.01 * vmax * (4 * gam(hd + 2) * A + std::ldexp(1.0, -20) + 3 * gam(P + splits + 2)) +
                               2 * u * std::fabs(o);
          const double err = std::fabs(o - go[(i * nh + h) * hd + e]);
          ASSERT_LE(err, bound) << tag << " token " << i << " head " << h << " e " << e;
          worst = std::max(worst, err / bound);
        }
      }
    EXPECT_GT(worst, 0.0) << tag;  // the GPU did compute (a NaN-poisoned output would have failed above)
  }
  // The split rule: ranges of 64 positions at the cache's capacity, at most 64, and at most one wave of blocks
  // (4 per SM, one head each); one block per head group and token for a prompt. A one-token step on a cache
  // that splits needs the scratch, refused before any launch.
  EXPECT_EQ(co::attention_splits(1, 32, 2048, 132), 16);  // 528 blocks in a wave
  EXPECT_EQ(co::attention_splits(1, 32, 2048, 512), 32);
  EXPECT_EQ(co::attention_splits(1, 32, 128, 132), 2);
  EXPECT_EQ(co::attention_splits(1, 32, 64, 132), 1);
  EXPECT_EQ(co::attention_splits(1, 32, 1 << 20, 132), 16);
  EXPECT_EQ(co::attention_splits(1, 64, 1 << 20, 132), 8);
  EXPECT_EQ(co::attention_splits(1, 4, 1 << 20, 132), 64);
  EXPECT_EQ(co::attention_splits(1, 1000, 1 << 20, 132), 1);
  EXPECT_EQ(co::attention_splits(5, 32, 2048, 132), 1);
  try {
    co::attention(nullptr, co::KvCache{}, 1, 5, 32, 8, 128, 2048, t, nullptr, nullptr);
    ADD_FAILURE() << "attention without scratch on a split cache was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("scratch"), std::string::npos) << e.what();
  }
}

TEST(CudaDecoderOps, GemmBf16AndF32AgainstF64) {
  NEED_GPU();
  const int64_t m = 3, k = 576, n = 200;
  auto gemm = co::Gemm::create(0);
  for (DType wt : {DType::BF16, DType::F32}) {
    const auto x = rnd(m * k, 1.0f, 13, wt == DType::BF16 ? DType::BF16 : DType::F32);
    const auto w = rnd(n * k, 0.05f, 14, wt == DType::BF16 ? DType::BF16 : DType::F32);
    std::vector<uint16_t> xb(x.size()), wb(w.size());
    for (size_t i = 0; i < x.size(); ++i) xb[i] = f32_to_bf16(x[i]);
    for (size_t i = 0; i < w.size(); ++i) wb[i] = f32_to_bf16(w[i]);
    Dev<float> dxf(x), dwf(w), y(m * n);
    Dev<uint16_t> dxb(xb), dwb(wb);
    if (wt == DType::BF16) gemm->run(dxb.p, m, k, dwb.p, wt, n, y.p, nullptr);
    else gemm->run(dxf.p, m, k, dwf.p, wt, n, y.p, nullptr);
    const auto gy = y.get();
    // f32 accumulation of k products (exact products of bf16 inputs; f32 products otherwise):
    // |err| <= γ_k · Σ|x·w|. Tensor cores need not round to nearest inside their f32 accumulation (truncation
    // is allowed), so the unit roundoff is taken as 2^-23: γ_k = k·2^-23/(1 - k·2^-23).
    const double gamma = k * std::ldexp(1.0, -23) / (1 - k * std::ldexp(1.0, -23));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double ref = 0, absum = 0;
        for (int64_t e = 0; e < k; ++e) {
          ref += static_cast<double>(x[i * k + e]) * w[j * k + e];
          absum += std::fabs(static_cast<double>(x[i * k + e]) * w[j * k + e]);
        }
        ASSERT_LE(std::fabs(gy[i * n + j] - ref), gamma * absum + 1e-30) << dtype_name(wt) << " " << i << "," << j;
      }
  }
}

// The 16-bit sides of the ops (read an operand from its T bits, also write the result's bits) and the position
// read from device memory (graph replays) must give exactly what the f32 forms give: the model's fused decode
// path relies on it (same values, no conversion kernels).
TEST(CudaDecoderOps, BitsSidesAndDevicePositionEqualTheF32Forms) {
  NEED_GPU();
  for (DType t : {DType::BF16, DType::F16}) {
    const std::string tag = t == DType::BF16 ? "bf16" : "f16";
    auto bits_of = [&](const Dev<float>& d) {
      Dev<uint16_t> b(d.n);
      co::to_bits16(d.p, d.n, t, b.p, nullptr);
      return b.get();
    };
    // rmsnorm
    const int64_t m = 3, d = 320;
    const auto x = rnd(m * d, 1.5f, 20, t), w = rnd(d, 0.3f, 21);
    Dev<float> dx(x), dw(w), o1(m * d), o2(m * d);
    Dev<uint16_t> ob(m * d);
    co::rmsnorm(dx.p, dw.p, m, d, 1e-5f, t, o1.p, nullptr);
    co::rmsnorm(dx.p, dw.p, m, d, 1e-5f, t, o2.p, nullptr, ob.p);
    ASSERT_EQ(o1.get(), o2.get()) << tag;
    ASSERT_EQ(ob.get(), bits_of(o1)) << tag;
    // silu_mul: inputs from bits, output bits
    const auto g = rnd(2000, 2.0f, 22, t), u = rnd(2000, 2.0f, 23, t);
    Dev<float> g1(g), u1(u), g2(std::vector<float>(g.size(), NAN)), u2(std::vector<float>(u.size(), NAN));
    Dev<uint16_t> gb(std::vector<uint16_t>(g.size())), ub(std::vector<uint16_t>(u.size())), sb(g.size());
    co::to_bits16(g1.p, g.size(), t, gb.p, nullptr);
    co::to_bits16(u1.p, u.size(), t, ub.p, nullptr);
    co::silu_mul(g1.p, u1.p, g.size(), t, nullptr);
    co::silu_mul(g2.p, u2.p, g.size(), t, nullptr, gb.p, ub.p, sb.p);  // g2/u2 (NaN) must not be read
    ASSERT_EQ(g1.get(), g2.get()) << tag;
    ASSERT_EQ(sb.get(), bits_of(g1)) << tag;
    // residual_add: y from bits
    const auto rx = rnd(1000, 3.0f, 24, t), ry = rnd(1000, 3.0f, 25, t);
    Dev<float> x1(rx), x2(rx), y1(ry), ynan(std::vector<float>(ry.size(), NAN));
    Dev<uint16_t> yb(ry.size());
    co::to_bits16(y1.p, ry.size(), t, yb.p, nullptr);
    co::residual_add(x1.p, y1.p, rx.size(), t, nullptr);
    co::residual_add(x2.p, ynan.p, rx.size(), t, nullptr, yb.p);
    ASSERT_EQ(x1.get(), x2.get()) << tag;
    // RoPE + KV store with q/k/v from bits and the position from device memory; attention writing bits
    const int64_t n = 1, nh = 4, nkv = 2, hd = 32, cap = 24, pos0 = 9;
    const auto q = rnd(n * nh * hd, 1.0f, 26, t), k = rnd(n * nkv * hd, 1.0f, 27, t), v = rnd(n * nkv * hd, 1.0f, 28, t);
    std::vector<float> cs(cap * hd);
    for (int64_t p = 0; p < cap; ++p)
      for (int64_t i = 0; i < hd / 2; ++i) {
        cs[p * hd + i] = static_cast<float>(std::cos(0.3 * p * (i + 1)));
        cs[p * hd + hd / 2 + i] = static_cast<float>(std::sin(0.3 * p * (i + 1)));
      }
    const auto kc0 = rnd(nkv * cap * hd, 1.0f, 29, t), vc0 = rnd(nkv * cap * hd, 1.0f, 30, t);
    Dev<float> q1(q), k1(k), v1(v), q2(std::vector<float>(q.size(), NAN)), k2(std::vector<float>(k.size(), NAN));
    Dev<float> vnan(std::vector<float>(v.size(), NAN)), dcs(cs), kc1(kc0), vc1(vc0), kc2(kc0), vc2(vc0);
    Dev<uint16_t> qb(q.size()), kb(k.size()), vb(v.size());
    co::to_bits16(q1.p, q.size(), t, qb.p, nullptr);
    co::to_bits16(k1.p, k.size(), t, kb.p, nullptr);
    co::to_bits16(v1.p, v.size(), t, vb.p, nullptr);
    Dev<int32_t> dpos(std::vector<int32_t>{static_cast<int32_t>(pos0)});
    // The third cache holds T bit patterns (KvCache::bits), starting from the same rows.
    Dev<uint16_t> kc3(bits_of(kc1)), vc3(bits_of(vc1));
    const co::KvCache c1{kc1.p, vc1.p}, c3{kc3.p, vc3.p, true};
    co::rope_store_kv(q1.p, k1.p, v1.p, n, nh, nkv, hd, dcs.p, pos0, c1, cap, t, nullptr);
    co::rope_store_kv(q2.p, k2.p, vnan.p, n, nh, nkv, hd, dcs.p, cap - n, co::KvCache{kc2.p, vc2.p}, cap, t, nullptr,
                      dpos.p, {qb.p, kb.p, vb.p});
    ASSERT_EQ(q1.get(), q2.get()) << tag;
    ASSERT_EQ(kc1.get(), kc2.get()) << tag;
    ASSERT_EQ(vc1.get(), vc2.get()) << tag;
    co::rope_store_kv(q2.p, k2.p, vnan.p, n, nh, nkv, hd, dcs.p, pos0, c3, cap, t, nullptr, nullptr,
                      {qb.p, kb.p, vb.p});
    ASSERT_EQ(kc3.get(), bits_of(kc1)) << tag;
    ASSERT_EQ(vc3.get(), bits_of(vc1)) << tag;
    Dev<float> a1(n * nh * hd), a2(n * nh * hd), a3(n * nh * hd);
    Dev<uint16_t> ab(n * nh * hd);
    co::attention(q1.p, c1, n, pos0, nh, nkv, hd, cap, t, a1.p, nullptr);
    co::attention(q1.p, c1, n, cap - n, nh, nkv, hd, cap, t, a2.p, nullptr, dpos.p, ab.p);
    co::attention(q1.p, c3, n, pos0, nh, nkv, hd, cap, t, a3.p, nullptr);
    const auto ha = a1.get();
    ASSERT_EQ(ha, a2.get()) << tag;
    ASSERT_EQ(ab.get(), bits_of(a1)) << tag;
    ASSERT_EQ(ha, a3.get()) << tag << ": attention from the T-bits cache";
    double nz = 0;
    for (float z : ha) nz += std::fabs(z);
    EXPECT_GT(nz, 0.0) << tag;
    // The T-bits cache on one-token steps split over many blocks (a prompt of 3 tokens too): the same bits as
    // the f32 cache holding the same values.
    for (const int64_t p0 : {int64_t{5}, int64_t{700}, int64_t{1500}}) {
      const int64_t lnh = 8, lnkv = 2, lhd = 128, lcap = 2048, ln = p0 == 700 ? 3 : 1;
      const auto lq = rnd(ln * lnh * lhd, 1.0f, 31, t);
      Dev<float> dq(lq), lk(rnd(lnkv * lcap * lhd, 1.0f, 32, t)), lv(rnd(lnkv * lcap * lhd, 1.0f, 33, t));
      Dev<uint16_t> lkb(bits_of(lk)), lvb(bits_of(lv));
      Dev<uint8_t> scratch(std::vector<uint8_t>(co::attention_scratch_bytes(lnh, lhd, lcap), 0));
      Dev<float> l1(std::vector<float>(lq.size(), NAN)), l3(std::vector<float>(lq.size(), NAN));
      co::attention(dq.p, co::KvCache{lk.p, lv.p}, ln, p0, lnh, lnkv, lhd, lcap, t, l1.p, nullptr, nullptr, nullptr,
                    scratch.p);
      co::attention(dq.p, co::KvCache{lkb.p, lvb.p, true}, ln, p0, lnh, lnkv, lhd, lcap, t, l3.p, nullptr, nullptr,
                    nullptr, scratch.p);
      const auto h1 = l1.get();
      ASSERT_EQ(h1, l3.get()) << tag << " position " << p0;
      ASSERT_FALSE(std::isnan(h1[0])) << tag << " position " << p0;
    }
  }
  // A T-bits cache needs a 16-bit activation type.
  try {
    co::attention(nullptr, co::KvCache{nullptr, nullptr, true}, 1, 5, 4, 2, 64, 64, DType::F32, nullptr, nullptr);
    ADD_FAILURE() << "a T-bits cache with F32 activations was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("KV cache"), std::string::npos) << e.what();
  }
}
