// The decoder against an f64 reference written here from the HF Llama equations (not from src/model), on a
// tiny random f32 model that exercises GQA (4 query heads over 2 kv heads), q/k/v biases, llama3 rope
// scaling in all three wavelength bands, an untied lm_head and two layers. With an f32 model the
// implementation rounds nothing to a 16-bit type, so the only differences are f32 rounding.
//
// Tolerance: every stage is an f32 dot product of length <= 48 (γ_48 = 48·2^-24/(1-48·2^-24) ≈ 2.9e-6 relative
// to Σ|a·b|) or an elementwise op (2^-24). The path from embedding to logit chains 2 layers × 9 stages + final
// norm + lm_head = 20 stages; with random O(1) weights each stage amplifies an incoming relative error by at
// most ~10 (norms divide by an RMS that is O(1); the softmax is 1-Lipschitz in the max norm of its inputs).
// So |logit - ref| <= 20 · 10 · γ_48 · (1 + max|ref|) ≈ 5.8e-4 · (1 + max|ref|). A wrong convention (RoPE
// halves, GQA mapping, bias, scaling band) gives O(1) errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "common/error.h"
#include "format/numerics.h"
#include "backends/cuda/device/device_info.h"
#include "io/quantize.h"
#include "io/safetensors.h"
#include "model/llama.h"

namespace fs = std::filesystem;
using nvfp4::DType;

namespace {

struct Tiny {
  int64_t H = 32, nh = 4, nkv = 2, hd = 8, I = 48, V = 40, L = 2, max_position = 256;
  double eps = 1e-5, theta = 10000.0;
  // llama3 rope scaling with original_max_position 16: wavelengths 6.3 (between 4 and 16: smoothed),
  // 63, 628, 6283 (> 16: divided by the factor).
  double factor = 4, lo = 1, hi = 4, orig = 16;
  std::map<std::string, std::vector<double>> w;  // name -> values (row-major)
};

std::vector<double> rnd(std::mt19937& g, size_t n, double scale, double offset = 0) {
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v(n);
  for (auto& x : v) x = offset + scale * static_cast<double>(static_cast<float>(u(g)));  // f32-representable
  for (auto& x : v) x = static_cast<double>(static_cast<float>(x));
  return v;
}

// torch_dtype: the model dtype T the decoder runs in. file_dtype: how the tensors are stored (F32: the loader
// rounds them to T; T itself: the loader reads the 16-bit ones in place). tied: no lm_head.weight,
// tie_word_embeddings true.
std::string write_tiny(const Tiny& t, const std::string& dir, const std::string& torch_dtype = "float32",
                       bool tied = false, DType file_dtype = DType::F32) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  nvfp4::io::SafetensorsWriter wr;
  for (const auto& [name, v] : t.w) {
    if (tied && name == "lm_head.weight") continue;
    std::vector<float> f(v.begin(), v.end());
    std::vector<int64_t> shape;
    const std::string base = name.substr(0, name.rfind('.'));
    if (name.find("norm") != std::string::npos || name.find(".bias") != std::string::npos) shape = {(int64_t)v.size()};
    else if (name.find("embed") != std::string::npos || name == "lm_head.weight") shape = {t.V, t.H};
    else if (name.find("q_proj") != std::string::npos) shape = {t.nh * t.hd, t.H};
    else if (name.find("k_proj") != std::string::npos || name.find("v_proj") != std::string::npos) shape = {t.nkv * t.hd, t.H};
    else if (name.find("o_proj") != std::string::npos) shape = {t.H, t.nh * t.hd};
    else if (name.find("down") != std::string::npos) shape = {t.H, t.I};
    else shape = {t.I, t.H};
    wr.add_f32(name, file_dtype, shape, f.data());
  }
  wr.write(dir + "/model.safetensors");
  std::ofstream(dir + "/config.json")
      << "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": " << t.H
      << ", \"intermediate_size\": " << t.I << ", \"num_hidden_layers\": " << t.L << ", \"num_attention_heads\": " << t.nh
      << ", \"num_key_value_heads\": " << t.nkv << ", \"vocab_size\": " << t.V
      << ", \"max_position_embeddings\": " << t.max_position << ", \"rms_norm_eps\": " << t.eps << ", \"rope_theta\": " << t.theta
      << ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": " << t.factor << ", \"low_freq_factor\": " << t.lo
      << ", \"high_freq_factor\": " << t.hi << ", \"original_max_position_embeddings\": " << t.orig
      << "}, \"attention_bias\": true, \"tie_word_embeddings\": " << (tied ? "true" : "false")
      << ", \"torch_dtype\": \"" << torch_dtype << "\", \"eos_token_id\": 2}";
  return dir;
}

