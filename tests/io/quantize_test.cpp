// Model quantization and format conversion (io/quantize.h): what is written, fused global scales, the
// quantization error bound, byte-for-byte CT <-> ModelOpt conversion, and the no-partial-output rules.
#include "io/quantize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "io_test_util.h"

namespace nvfp4::io {
namespace {

using testing::read_bytes;
using testing::TmpDir;
using testing::write_text;
using json = nlohmann::json;

constexpr int64_t H = 64, I = 96, V = 50;

struct Tiny {
  std::map<std::string, std::vector<float>> w;  // linear weights (bf16 values)
  std::map<std::string, std::pair<int64_t, int64_t>> shape;
};

const char* kLinears[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                          "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};

// A 2-layer Llama-like bf16 model; sharded into two files when `sharded`.
Tiny write_tiny(const std::string& dir, bool sharded = false) {
  Tiny t;
  SafetensorsWriter a, b;
  uint32_t seed = 10;
  for (int l = 0; l < 2; ++l) {
    SafetensorsWriter& wr = (sharded && l == 1) ? b : a;
    for (const char* n : kLinears) {
      const std::string name = "model.layers." + std::to_string(l) + "." + n;
      const std::string s(n);
      const int64_t rows = s == "mlp.down_proj" ? H : (s == "mlp.gate_proj" || s == "mlp.up_proj") ? I
                           : (s == "self_attn.k_proj" || s == "self_attn.v_proj") ? 32 : H;
      const int64_t cols = s == "mlp.down_proj" ? I : H;
      // Different spreads so that the fused sets' largest amax is not always the first member.
      const auto sd = seed++;
      t.w[name] = testing::bf16_weights(rows, cols, sd, 0.02f * static_cast<float>(1 + sd % 3));
      t.shape[name] = {rows, cols};
      wr.add_f32(name + ".weight", DType::BF16, {rows, cols}, t.w[name].data());
    }
    std::vector<float> ones(H, 1.0f);
    wr.add_f32("model.layers." + std::to_string(l) + ".input_layernorm.weight", DType::BF16, {H}, ones.data());
  }
  std::vector<float> emb = testing::bf16_weights(V, H, 99, 1.0f), bias(H, 0.25f);
  a.add_f32("model.embed_tokens.weight", DType::BF16, {V, H}, emb.data());
  a.add_f32("lm_head.weight", DType::BF16, {V, H}, emb.data());
  a.add_f32("model.layers.0.self_attn.o_proj.bias", DType::BF16, {H}, bias.data());
  if (sharded) {
    a.write(dir + "/model-00001-of-00002.safetensors");
    b.write(dir + "/model-00002-of-00002.safetensors");
    json idx;
    // The index lists what the files just written hold.
    idx["metadata"] = {{"total_size", 0}};
    for (const char* shard : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}) {
      auto f = SafetensorsFile::open(dir + "/" + shard);
      for (const auto& v : f->tensors()) idx["weight_map"][v.name] = shard;
    }
    write_text(dir + "/model.safetensors.index.json", idx.dump());
  } else {
    a.write(dir + "/model.safetensors");
  }
  write_text(dir + "/config.json",
             R"({"architectures":["LlamaForCausalLM"],"model_type":"llama","torch_dtype":"bfloat16","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2})");
  write_text(dir + "/tokenizer.json", R"({"model":{"type":"BPE"}})");
  return t;
}

std::map<std::string, float> calib_for(const Tiny& t) {
  std::map<std::string, float> c;
  float a = 1.0f;
  for (const auto& kv : t.w) c[kv.first] = (a += 0.75f);
  return c;
}

// Per element, |x - x̂| <= t·h(|x|/t) + max(0, |x| - 6t) + 2^-20·|x|, where t = S·D is the group's decoded
// scale and h the half-spacing of the E2M1 grid around |x|/t (0.25 up to 2, 0.5 up to 4, 1 up to 6): round-
// to-nearest on the grid is off by at most half a step, values past 6t are clamped, and the f32 steps
// (x/t, S·D) add a relative error far below 2^-20. Separately, 6t >= amax_g·(1 - 2^-4)(1 - 2^-8): the block
// scale is amax_g/6 rounded to bf16 (relative error <= 2^-9) and then to E4M3 (<= 2^-4, normal range), so the
// clamp removes at most ~6.3% of a group's largest value.
// The amax that sets `linear`'s global scale (module name without "model.layers.L." prefix `p`): the largest of
// its fused set (q/k/v, gate/up), else its own.
float set_amax(const Tiny& t, const std::string& p, const std::string& linear) {
  auto amax = [&](const std::string& n) { return abs_max(t.w.at(p + n).data(), int64_t(t.w.at(p + n).size())); };
  if (linear == "self_attn.q_proj" || linear == "self_attn.k_proj" || linear == "self_attn.v_proj")
    return std::max({amax("self_attn.q_proj"), amax("self_attn.k_proj"), amax("self_attn.v_proj")});
  if (linear == "mlp.gate_proj" || linear == "mlp.up_proj") return std::max(amax("mlp.gate_proj"), amax("mlp.up_proj"));
  return amax(linear);
}

// W4A4 (NVFP4) options calibrated for the tiny model `t`.
QuantizeOptions w4a4_options(const Tiny& t) {
  QuantizeOptions opt;
  opt.scheme = QuantScheme::NVFP4;
  opt.calib_amax = calib_for(t);
  return opt;
}

// Writes the sharded tiny model to d/in and quantizes it (NVFP4, compressed-tensors) to d/ct; returns the
// options used.
QuantizeOptions quantize_sharded_tiny(const TmpDir& d) {
  std::filesystem::create_directory(d / "in");
  const Tiny t = write_tiny(d / "in", /*sharded=*/true);
  QuantizeOptions opt = w4a4_options(t);
  quantize_model(d / "in", d / "ct", opt);
  return opt;
}

void expect_within_quant_bound(const std::vector<float>& x, const Nvfp4Matrix& q, const std::string& what) {
  std::vector<float> xh(x.size());
  dequantize(q, xh.data());
  const int64_t groups = q.cols / kGroupSize;
  double worst = 0;
  for (int64_t r = 0; r < q.rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const float s = e4m3_decode(q.scales[r * groups + g]);
      const double t = static_cast<double>(s) * q.global.dec;
      double amax_g = 0;
      for (int j = 0; j < kGroupSize; ++j) amax_g = std::max(amax_g, std::fabs(double(x[r * q.cols + g * 16 + j])));
      if (amax_g > 0 && s >= 0.015625f) {
        ASSERT_GE(6 * t, amax_g * (1 - 1.0 / 16) * (1 - 1.0 / 256)) << what;
      }
      for (int j = 0; j < kGroupSize; ++j) {
        const size_t i = static_cast<size_t>(r * q.cols + g * 16 + j);
        const double ax = std::fabs(double(x[i]));
        const double y = ax / t;
        const double h = y <= 2 ? 0.25 : y <= 4 ? 0.5 : 1.0;
        const double bound = t * h + std::max(0.0, ax - 6 * t) + ax * std::ldexp(1.0, -20);
        const double err = std::fabs(double(x[i]) - double(xh[i]));
        ASSERT_LE(err, bound) << what << " element " << i << " x=" << x[i] << " x̂=" << xh[i];
        worst = std::max(worst, err / (amax_g > 0 ? amax_g : 1));
      }
    }
  EXPECT_GT(worst, 0.0) << what << ": quantization changed nothing (trivial test)";
}

// quantize_model must throw, with every one of `needles` in the one-line message.
void expect_quantize_error(const std::string& in, const std::string& out, const QuantizeOptions& opt,
                           std::initializer_list<std::string> needles) {
  try {
    quantize_model(in, out, opt);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    for (const std::string& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

TEST(Quantize, CompressedTensorsW4A16) {
  TmpDir d;
  std::filesystem::create_directory(d / "in");
  const Tiny t = write_tiny(d / "in");
  const auto before = read_bytes(d / "in/model.safetensors");
  QuantizeOptions opt;
  opt.scheme = QuantScheme::NVFP4A16;
  size_t steps = 0;
  Reporter rep;
  rep.progress = [&](const ProgressEvent& e) {
    ++steps;
    EXPECT_LE(e.done, e.total);
  };
  const QuantizeSummary s = quantize_model(d / "in", d / "out", opt, rep);
  EXPECT_EQ(s.quantized, 14u);
  EXPECT_EQ(s.ignored, std::vector<std::string>{"lm_head"});
  EXPECT_EQ(steps, SafetensorsModel::open(d / "in")->names().size());
  EXPECT_EQ(read_bytes(d / "in/model.safetensors"), before) << "input modified";
  EXPECT_EQ(d.entries(), (std::vector<std::string>{"in", "out"})) << "temporary folder left behind";
  EXPECT_TRUE(std::filesystem::exists(d / "out/tokenizer.json"));

  const json cfg = json::parse(testing::read_bytes(d / "out/config.json"));
  const json& qc = cfg["quantization_config"];
  EXPECT_EQ(qc["quant_method"], "compressed-tensors");
  EXPECT_EQ(qc["format"], "nvfp4-pack-quantized");
  EXPECT_EQ(qc["config_groups"]["group_0"]["targets"], json::array({"Linear"}));
  EXPECT_EQ(qc["config_groups"]["group_0"]["weights"]["strategy"], "tensor_group");
  EXPECT_TRUE(qc["config_groups"]["group_0"]["input_activations"].is_null());
  EXPECT_EQ(qc["ignore"], json::array({"lm_head"}));
  EXPECT_EQ(cfg["architectures"][0], "LlamaForCausalLM");  // the rest of config.json kept

  auto ck = Checkpoint::open(d / "out");
  EXPECT_EQ(ck->format(), CheckpointFormat::CompressedTensors);
  EXPECT_EQ(ck->scheme(), QuantScheme::NVFP4A16);
  EXPECT_TRUE(ck->problems().empty());
  EXPECT_EQ(ck->find_linear("lm_head")->scheme, QuantScheme::None);
  // Unquantized tensors copied byte for byte.
  auto in = SafetensorsModel::open(d / "in");
  for (const char* n : {"lm_head.weight", "model.embed_tokens.weight", "model.layers.0.self_attn.o_proj.bias",
                        "model.layers.1.input_layernorm.weight"}) {
    const TensorView& a = in->get(n);
    const TensorView& b = ck->tensors().get(n);
    EXPECT_EQ(a.dtype, b.dtype);
    EXPECT_EQ(a.shape, b.shape);
    EXPECT_EQ(std::vector<uint8_t>(a.data, a.data + a.nbytes), std::vector<uint8_t>(b.data, b.data + b.nbytes)) << n;
  }
  EXPECT_EQ(ck->tensors().find("model.layers.0.self_attn.q_proj.weight"), nullptr);

  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* n : kLinears) {
      const std::string name = p + n;
      const LinearWeights w = ck->load_linear(name);
      const float gs = ct_global_enc(set_amax(t, p, n), DType::BF16);
      EXPECT_EQ(w.weight.global.enc, gs) << name;
      // The file holds exactly what format/quant.h's recipe produces for that global scale.
      const Nvfp4Matrix ref = ct_quantize(t.w.at(name).data(), w.weight.rows, w.weight.cols, DType::BF16, gs);
      EXPECT_EQ(w.weight.codes, ref.codes) << name;
      EXPECT_EQ(w.weight.scales, ref.scales) << name;
      expect_within_quant_bound(t.w.at(name), w.weight, name);
      EXPECT_EQ(w.bias.empty(), name != "model.layers.0.self_attn.o_proj");
    }
  }
}

TEST(Quantize, W4A4NeedsCalibrationAndWritesInputScales) {
  TmpDir d;
  std::filesystem::create_directory(d / "in");
  const Tiny t = write_tiny(d / "in");
  QuantizeOptions opt = w4a4_options(t);
  const std::string missing = "model.layers.1.mlp.down_proj";
  opt.calib_amax.erase(missing);
  try {
    quantize_model(d / "in", d / "out", opt);
    ADD_FAILURE() << "quantized without calibration data";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
  EXPECT_EQ(d.entries(), std::vector<std::string>{"in"}) << "output left behind after a failure";

  opt.calib_amax = calib_for(t);
  quantize_model(d / "in", d / "out", opt);
  auto ck = Checkpoint::open(d / "out");
  EXPECT_EQ(ck->scheme(), QuantScheme::NVFP4);
  const json cfg = json::parse(testing::read_bytes(d / "out/config.json"));
  EXPECT_EQ(cfg["quantization_config"]["config_groups"]["group_0"]["input_activations"]["dynamic"], "local");
  for (const auto& kv : opt.calib_amax) {
    const LinearWeights w = ck->load_linear(kv.first);
    ASSERT_TRUE(w.has_input_scale);
    EXPECT_EQ(w.input_global.enc, ct_global_enc(kv.second, DType::BF16)) << kv.first;
  }
}

TEST(Quantize, ModelOptFusedSetsShareOneWeightScale2) {
  // ModelOpt's export gives q/k/v and gate/up one weight_scale_2 (from the set's largest amax), and vLLM reads
  // one per fused layer: per-shard scales would mis-scale the shards whose amax is not the largest.
  TmpDir d;
  std::filesystem::create_directory(d / "in");
  const Tiny t = write_tiny(d / "in");
  QuantizeOptions opt = w4a4_options(t);
  opt.format = CheckpointFormat::ModelOpt;
  quantize_model(d / "in", d / "out", opt);
  auto ck = Checkpoint::open(d / "out");
  ASSERT_EQ(ck->format(), CheckpointFormat::ModelOpt);
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* n : kLinears) {
      const std::string name = p + n;
      const float amax = set_amax(t, p, n);
      const LinearWeights w = ck->load_linear(name);
      EXPECT_EQ(w.weight.global.dec, modelopt_global_dec(amax)) << name;
      const Nvfp4Matrix ref = modelopt_quantize(t.w.at(name).data(), w.weight.rows, w.weight.cols, amax);
      EXPECT_EQ(w.weight.codes, ref.codes) << name;
      EXPECT_EQ(w.weight.scales, ref.scales) << name;
      expect_within_quant_bound(t.w.at(name), w.weight, name);
    }
  }
}

TEST(Quantize, RefusesToOverwriteUnlessForced) {
  TmpDir d;
  std::filesystem::create_directory(d / "in");
  write_tiny(d / "in");
  std::filesystem::create_directory(d / "out");
  write_text(d / "out/keep", "x");
  QuantizeOptions opt;
  opt.scheme = QuantScheme::NVFP4A16;
  EXPECT_THROW(quantize_model(d / "in", d / "out", opt), UsageError);
  EXPECT_TRUE(std::filesystem::exists(d / "out/keep"));
  EXPECT_THROW(quantize_model(d / "in", d / "in/sub", opt), UsageError);  // inside the input
  EXPECT_THROW(quantize_model(d / "in", d / "in", opt), UsageError);
  opt.force = true;
  quantize_model(d / "in", d / "out", opt);
  EXPECT_FALSE(std::filesystem::exists(d / "out/keep"));
  EXPECT_TRUE(std::filesystem::exists(d / "out/model.safetensors"));
  EXPECT_EQ(d.entries(), (std::vector<std::string>{"in", "out"}));
}

TEST(Quantize, KNotMultipleOf16IsAnErrorUnlessIgnored) {
  TmpDir d;
  std::filesystem::create_directory(d / "in");
  SafetensorsWriter wr;
  std::vector<float> w = testing::bf16_weights(8, 24, 3), ok = testing::bf16_weights(8, 32, 4);
  wr.add_f32("odd.weight", DType::BF16, {8, 24}, w.data());
  wr.add_f32("fine.weight", DType::BF16, {8, 32}, ok.data());
  wr.write(d / "in/model.safetensors");
  write_text(d / "in/config.json", R"({"torch_dtype":"bfloat16"})");
  QuantizeOptions opt;
  opt.scheme = QuantScheme::NVFP4A16;
  expect_quantize_error(d / "in", d / "out", opt, {"odd.weight", "K = 24"});
  EXPECT_EQ(d.entries(), std::vector<std::string>{"in"});
  opt.ignore.push_back("re:od");
  const auto s = quantize_model(d / "in", d / "out", opt);
  EXPECT_EQ(s.quantized, 1u);
}

TEST(Quantize, NonFiniteWeightIsAnError) {
  TmpDir d;
  std::filesystem::create_directory(d / "in");
  SafetensorsWriter wr;
  std::vector<float> w = testing::bf16_weights(8, 32, 3);
  w[77] = NAN;
  wr.add_f32("bad.weight", DType::BF16, {8, 32}, w.data());
  wr.write(d / "in/model.safetensors");
  write_text(d / "in/config.json", R"({"torch_dtype":"bfloat16"})");
  QuantizeOptions opt;
  opt.scheme = QuantScheme::NVFP4A16;
  expect_quantize_error(d / "in", d / "out", opt, {"bad.weight", "element 77"});
  EXPECT_EQ(d.entries(), std::vector<std::string>{"in"});
  // A member of a fused set is checked when the set's amax is taken, before anything is written.
  SafetensorsWriter fused;
  std::vector<float> q = testing::bf16_weights(8, 32, 4), k = testing::bf16_weights(8, 32, 5);
  k[200] = INFINITY;
  fused.add_f32("l.q_proj.weight", DType::BF16, {8, 32}, q.data());
  fused.add_f32("l.k_proj.weight", DType::BF16, {8, 32}, k.data());
  fused.write(d / "in/model.safetensors");
  expect_quantize_error(d / "in", d / "out", opt, {"l.k_proj.weight", "element 200"});
  EXPECT_EQ(d.entries(), std::vector<std::string>{"in"});
}

// A fused set's amax is taken a block of rows at a time (2^20 values): a tensor larger than one block, with its
// largest value and a bad value past the first block, must give the same global scale and element index as a
// whole-tensor pass.
TEST(Quantize, FusedAmaxOverSeveralRowBlocks) {
  TmpDir d;
  std::filesystem::create_directory(d / "in");
  const int64_t rows = 1100, cols = 1024;  // 1024 rows per block: a second block of 76 rows
  std::vector<float> q = testing::bf16_weights(rows, cols, 6), k = testing::bf16_weights(64, cols, 7);
  q[1050 * cols + 3] = -2.5f;  // the set's largest |w|, in the second block
  auto write = [&] {
    SafetensorsWriter wr;
    wr.add_f32("l.q_proj.weight", DType::BF16, {rows, cols}, q.data());
    wr.add_f32("l.k_proj.weight", DType::BF16, {64, cols}, k.data());
    wr.write(d / "in/model.safetensors");
  };
  write();
  write_text(d / "in/config.json", R"({"torch_dtype":"bfloat16"})");
  QuantizeOptions opt;
  opt.scheme = QuantScheme::NVFP4A16;
  quantize_model(d / "in", d / "out", opt);
  auto ck = Checkpoint::open(d / "out");
  const float gs = ct_global_enc(2.5f, DType::BF16);
  EXPECT_EQ(ck->load_linear("l.q_proj").weight.global.enc, gs);
  EXPECT_EQ(ck->load_linear("l.k_proj").weight.global.enc, gs);
  q[1099 * cols + 5] = NAN;
  write();
  expect_quantize_error(d / "in", d / "out2", opt, {"element " + std::to_string(1099 * cols + 5)});
}

TEST(Quantize, ShardedInputGivesShardedOutput) {
  TmpDir d;
  std::filesystem::create_directory(d / "in");
  write_tiny(d / "in", /*sharded=*/true);
  QuantizeOptions opt;
  opt.scheme = QuantScheme::NVFP4A16;
  quantize_model(d / "in", d / "out", opt);
  auto ck = Checkpoint::open(d / "out");
  EXPECT_TRUE(ck->tensors().sharded());
  EXPECT_EQ(ck->tensors().files().size(), 2u);
  EXPECT_EQ(ck->find_linear("model.layers.1.mlp.up_proj")->scheme, QuantScheme::NVFP4A16);
  EXPECT_NE(ck->tensors().get("model.layers.1.mlp.up_proj.weight_packed").file->find("00002-of-00002"),
            std::string::npos);
}

// quantize writes its shards itself (pass-through tensors straight from the mapped input): every output shard
// must be, byte for byte, what SafetensorsWriter writes for the same tensors.
void expect_shards_as_safetensors_writer(const std::string& out, const std::string& scratch) {
  auto m = SafetensorsModel::open(out);
  ASSERT_FALSE(m->files().empty());
  for (const auto& f : m->files()) {
    SCOPED_TRACE(f->path());
    SafetensorsWriter wr;
    for (const auto& [k, v] : f->metadata())
      if (k != "format") wr.set_metadata(k, v);
    for (const TensorView& v : f->tensors()) wr.add(v.name, v.dtype, v.shape, v.data, v.nbytes);
    wr.write(scratch);
    const auto want = read_bytes(scratch), got = read_bytes(f->path());
    EXPECT_GT(got.size(), 8u);
    EXPECT_TRUE(got == want) << "differs from SafetensorsWriter's bytes (sizes " << got.size() << ", "
                             << want.size() << ")";
  }
}

TEST(Quantize, OutputShardsAreSafetensorsWriterBytes) {
  TmpDir d;
  QuantizeOptions opt = quantize_sharded_tiny(d);
  expect_shards_as_safetensors_writer(d / "ct", d / "scratch.safetensors");
  QuantizeOptions conv;
  conv.format = CheckpointFormat::ModelOpt;
  quantize_model(d / "ct", d / "mo", conv);
  expect_shards_as_safetensors_writer(d / "mo", d / "scratch.safetensors");
  opt.format = CheckpointFormat::ModelOpt;
  quantize_model(d / "in", d / "mo2", opt);
  expect_shards_as_safetensors_writer(d / "mo2", d / "scratch.safetensors");
}

TEST(Convert, CompressedTensorsToModelOptIsByteForByte) {
  TmpDir d;
  std::filesystem::create_directory(d / "in");
  const Tiny t = write_tiny(d / "in");
  QuantizeOptions opt = w4a4_options(t);
  quantize_model(d / "in", d / "ct", opt);
  QuantizeOptions conv;
  conv.format = CheckpointFormat::ModelOpt;
  quantize_model(d / "ct", d / "mo", conv);
  auto ct = Checkpoint::open(d / "ct");
  auto mo = Checkpoint::open(d / "mo");
  EXPECT_EQ(mo->format(), CheckpointFormat::ModelOpt);
  EXPECT_EQ(mo->scheme(), QuantScheme::NVFP4);
  EXPECT_TRUE(std::filesystem::exists(d / "mo/hf_quant_config.json"));
  EXPECT_EQ(mo->linears().size(), ct->linears().size());
  for (const auto& kv : t.w) {
    const std::string& m = kv.first;
    const TensorView& a = ct->tensors().get(m + ".weight_packed");
    const TensorView& b = mo->tensors().get(m + ".weight");
    EXPECT_EQ(std::vector<uint8_t>(a.data, a.data + a.nbytes), std::vector<uint8_t>(b.data, b.data + b.nbytes)) << m;
    const TensorView& sa = ct->tensors().get(m + ".weight_scale");
    const TensorView& sb = mo->tensors().get(m + ".weight_scale");
    EXPECT_EQ(std::vector<uint8_t>(sa.data, sa.data + sa.nbytes), std::vector<uint8_t>(sb.data, sb.data + sb.nbytes));
    // The scalars change direction once: f32(1/x).
    const float gs = ct->load_f32(m + ".weight_global_scale")[0];
    EXPECT_EQ(mo->load_f32(m + ".weight_scale_2")[0], 1.0f / gs);
    EXPECT_EQ(mo->tensors().get(m + ".weight_scale_2").shape, std::vector<int64_t>{});
    EXPECT_EQ(mo->load_f32(m + ".input_scale")[0], 1.0f / ct->load_f32(m + ".input_global_scale")[0]);
  }
  // The unquantized lm_head stays excluded.
  const json hq = json::parse(testing::read_bytes(d / "mo/hf_quant_config.json"));
  EXPECT_EQ(hq["quantization"]["exclude_modules"], json::array({"lm_head"}));
  // Converting to the same format, or changing the scheme, is refused.
  EXPECT_THROW(quantize_model(d / "mo", d / "mo2", conv), UsageError);
  QuantizeOptions to_ct;
  to_ct.scheme = QuantScheme::NVFP4A16;
  EXPECT_THROW(quantize_model(d / "mo", d / "ct2", to_ct), UsageError);
  to_ct.scheme = QuantScheme::None;
  quantize_model(d / "mo", d / "ct2", to_ct);
  auto back = Checkpoint::open(d / "ct2");
  const LinearWeights w0 = ct->load_linear("model.layers.0.mlp.up_proj");
  const LinearWeights w1 = back->load_linear("model.layers.0.mlp.up_proj");
  EXPECT_EQ(w0.weight.codes, w1.weight.codes);
  EXPECT_EQ(w0.weight.scales, w1.weight.scales);
  EXPECT_EQ(w1.weight.global.enc, 1.0f / (1.0f / w0.weight.global.enc));
}

// A module whose tensors lie in two shards converts into the shard of its codes; every input tensor is one
// progress step.
TEST(Convert, ModuleSplitAcrossShards) {
  TmpDir d;
  quantize_sharded_tiny(d);
  // Move two tensors of layer 0's up_proj (its codes stay in shard 1) to shard 2.
  const std::string m = "model.layers.0.mlp.up_proj";
  const std::set<std::string> moved = {m + ".weight_scale", m + ".input_global_scale"};
  std::filesystem::create_directory(d / "split");
  {
    auto ct = SafetensorsModel::open(d / "ct");
    ASSERT_EQ(ct->files().size(), 2u);
    SafetensorsWriter a, b;
    json idx;
    idx["metadata"] = {{"total_size", 0}};
    for (const auto& f : ct->files()) {
      const bool first = f->path().find("00001-of") != std::string::npos;
      for (const TensorView& v : f->tensors()) {
        const bool to_b = !first || moved.count(v.name);
        (to_b ? b : a).add(v.name, v.dtype, v.shape, v.data, v.nbytes);
        idx["weight_map"][v.name] = to_b ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors";
      }
    }
    a.write(d / "split/model-00001-of-00002.safetensors");
    b.write(d / "split/model-00002-of-00002.safetensors");
    write_text(d / "split/model.safetensors.index.json", idx.dump());
    const auto cfg = read_bytes(d / "ct/config.json");
    write_text(d / "split/config.json", std::string(cfg.begin(), cfg.end()));
  }
  size_t steps = 0, last = 0;
  Reporter rep;
  rep.progress = [&](const ProgressEvent& e) {
    ++steps;
    EXPECT_EQ(e.done, last + 1);
    last = e.done;
  };
  QuantizeOptions conv;
  conv.format = CheckpointFormat::ModelOpt;
  quantize_model(d / "split", d / "mo", conv, rep);
  EXPECT_EQ(steps, SafetensorsModel::open(d / "split")->names().size());
  auto ct = Checkpoint::open(d / "ct");
  auto mo = Checkpoint::open(d / "mo");
  EXPECT_TRUE(mo->problems().empty());
  EXPECT_NE(mo->tensors().get(m + ".weight_scale").file->find("00001-of-00002"), std::string::npos);
  const LinearWeights w0 = ct->load_linear(m), w1 = mo->load_linear(m);
  EXPECT_EQ(w0.weight.codes, w1.weight.codes);
  EXPECT_EQ(w0.weight.scales, w1.weight.scales);
  EXPECT_EQ(w1.input_global.dec, 1.0f / w0.input_global.enc);
  expect_shards_as_safetensors_writer(d / "mo", d / "scratch.safetensors");
}

TEST(Quantize, ModelOptW4A16IsRefused) {
  TmpDir d;
  std::filesystem::create_directory(d / "in");
  write_tiny(d / "in");
  QuantizeOptions opt;
  opt.scheme = QuantScheme::NVFP4A16;
  opt.format = CheckpointFormat::ModelOpt;
  EXPECT_THROW(quantize_model(d / "in", d / "out", opt), UsageError);
  EXPECT_EQ(d.entries(), std::vector<std::string>{"in"});
}

}  // namespace
}  // namespace nvfp4::io