// hd: head_dim; the hidden size is nh · hd (the config carries no head_dim).
Tiny make_tiny(unsigned seed, int64_t hd = 8) {
  Tiny t;
  t.hd = hd;
  t.H = t.nh * hd;
  std::mt19937 g(seed);
  t.w["model.embed_tokens.weight"] = rnd(g, t.V * t.H, 1.0);
  t.w["model.norm.weight"] = rnd(g, t.H, 0.2, 1.0);
  t.w["lm_head.weight"] = rnd(g, t.V * t.H, 0.3);
  const double s = 1.0 / std::sqrt(static_cast<double>(t.H));
  for (int l = 0; l < t.L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.w[p + "input_layernorm.weight"] = rnd(g, t.H, 0.2, 1.0);
    t.w[p + "post_attention_layernorm.weight"] = rnd(g, t.H, 0.2, 1.0);
    t.w[p + "self_attn.q_proj.weight"] = rnd(g, t.nh * t.hd * t.H, 2 * s);
    t.w[p + "self_attn.k_proj.weight"] = rnd(g, t.nkv * t.hd * t.H, 2 * s);
    t.w[p + "self_attn.v_proj.weight"] = rnd(g, t.nkv * t.hd * t.H, s);
    t.w[p + "self_attn.q_proj.bias"] = rnd(g, t.nh * t.hd, 0.5);
    t.w[p + "self_attn.k_proj.bias"] = rnd(g, t.nkv * t.hd, 0.5);
    t.w[p + "self_attn.v_proj.bias"] = rnd(g, t.nkv * t.hd, 0.5);
    t.w[p + "self_attn.o_proj.weight"] = rnd(g, t.H * t.nh * t.hd, s);
    t.w[p + "mlp.gate_proj.weight"] = rnd(g, t.I * t.H, s);
    t.w[p + "mlp.up_proj.weight"] = rnd(g, t.I * t.H, s);
    t.w[p + "mlp.down_proj.weight"] = rnd(g, t.H * t.I, 1.0 / std::sqrt(static_cast<double>(t.I)));
  }
  return t;
}

// y (m, N) = x (m, K) · Wᵀ (+ b), f64.
std::vector<double> mm(const std::vector<double>& x, int64_t m, int64_t K, const std::vector<double>& W, int64_t N,
                       const std::vector<double>* b = nullptr) {
  std::vector<double> y(m * N);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t n = 0; n < N; ++n) {
      double s = b ? (*b)[n] : 0.0;
      for (int64_t k = 0; k < K; ++k) s += x[i * K + k] * W[n * K + k];
      y[i * N + n] = s;
    }
  return y;
}

std::vector<double> norm(const std::vector<double>& x, int64_t m, int64_t d, const std::vector<double>& w, double eps) {
  std::vector<double> y(x.size());
  for (int64_t i = 0; i < m; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < d; ++j) ss += x[i * d + j] * x[i * d + j];
    const double r = 1.0 / std::sqrt(ss / d + eps);
    for (int64_t j = 0; j < d; ++j) y[i * d + j] = x[i * d + j] * r * w[j];
  }
  return y;
}

// Reference logits (m, V) for tokens at positions 0..m-1.
std::vector<double> reference(const Tiny& t, const std::vector<int32_t>& tok) {
  const int64_t m = tok.size(), H = t.H, hd = t.hd;
  auto W = [&](const std::string& n) -> const std::vector<double>& { return t.w.at(n); };
  std::vector<double> x(m * H);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < H; ++j) x[i * H + j] = W("model.embed_tokens.weight")[tok[i] * H + j];
  // Llama 3.1 frequency bands, in f64.
  std::vector<double> inv(hd / 2);
  const double pi = std::acos(-1.0);
  for (int64_t i = 0; i < hd / 2; ++i) {
    const double f = std::pow(t.theta, -2.0 * i / hd), wl = 2 * pi / f;
    if (wl < t.orig / t.hi) inv[i] = f;
    else if (wl > t.orig / t.lo) inv[i] = f / t.factor;
    else {
      const double sm = (t.orig / wl - t.lo) / (t.hi - t.lo);
      inv[i] = (1 - sm) * f / t.factor + sm * f;
    }
  }
  auto rope = [&](double* v, int64_t pos) {
    std::vector<double> o(hd);
    for (int64_t i = 0; i < hd; ++i) {
      const int64_t fi = i % (hd / 2);
      const double c = std::cos(pos * inv[fi]), s = std::sin(pos * inv[fi]);
      const double rot = i < hd / 2 ? -v[i + hd / 2] : v[i - hd / 2];  // rotate_half
      o[i] = v[i] * c + rot * s;
    }
    std::copy(o.begin(), o.end(), v);
  };
  for (int l = 0; l < t.L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    auto a = norm(x, m, H, W(p + "input_layernorm.weight"), t.eps);
    auto q = mm(a, m, H, W(p + "self_attn.q_proj.weight"), t.nh * hd, &W(p + "self_attn.q_proj.bias"));
    auto k = mm(a, m, H, W(p + "self_attn.k_proj.weight"), t.nkv * hd, &W(p + "self_attn.k_proj.bias"));
    auto v = mm(a, m, H, W(p + "self_attn.v_proj.weight"), t.nkv * hd, &W(p + "self_attn.v_proj.bias"));
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t h = 0; h < t.nh; ++h) rope(&q[(i * t.nh + h) * hd], i);
      for (int64_t h = 0; h < t.nkv; ++h) rope(&k[(i * t.nkv + h) * hd], i);
    }
    std::vector<double> att(m * t.nh * hd, 0.0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t h = 0; h < t.nh; ++h) {
        const int64_t g = h / (t.nh / t.nkv);
        std::vector<double> s(i + 1);
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double d = 0;
          for (int64_t e = 0; e < hd; ++e) d += q[(i * t.nh + h) * hd + e] * k[(j * t.nkv + g) * hd + e];
          s[j] = d / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, s[j]);
        }
        for (auto& z : s) sum += (z = std::exp(z - mx));
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t e = 0; e < hd; ++e) att[(i * t.nh + h) * hd + e] += s[j] / sum * v[(j * t.nkv + g) * hd + e];
      }
    auto o = mm(att, m, t.nh * hd, W(p + "self_attn.o_proj.weight"), H);
    for (size_t j = 0; j < x.size(); ++j) x[j] += o[j];
    a = norm(x, m, H, W(p + "post_attention_layernorm.weight"), t.eps);
    auto gt = mm(a, m, H, W(p + "mlp.gate_proj.weight"), t.I);
    auto up = mm(a, m, H, W(p + "mlp.up_proj.weight"), t.I);
    for (size_t j = 0; j < gt.size(); ++j) gt[j] = gt[j] / (1 + std::exp(-gt[j])) * up[j];
    auto d = mm(gt, m, t.I, W(p + "mlp.down_proj.weight"), H);
    for (size_t j = 0; j < x.size(); ++j) x[j] += d[j];
  }
  auto f = norm(x, m, H, W("model.norm.weight"), t.eps);
  return mm(f, m, H, W("lm_head.weight"), t.V);
}

std::string tmpdir(const std::string& name) {
  return (fs::temp_directory_path() / ("nvfp4_decoder_test_" + name + "_" + std::to_string(::getpid()))).string();
}

// The tiny model (bf16, from write_tiny in `src`) quantized to NVFP4 W4A4 into a fresh directory `name`, every
// linear's calibration amax 3 except those in `amax` (module name -> amax).
std::string quantize_tiny(const Tiny& t, const std::string& src, const std::string& name,
                          const std::map<std::string, float>& amax = {}) {
  const std::string dir = tmpdir(name);
  fs::remove_all(dir);
  nvfp4::io::QuantizeOptions qo;
  qo.scheme = nvfp4::io::QuantScheme::NVFP4;
  for (const auto& [w, v] : t.w)
    if (w.find("_proj.weight") != std::string::npos) qo.calib_amax[w.substr(0, w.size() - 7)] = 3.0f;
  for (const auto& [m, a] : amax) qo.calib_amax[m] = a;
  nvfp4::io::quantize_model(src, dir, qo);
  return dir;
}

// The logits of a and b over tok (all positions) must be finite, equal bit for bit, and not all ~0.
void expect_same_logits(nvfp4::model::LlamaModel& a, nvfp4::model::LlamaModel& b, const std::vector<int32_t>& tok,
                        int64_t vocab, const std::string& tag) {
  std::vector<float> la(tok.size() * vocab, NAN), lb(tok.size() * vocab, -NAN);
  a.forward(tok.data(), tok.size(), la.data(), true);
  b.forward(tok.data(), tok.size(), lb.data(), true);
  double norm2 = 0;
  for (size_t i = 0; i < la.size(); ++i) {
    ASSERT_TRUE(std::isfinite(la[i])) << tag << " " << i;
    ASSERT_EQ(la[i], lb[i]) << tag << " logit " << i;
    norm2 += static_cast<double>(la[i]) * la[i];
  }
  EXPECT_GT(norm2, 1.0) << tag;
}

}  // namespace

TEST(Decoder, MatchesF64ReferenceWithinDerivedBound) {
  const Tiny t = make_tiny(7);
  const std::string dir = write_tiny(t, tmpdir("ref"));
  auto m = nvfp4::model::LlamaModel::load(dir, {}, {});
  ASSERT_EQ(m->act_dtype(), DType::F32);
  const std::vector<int32_t> tok = {3, 17, 5, 39, 0, 22, 22, 8, 31, 12, 1, 4};
  const auto ref = reference(t, tok);
  std::vector<float> got(tok.size() * t.V, NAN);  // NaN-poisoned: an unwritten logit fails
  m->forward(tok.data(), tok.size(), got.data(), true);
  double mx = 0, norm2 = 0;
  for (double r : ref) mx = std::max(mx, std::fabs(r)), norm2 += r * r;
  ASSERT_GT(norm2, 1.0) << "reference is trivial";
  const double gamma = 48 * std::ldexp(1.0, -24) / (1 - 48 * std::ldexp(1.0, -24));
  const double tol = 20 * 10 * gamma * (1 + mx);
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << i;
    worst = std::max(worst, std::fabs(got[i] - ref[i]));
  }
  EXPECT_LE(worst, tol) << "max |logit - ref| " << worst << ", bound " << tol;
  std::printf("max |logit - ref| = %.3g (bound %.3g, max |ref| %.3g)\n", worst, tol, mx);
  fs::remove_all(dir);
}

TEST(Decoder, KvCacheDecodeEqualsPrefillBitForBit) {
  const Tiny t = make_tiny(11);
  const std::string dir = write_tiny(t, tmpdir("kv"));
  auto m = nvfp4::model::LlamaModel::load(dir, {}, {});
  const std::vector<int32_t> tok = {5, 6, 7, 8, 9, 10, 2, 33};
  std::vector<float> all(tok.size() * t.V);
  m->forward(tok.data(), tok.size(), all.data(), true);
  m->reset();
  // Same tokens: 3 as a prompt, then one at a time through the cache.
  std::vector<float> last(t.V);
  m->forward(tok.data(), 3, last.data(), false);
  for (int64_t j = 0; j < t.V; ++j) ASSERT_EQ(last[j], all[2 * t.V + j]);
  for (size_t i = 3; i < tok.size(); ++i) {
    m->forward(&tok[i], 1, last.data(), false);
    for (int64_t j = 0; j < t.V; ++j) ASSERT_EQ(last[j], all[i * t.V + j]) << "token " << i << " logit " << j;
  }
  EXPECT_EQ(m->position(), static_cast<int64_t>(tok.size()));
  fs::remove_all(dir);
}

// The same with the model in bf16 and fp16: the dense linears then read 16-bit weights, through the kernel that
// shares each weight load between 4 tokens (prefill) or reads it for one (decode); both must give the same bits.
TEST(Decoder, KvCacheDecodeEqualsPrefillBitForBit16BitModels) {
  for (const char* dt : {"bfloat16", "float16"}) {
    const Tiny t = make_tiny(13);
    const std::string dir = write_tiny(t, tmpdir(std::string("kv16") + dt), dt);
    auto m = nvfp4::model::LlamaModel::load(dir, {}, {});
    ASSERT_EQ(m->act_dtype(), std::string(dt) == "float16" ? DType::F16 : DType::BF16);
    const std::vector<int32_t> tok = {5, 6, 7, 8, 9, 10, 2, 33, 17};
    std::vector<float> all(tok.size() * t.V, NAN);
    m->forward(tok.data(), tok.size(), all.data(), true);
    double norm2 = 0;
    for (float v : all) norm2 += static_cast<double>(v) * v;
    ASSERT_GT(norm2, 1.0) << dt << ": logits are trivial";
    m->reset();
    std::vector<float> last(t.V, NAN);
    for (size_t i = 0; i < tok.size(); ++i) {
      m->forward(&tok[i], 1, last.data(), false);
      for (int64_t j = 0; j < t.V; ++j) ASSERT_EQ(last[j], all[i * t.V + j]) << dt << " token " << i << " logit " << j;
    }
    fs::remove_all(dir);
  }
}

// With head_dim 16 the CPU attention shares cache rows between queries: a prompt's consecutive tokens of a
// head (4 per pass), and from 256 positions on a one-token step's query heads of one kv head. A 300-token prompt
// and the same tokens decoded one at a time past position 256 must give the same logits bit for bit, in f32
// and with the 16-bit cache of a bf16 model.
TEST(Decoder, KvCacheDecodeEqualsPrefillBitForBitWithSharedCacheRows) {
  for (const char* dt : {"float32", "bfloat16"}) {
    Tiny t = make_tiny(17, 16);
    t.max_position = 512;
    const std::string dir = write_tiny(t, tmpdir(std::string("kvshare") + dt), dt);
    auto m = nvfp4::model::LlamaModel::load(dir, {}, {});
    std::vector<int32_t> tok(300);
    for (size_t i = 0; i < tok.size(); ++i) tok[i] = static_cast<int32_t>((11 * i + 7) % t.V);
    std::vector<float> all(tok.size() * t.V, NAN);
    m->forward(tok.data(), static_cast<int64_t>(tok.size()), all.data(), true);
    double norm2 = 0;
    for (float v : all) norm2 += static_cast<double>(v) * v;
    ASSERT_GT(norm2, 1.0) << dt << ": logits are trivial";
    m->reset();
    std::vector<float> last(t.V, NAN);
    m->forward(tok.data(), 3, last.data(), false);
    for (size_t i = 3; i < tok.size(); ++i) {
      m->forward(&tok[i], 1, last.data(), false);
      for (int64_t j = 0; j < t.V; ++j) ASSERT_EQ(last[j], all[i * t.V + j]) << dt << " token " << i << " logit " << j;
    }
    fs::remove_all(dir);
  }
}

// A tied lm_head reads the embedding table in its own storage (T bits); it must give the same logits, bit for
// bit, as an explicit lm_head.weight holding the same values.
TEST(Decoder, TiedLmHeadEqualsExplicitCopyBitForBit) {
  for (const char* dt : {"bfloat16", "float16", "float32"}) {
    Tiny t = make_tiny(17);
    t.w["lm_head.weight"] = t.w["model.embed_tokens.weight"];
    const std::string dir_tied = write_tiny(t, tmpdir(std::string("tied") + dt), dt, true);
    const std::string dir_copy = write_tiny(t, tmpdir(std::string("copy") + dt), dt, false);
    auto a = nvfp4::model::LlamaModel::load(dir_tied, {}, {});
    auto b = nvfp4::model::LlamaModel::load(dir_copy, {}, {});
    expect_same_logits(*a, *b, {1, 9, 27, 3, 3, 38}, t.V, dt);
    fs::remove_all(dir_tied);
    fs::remove_all(dir_copy);
  }
}

// 16-bit weights stored in the model dtype are read in place from the mapped file; the logits must equal, bit
// for bit, those of the same model stored as f32 and rounded to T at load (the copied path).
TEST(Decoder, WeightsReadInPlaceEqualCopiedWeightsBitForBit) {
  for (const auto& [dt, fdt] : {std::pair<const char*, DType>{"bfloat16", DType::BF16}, {"float16", DType::F16}}) {
    for (const bool tied : {false, true}) {
      // values representable in T, so both files hold the same model (the loader keeps norm weights as
      // read: an f32 file would otherwise give norms that T cannot hold)
      Tiny t = make_tiny(19);
      for (auto& [name, v] : t.w)
        for (double& x : v) x = nvfp4::round_to(fdt, static_cast<float>(x));
      const std::string tag = std::string(dt) + (tied ? "t" : "u");
      const std::string dir_f32 = write_tiny(t, tmpdir("copied" + tag), dt, tied, DType::F32);
      const std::string dir_16 = write_tiny(t, tmpdir("inplace" + tag), dt, tied, fdt);
      auto a = nvfp4::model::LlamaModel::load(dir_f32, {}, {});
      auto b = nvfp4::model::LlamaModel::load(dir_16, {}, {});
      // the files are closed after load (the in-place model keeps its own mapping)
      fs::remove_all(dir_f32);
      fs::remove_all(dir_16);
      EXPECT_EQ(a->weight_bytes(), b->weight_bytes()) << tag;
      expect_same_logits(*a, *b, {4, 8, 15, 16, 23, 39, 0}, t.V, tag);
    }
  }
}

TEST(Decoder, ContextOverflowAndBadTokenThrow) {
  const Tiny t = make_tiny(3);
  const std::string dir = write_tiny(t, tmpdir("ovf"));
  nvfp4::model::LoadOptions lo;
  lo.max_context = 4;
  auto m = nvfp4::model::LlamaModel::load(dir, lo, {});
  std::vector<float> lg(t.V);
  const std::vector<int32_t> five = {1, 2, 3, 4, 5};
  EXPECT_THROW(m->forward(five.data(), 5, lg.data(), false), nvfp4::Error);
  const int32_t bad = 40;
  EXPECT_THROW(m->forward(&bad, 1, lg.data(), false), nvfp4::Error);
  fs::remove_all(dir);
}

TEST(Decoder, RopeInvFreqLlama3Bands) {
  nvfp4::model::LlamaConfig c;
  c.head_dim = 8;
  c.rope_theta = 10000;
  c.rope_scaling = {"llama3", 4.0, 1.0, 4.0, 16};
  const auto f = nvfp4::model::rope_inv_freq(c);
  ASSERT_EQ(f.size(), 4u);
  // i = 0: wavelength 2π ≈ 6.28 lies in [16/4, 16/1]: smooth = (16/6.283 - 1)/3 = 0.5154, f = (1-s)/4 + s
  const double s = (16 / (2 * std::acos(-1.0)) - 1) / 3;
  EXPECT_NEAR(f[0], (1 - s) * 0.25 + s, 1e-6);
  EXPECT_FLOAT_EQ(f[1], static_cast<float>(0.1f / 4.0));   // wavelength 62.8 > 16: divided
  EXPECT_FLOAT_EQ(f[3], static_cast<float>(0.001f / 4.0));
}

// The same model and bound with the decoder's ops as CUDA kernels (--ops cuda): prefill of 5 tokens, then
// one token at a time through the device KV cache, every step against the reference rows. cuBLAS runs the
// f32 GEMMs in pedantic mode (no TF32), so the f32 bound above applies unchanged (γ_K holds for any
// summation order). Skipped without a GPU.
TEST(Decoder, GpuOpsMatchF64ReferenceWithinDerivedBound) {
  std::string why;
  if (nvfp4::cuda_device_count(&why) == 0) GTEST_SKIP() << "no GPU: " << why;
  const Tiny t = make_tiny(7);
  const std::string dir = write_tiny(t, tmpdir("gpu"));
  nvfp4::model::LoadOptions lo;
  lo.ops_on_device = true;
  auto m = nvfp4::model::LlamaModel::load(dir, lo, {});
  ASSERT_TRUE(m->ops_on_device());
  const std::vector<int32_t> tok = {3, 17, 5, 39, 0, 22, 22, 8, 31, 12, 1, 4};
  const auto ref = reference(t, tok);
  double mx = 0;
  for (double r : ref) mx = std::max(mx, std::fabs(r));
  const double gamma = 48 * std::ldexp(1.0, -24) / (1 - 48 * std::ldexp(1.0, -24));
  const double tol = 20 * 10 * gamma * (1 + mx);
  std::vector<float> got(5 * t.V, NAN);
  m->forward(tok.data(), 5, got.data(), true);
  double worst = 0;
  for (int64_t i = 0; i < 5 * t.V; ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << i;
    worst = std::max(worst, std::fabs(got[i] - ref[i]));
  }
  std::vector<float> one(t.V, NAN);
  for (size_t i = 5; i < tok.size(); ++i) {
    m->forward(&tok[i], 1, one.data(), false);
    for (int64_t j = 0; j < t.V; ++j) worst = std::max(worst, std::fabs(one[j] - ref[i * t.V + j]));
  }
  EXPECT_LE(worst, tol) << "max |logit - ref| " << worst << ", bound " << tol;
  std::printf("gpu ops: max |logit - ref| = %.3g (bound %.3g)\n", worst, tol);
  fs::remove_all(dir);
}

// --ops cuda with NVFP4 linears (the tiny model quantized to W4A4): one-token steps replayed from a CUDA graph
// must give the eager steps' logits bit for bit, after a prefill, across a reset (the graph reads the position
// from device memory) and after a longer prefill has moved the activation buffers (captured again); both in
// the default semantics (w4a16 on this GPU, or native on sm_100) and in the W4A4 emulation (its decode-size
// quantizer writes a per-stream buffer inside the graph).
TEST(Decoder, GpuOpsGraphDecodeEqualsEagerBitForBit) {
  std::string why;
  if (nvfp4::cuda_device_count(&why) == 0) GTEST_SKIP() << "no GPU: " << why;
  const Tiny t = make_tiny(23);
  const std::string src = write_tiny(t, tmpdir("graph_src"), "bfloat16");
  const std::string dir = quantize_tiny(t, src, "graph_q");
  for (int emulate = 0; emulate < 2; ++emulate) {
    std::vector<std::string> warnings;
    nvfp4::Reporter rep;
    rep.log = [&](nvfp4::LogLevel lv, const std::string& m) {
      if (lv == nvfp4::LogLevel::Warning && m.find("CUDA graphs") != std::string::npos) warnings.push_back(m);
    };
    nvfp4::model::LoadOptions lo;
    lo.ops_on_device = true;
    if (emulate) {
      lo.overrides.semantics = nvfp4::Semantics::W4A4;
      lo.overrides.semantics_from = "test";
    }
    lo.cuda_graphs = true;
    auto g = nvfp4::model::LlamaModel::load(dir, lo, rep);
    lo.cuda_graphs = false;
    auto e = nvfp4::model::LlamaModel::load(dir, lo, rep);
    const std::string tag = emulate ? "w4a4 emulation" : "default semantics";
    std::vector<float> lg(t.V), le(t.V);
    auto same = [&](const std::string& what) {
      double norm2 = 0;
      for (int64_t j = 0; j < t.V; ++j) {
        ASSERT_TRUE(std::isfinite(lg[j])) << tag << " " << what << " logit " << j;
        ASSERT_EQ(lg[j], le[j]) << tag << " " << what << " logit " << j;
        norm2 += static_cast<double>(lg[j]) * lg[j];
      }
      EXPECT_GT(norm2, 1e-3) << tag << " " << what << ": logits are trivial";
    };
    auto prefill = [&](const std::vector<int32_t>& tok) {
      std::vector<float> a(tok.size() * t.V), b(a.size());
      g->forward(tok.data(), static_cast<int64_t>(tok.size()), a.data(), true);
      e->forward(tok.data(), static_cast<int64_t>(tok.size()), b.data(), true);
      for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << tag << " prefill logit " << i;
    };
    auto decode = [&](std::vector<int32_t> tok, const std::string& what) {
      for (size_t i = 0; i < tok.size(); ++i) {
        g->forward(&tok[i], 1, lg.data(), false);
        e->forward(&tok[i], 1, le.data(), false);
        same(what + " step " + std::to_string(i));
      }
    };
    prefill({3, 17, 5, 39, 0});
    decode({22, 22, 8, 31, 12, 1, 4, 9}, "after prefill");
    EXPECT_TRUE(g->decode_graph_active()) << tag << ": the decode steps did not run from a graph";
    EXPECT_FALSE(e->decode_graph_active()) << tag;
    g->reset();
    e->reset();
    decode({7, 30, 2, 2}, "after reset");
    prefill({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22});
    decode({11, 38, 6}, "after a longer prefill");
    EXPECT_EQ(g->position(), 4 + 22 + 3) << tag;
    // Positions 29 .. 98 of a 256-token cache: attention splits each head's positions over 1 to 4 blocks.
    std::vector<int32_t> run(70);
    for (size_t i = 0; i < run.size(); ++i) run[i] = static_cast<int32_t>((7 * i + 3) % t.V);
    decode(run, "past 32, 64 and 96 positions");
    EXPECT_TRUE(g->decode_graph_active()) << tag;
    EXPECT_TRUE(warnings.empty()) << tag << ": " << (warnings.empty() ? "" : warnings[0]);
  }
  fs::remove_all(src);
  fs::remove_all(dir);
}

// --ops cuda fuses q/k/v and gate/up into one linear each (LoadOptions::fuse_linears). On the tiny model every
// linear's K (32, 48) is a single chunk of the decode kernel, so each output is summed in the same order
// whether its linear is fused or not: the logits must equal the unfused model's bit for bit, prefill and
// decode, default semantics and W4A4 emulation (a wrong column offset or row stride would change them). With
// different input scales for k_proj (its calibration amax changed), q/k/v cannot be fused (their activations
// would be quantized differently) while gate/up still are; the executor report says which.
TEST(Decoder, GpuOpsFusedLinearsEqualSeparateOnesBitForBit) {
  std::string why;
  if (nvfp4::cuda_device_count(&why) == 0) GTEST_SKIP() << "no GPU: " << why;
  const Tiny t = make_tiny(29);
  const std::string src = write_tiny(t, tmpdir("fuse_src"), "bfloat16");
  for (int variant = 0; variant < 2; ++variant) {
    const std::string dir =
        variant ? quantize_tiny(t, src, "fuse_q_kdiff", {{"model.layers.1.self_attn.k_proj", 5.0f}})
                : quantize_tiny(t, src, "fuse_q");
    for (int emulate = 0; emulate < 2; ++emulate) {
      const std::string tag = std::string(variant ? "k_proj apart, " : "") + (emulate ? "w4a4 emulation" : "default");
      nvfp4::model::LoadOptions lo;
      lo.ops_on_device = true;
      if (emulate) {
        lo.overrides.semantics = nvfp4::Semantics::W4A4;
        lo.overrides.semantics_from = "test";
      }
      auto f = nvfp4::model::LlamaModel::load(dir, lo, {});
      lo.fuse_linears = false;
      auto u = nvfp4::model::LlamaModel::load(dir, lo, {});
      int fused_attn = 0, fused_mlp = 0;
      for (const auto& e : f->executor_summary()) {
        const bool fused = e.how.find("fused") != std::string::npos;
        if (fused && e.group == "attention q/k/v/o") fused_attn += e.count;
        if (fused && e.group == "mlp gate/up/down") fused_mlp += e.count;
      }
      EXPECT_EQ(fused_attn, variant ? 3 : 6) << tag << ": q/k/v linears fused (layer 1 apart when its scales differ)";
      EXPECT_EQ(fused_mlp, 4) << tag << ": gate/up linears fused";
      for (const auto& e : u->executor_summary()) EXPECT_EQ(e.how.find("fused"), std::string::npos) << tag;
      const std::vector<int32_t> pre = {3, 17, 5, 39, 0};
      std::vector<float> a(pre.size() * t.V), b(a.size());
      f->forward(pre.data(), static_cast<int64_t>(pre.size()), a.data(), true);
      u->forward(pre.data(), static_cast<int64_t>(pre.size()), b.data(), true);
      for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << tag << " prefill logit " << i;
      double norm2 = 0;
      for (int32_t tok : {22, 22, 8, 31, 12, 1}) {
        std::vector<float> la(t.V), lb(t.V);
        f->forward(&tok, 1, la.data(), false);
        u->forward(&tok, 1, lb.data(), false);
        for (int64_t j = 0; j < t.V; ++j) {
          ASSERT_TRUE(std::isfinite(la[j])) << tag;
          ASSERT_EQ(la[j], lb[j]) << tag << " decode logit " << j;
          norm2 += static_cast<double>(la[j]) * la[j];
        }
      }
      EXPECT_GT(norm2, 1e-3) << tag << ": logits are trivial";
    }
    fs::remove_all(dir);
  }
  fs::remove_all(src);
}

// --ops auto (LoadOptions::ops_auto, the CLI's default): the decoder's ops go to the GPU only for a quantized
// model whose quantized linears run on a GPU, and never while calibrating; an unquantized model, a machine
// without a GPU, or --device cpu keep them on the CPU. Runs with and without a GPU (expecting either answer).
TEST(Decoder, OpsAutoPicksTheGpuOnlyWhenTheQuantizedLinearsRunThere) {
  std::string why;
  const bool gpu = nvfp4::cuda_device_count(&why) > 0;
  const Tiny t = make_tiny(31);
  const std::string src = write_tiny(t, tmpdir("auto_src"), "bfloat16");
  const std::string dir = quantize_tiny(t, src, "auto_q");
  nvfp4::model::LoadOptions lo;
  lo.ops_auto = true;
  EXPECT_EQ(nvfp4::model::LlamaModel::load(dir, lo, {})->ops_on_device(), gpu) << why;
  EXPECT_FALSE(nvfp4::model::LlamaModel::load(src, lo, {})->ops_on_device()) << "unquantized model";
  nvfp4::model::LoadOptions cpu = lo;
  cpu.overrides.device = nvfp4::DeviceRequest{true, -1};
  cpu.overrides.device_from = "test";
  EXPECT_FALSE(nvfp4::model::LlamaModel::load(dir, cpu, {})->ops_on_device()) << "--device cpu";
  nvfp4::model::LoadOptions cal = lo;
  cal.record_input_amax = true;
  EXPECT_FALSE(nvfp4::model::LlamaModel::load(dir, cal, {})->ops_on_device()) << "calibrating";
  // Whichever it picked, the model runs.
  auto m = nvfp4::model::LlamaModel::load(dir, lo, {});
  std::vector<float> lg(t.V, NAN);
  const int32_t tok = 5;
  m->forward(&tok, 1, lg.data(), false);
  for (float v : lg) ASSERT_TRUE(std::isfinite(v));
  fs::remove_all(src);
  fs::remove_all(dir);
}

TEST(Decoder, GpuOpsRefusedWithoutAGpu) {
  std::string why;
  if (nvfp4::cuda_device_count(&why) > 0) GTEST_SKIP() << "a GPU is present";
  const Tiny t = make_tiny(3);
  const std::string dir = write_tiny(t, tmpdir("nogpu"));
  nvfp4::model::LoadOptions lo;
  lo.ops_on_device = true;
  EXPECT_THROW(nvfp4::model::LlamaModel::load(dir, lo, {}), nvfp4::Error);
  fs::remove_all(dir);
}
