// HF checkpoint loading: compressed-tensors and ModelOpt NVFP4 to the canonical LinearWeights, config
// parsing, module matching, the older-writer NaN/inf cases, and each malformed-layer error.
#include "io/checkpoint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "io_test_util.h"

namespace nvfp4::io {
namespace {

using testing::add_ct_linear;
using testing::kCtConfigW4A16;
using testing::kCtConfigW4A4;
using testing::TmpDir;
using testing::write_text;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_has(const std::string& msg, const std::vector<std::string>& parts) {
  ASSERT_FALSE(msg.empty()) << "expected an error";
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

struct CtModel {
  Nvfp4Matrix q, k;
};

CtModel write_ct_model(const TmpDir& d, bool w4a4) {
  SafetensorsWriter wr;
  CtModel m;
  m.q = add_ct_linear(wr, "model.layers.0.self_attn.q_proj", 32, 64, 1, w4a4, /*bias=*/true);
  m.k = add_ct_linear(wr, "model.layers.0.self_attn.k_proj", 16, 64, 2, w4a4, false);
  std::vector<float> lm(100 * 64, 0.5f), norm(64, 1.0f);
  wr.add_f32("lm_head.weight", DType::BF16, {100, 64}, lm.data());
  wr.add_f32("model.embed_tokens.weight", DType::BF16, {100, 64}, lm.data());
  wr.add_f32("model.norm.weight", DType::BF16, {64}, norm.data());
  wr.write(d / "model.safetensors");
  write_text(d / "config.json", w4a4 ? kCtConfigW4A4 : kCtConfigW4A16);
  return m;
}

TEST(Checkpoint, CompressedTensorsW4A4) {
  TmpDir d;
  const CtModel m = write_ct_model(d, true);
  auto ck = Checkpoint::open(d.path);
  EXPECT_EQ(ck->format(), CheckpointFormat::CompressedTensors);
  EXPECT_EQ(ck->scheme(), QuantScheme::NVFP4);
  EXPECT_EQ(ck->config().architecture, "LlamaForCausalLM");
  EXPECT_EQ(ck->config().dtype, DType::BF16);
  EXPECT_EQ(ck->config().head_dim, 16);
  ASSERT_EQ(ck->linears().size(), 3u);  // lm_head + 2 (the embedding is not a linear)
  EXPECT_EQ(ck->linears()[0].name, "lm_head");
  EXPECT_EQ(ck->linears()[0].scheme, QuantScheme::None);
  const LinearInfo* li = ck->find_linear("model.layers.0.self_attn.q_proj");
  ASSERT_NE(li, nullptr);
  EXPECT_EQ(li->scheme, QuantScheme::NVFP4);
  EXPECT_EQ(li->out_features, 32);
  EXPECT_EQ(li->in_features, 64);
  EXPECT_TRUE(li->has_bias);
  EXPECT_TRUE(ck->problems().empty()) << ck->problems()[0].message;

  const LinearWeights w = ck->load_linear("model.layers.0.self_attn.q_proj");
  EXPECT_EQ(w.weight.rows, 32);
  EXPECT_EQ(w.weight.cols, 64);
  EXPECT_EQ(w.weight.codes, m.q.codes);
  EXPECT_EQ(w.weight.scales, m.q.scales);
  // compressed-tensors stores the divisor form: kept exactly, dec = f32(1/enc).
  EXPECT_EQ(w.weight.global.enc, m.q.global.enc);
  EXPECT_EQ(w.weight.global.dec, 1.0f / m.q.global.enc);
  EXPECT_TRUE(w.has_input_scale);
  EXPECT_EQ(w.input_global.enc, ct_global_enc(3.0f, DType::BF16));
  ASSERT_EQ(w.bias.size(), 32u);
  EXPECT_EQ(w.bias[0], bf16_to_f32(f32_to_bf16(0.01f * -16)));
  EXPECT_THROW(ck->load_linear("lm_head"), Error);   // not quantized
  EXPECT_THROW(ck->load_linear("nothing"), Error);
  EXPECT_EQ(ck->load_f32("model.norm.weight"), std::vector<float>(64, 1.0f));
}

TEST(Checkpoint, CompressedTensorsW4A16) {
  TmpDir d;
  write_ct_model(d, false);
  auto ck = Checkpoint::open(d.path);
  EXPECT_EQ(ck->scheme(), QuantScheme::NVFP4A16);
  const LinearWeights w = ck->load_linear("model.layers.0.self_attn.k_proj");
  EXPECT_FALSE(w.has_input_scale);
  EXPECT_TRUE(w.bias.empty());
  EXPECT_EQ(ck->find_linear("model.layers.0.self_attn.k_proj")->scheme, QuantScheme::NVFP4A16);
}

TEST(Checkpoint, SingleFileWithoutConfigInfersFormat) {
  TmpDir d;
  write_ct_model(d, true);
  std::filesystem::remove(d / "config.json");
  EXPECT_THROW(Checkpoint::open(d.path), Error);  // a directory needs config.json
  expect_has(error_of([&] { Checkpoint::open(d.path); }), {"config.json", d.path});
  auto ck = Checkpoint::open(d / "model.safetensors");
  EXPECT_EQ(ck->format(), CheckpointFormat::CompressedTensors);
  EXPECT_EQ(ck->scheme(), QuantScheme::NVFP4);
  EXPECT_FALSE(ck->has_config());
}

void write_modelopt(const TmpDir& d, const Nvfp4Matrix& q, bool hf_quant_config) {
  SafetensorsWriter wr;
  const int64_t n = q.rows, k = q.cols;
  wr.add("model.layers.0.mlp.down_proj.weight", DType::U8, {n, k / 2}, q.codes.data(), q.codes.size());
  wr.add("model.layers.0.mlp.down_proj.weight_scale", DType::F8_E4M3, {n, k / 16}, q.scales.data(), q.scales.size());
  wr.add("model.layers.0.mlp.down_proj.weight_scale_2", DType::F32, {}, &q.global.dec, 4);
  const float in_dec = 2.0f / 2688.0f;
  wr.add("model.layers.0.mlp.down_proj.input_scale", DType::F32, {}, &in_dec, 4);
  wr.write(d / "model.safetensors");
  if (hf_quant_config) {
    write_text(d / "config.json", R"({"architectures":["LlamaForCausalLM"],"torch_dtype":"float16"})");
    write_text(d / "hf_quant_config.json",
               R"({"producer":{"name":"modelopt"},"quantization":{"quant_algo":"NVFP4","group_size":16,"exclude_modules":["lm_head","model.layers.*.mlp.gate*"]}})");
  } else {
    write_text(d / "config.json",
               R"({"torch_dtype":"bfloat16","quantization_config":{"quant_method":"modelopt","quant_algo":"NVFP4","group_size":16,"exclude_modules":["lm_head"]}})");
  }
}

TEST(Checkpoint, ModelOpt) {
  for (bool hq : {true, false}) {
    TmpDir d;
    const std::vector<float> w = testing::bf16_weights(16, 32, 5);
    const Nvfp4Matrix q = modelopt_quantize(w.data(), 16, 32);
    write_modelopt(d, q, hq);
    auto ck = Checkpoint::open(d.path);
    EXPECT_EQ(ck->format(), CheckpointFormat::ModelOpt);
    EXPECT_EQ(ck->scheme(), QuantScheme::NVFP4);
    EXPECT_EQ(ck->config().dtype, hq ? DType::F16 : DType::BF16);
    const LinearWeights lw = ck->load_linear("model.layers.0.mlp.down_proj");
    EXPECT_EQ(lw.weight.codes, q.codes);
    EXPECT_EQ(lw.weight.scales, q.scales);
    // ModelOpt stores the multiplier form: kept exactly, enc = f32(1/dec).
    EXPECT_EQ(lw.weight.global.dec, q.global.dec);
    EXPECT_EQ(lw.weight.global.enc, 1.0f / q.global.dec);
    EXPECT_TRUE(lw.has_input_scale);
    EXPECT_EQ(lw.input_global.dec, 2.0f / 2688.0f);
    EXPECT_EQ(lw.input_global.enc, 1.0f / (2.0f / 2688.0f));
    if (hq) {
      EXPECT_TRUE(ck->quant().ignored("model.layers.3.mlp.gate_proj"));
      EXPECT_FALSE(ck->quant().ignored("model.layers.3.mlp.up_proj"));
    }
  }
}

// Writes a CT layer whose tensors are given explicitly (for the malformed cases).
struct RawLayer {
  std::vector<int64_t> packed_shape = {8, 16};
  DType scale_dtype = DType::F8_E4M3;
  std::vector<int64_t> scale_shape = {8, 2};
  uint8_t scale_byte = 0x38;  // 1.0
  float gs = 448.0f;
  bool with_scale = true;
  bool with_global = true;
};

std::string write_raw_layer(const TmpDir& d, const RawLayer& r) {
  SafetensorsWriter wr;
  int64_t pn = 1, sn = 1;
  for (auto v : r.packed_shape) pn *= v;
  for (auto v : r.scale_shape) sn *= v;
  wr.add("layer.weight_packed", DType::U8, r.packed_shape, std::vector<uint8_t>(pn, 0x21));
  if (r.with_scale)
    wr.add("layer.weight_scale", r.scale_dtype, r.scale_shape,
           std::vector<uint8_t>(static_cast<size_t>(sn * dtype_size(r.scale_dtype)), r.scale_byte));
  if (r.with_global) wr.add("layer.weight_global_scale", DType::F32, {1}, &r.gs, 4);
  wr.write(d / "model.safetensors");
  write_text(d / "config.json", kCtConfigW4A16);
  return d.path;
}

TEST(CheckpointErrors, MissingWeightScale) {
  TmpDir d;
  RawLayer r;
  r.with_scale = false;
  auto ck = Checkpoint::open(write_raw_layer(d, r));
  ASSERT_FALSE(ck->problems().empty());
  expect_has(error_of([&] { ck->load_linear("layer"); }), {"layer.weight_scale", d.path});
}

TEST(CheckpointErrors, MissingGlobalScale) {
  TmpDir d;
  RawLayer r;
  r.with_global = false;
  auto ck = Checkpoint::open(write_raw_layer(d, r));
  expect_has(error_of([&] { ck->load_linear("layer"); }), {"layer.weight_global_scale"});
}

TEST(CheckpointErrors, KNotMultipleOf16) {
  TmpDir d;
  RawLayer r;
  r.packed_shape = {8, 12};  // K = 24
  r.scale_shape = {8, 1};
  auto ck = Checkpoint::open(write_raw_layer(d, r));
  expect_has(error_of([&] { ck->load_linear("layer"); }),
             {"layer.weight_packed", "model.safetensors", "K = 24", "multiple of 16"});
}

TEST(CheckpointErrors, WrongScaleShape) {
  TmpDir d;
  RawLayer r;
  r.scale_shape = {8, 4};
  auto ck = Checkpoint::open(write_raw_layer(d, r));
  EXPECT_FALSE(ck->problems().empty());
  expect_has(error_of([&] { ck->load_linear("layer"); }), {"layer.weight_scale", "[8, 4]", "expected [8, 2]"});
}

TEST(CheckpointErrors, WrongScaleDtype) {
  TmpDir d;
  RawLayer r;
  r.scale_dtype = DType::BF16;
  auto ck = Checkpoint::open(write_raw_layer(d, r));
  expect_has(error_of([&] { ck->load_linear("layer"); }), {"layer.weight_scale", "BF16", "expected F8_E4M3"});
}

TEST(CheckpointErrors, NaNScalesWithFiniteGlobalAreAnError) {
  TmpDir d;
  RawLayer r;
  r.scale_byte = 0x7F;
  auto ck = Checkpoint::open(write_raw_layer(d, r));
  ASSERT_FALSE(ck->problems().empty());
  EXPECT_NE(ck->problems()[0].message.find("NaN"), std::string::npos);
  expect_has(error_of([&] { ck->load_linear("layer"); }), {"layer.weight_scale", "16 NaN block scales"});
}

TEST(CheckpointErrors, OlderWriterNaNScalesAndInfGlobalLoadAsZeros) {
  TmpDir d;
  RawLayer r;
  r.scale_byte = 0x7F;
  r.gs = INFINITY;
  auto ck = Checkpoint::open(write_raw_layer(d, r));
  EXPECT_GE(ck->problems().size(), 2u);  // inf global + NaN scales
  std::vector<std::string> warnings;
  Reporter rep;
  rep.log = [&](LogLevel l, const std::string& m) {
    if (l == LogLevel::Warning) warnings.push_back(m);
  };
  const LinearWeights w = ck->load_linear("layer", rep);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("layer"), std::string::npos);
  EXPECT_EQ(w.weight.scales, std::vector<uint8_t>(16, 0));
  EXPECT_EQ(w.weight.global.dec, 0.0f);
  std::vector<float> out(8 * 32, -1.0f);
  dequantize(w.weight, out.data());
  for (float v : out) EXPECT_EQ(v, 0.0f);
}

// Checkpoint::open (which records problems for `inspect`) and load_linear (which throws) validate a layer
// with one function: the error load_linear throws is the first problem open recorded, word for word, and it
// names the tensor and the file on one line.
TEST(CheckpointErrors, OpenAndLoadReportTheSameProblem) {
  struct Case {
    const char* what;
    RawLayer r;
    const char* tensor;
  };
  std::vector<Case> cases;
  auto add = [&](const char* what, const char* tensor, const std::function<void(RawLayer&)>& edit) {
    Case c{what, RawLayer{}, tensor};
    edit(c.r);
    cases.push_back(c);
  };
  add("no block scales", "layer.weight_scale", [](RawLayer& r) { r.with_scale = false; });
  add("no global scale", "layer.weight_global_scale", [](RawLayer& r) { r.with_global = false; });
  add("K = 24", "layer.weight_packed", [](RawLayer& r) { r.packed_shape = {8, 12}; r.scale_shape = {8, 1}; });
  add("1-D codes", "layer.weight_packed", [](RawLayer& r) { r.packed_shape = {128}; });
  add("scale shape", "layer.weight_scale", [](RawLayer& r) { r.scale_shape = {8, 4}; });
  add("scale dtype", "layer.weight_scale", [](RawLayer& r) { r.scale_dtype = DType::BF16; });
  add("NaN scales", "layer.weight_scale", [](RawLayer& r) { r.scale_byte = 0x7F; });
  add("zero global", "layer.weight_global_scale", [](RawLayer& r) { r.gs = 0.0f; });
  add("NaN global", "layer.weight_global_scale", [](RawLayer& r) { r.gs = NAN; });
  add("negative global", "layer.weight_global_scale", [](RawLayer& r) { r.gs = -1.0f; });
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    TmpDir d;
    auto ck = Checkpoint::open(write_raw_layer(d, c.r));
    ASSERT_FALSE(ck->problems().empty());
    const std::string err = error_of([&] { ck->load_linear("layer"); });
    expect_has(err, {std::string("'") + c.tensor + "'", d / "model.safetensors"});
    EXPECT_EQ(err, ck->problems()[0].message);
    EXPECT_EQ(ck->problems()[0].tensor, c.tensor);
  }
  // An older writer's all-zero layer is reported at open and still loads.
  TmpDir d;
  RawLayer r;
  r.gs = INFINITY;
  auto ck = Checkpoint::open(write_raw_layer(d, r));
  ASSERT_EQ(ck->problems().size(), 1u);
  expect_has(ck->problems()[0].message, {"'layer.weight_global_scale'", d / "model.safetensors", "all-zero"});
  EXPECT_NO_THROW(ck->load_linear("layer"));
}

TEST(CheckpointErrors, BadConfigs) {
  TmpDir d;
  write_raw_layer(d, RawLayer{});
  write_text(d / "config.json", "{not json");
  expect_has(error_of([&] { Checkpoint::open(d.path); }), {"config.json", "not valid JSON"});
  write_text(d / "config.json", R"({"quantization_config":{"quant_method":"gptq"}})");
  expect_has(error_of([&] { Checkpoint::open(d.path); }), {"config.json", "gptq"});
  write_text(d / "config.json",
             R"({"quantization_config":{"quant_method":"compressed-tensors","format":"float-quantized","config_groups":{"group_0":{}}}})");
  expect_has(error_of([&] { Checkpoint::open(d.path); }), {"float-quantized"});
  write_text(d / "config.json", R"({"torch_dtype":"int8"})");
  expect_has(error_of([&] { Checkpoint::open(d.path); }), {"int8"});
}

TEST(ModulePatterns, CompressedTensorsRules) {
  // "re:" is anchored at the start only (Python re.match).
  EXPECT_TRUE(module_pattern_matches("re:.*mlp.gate.*", "model.layers.0.mlp.gate_proj", "Linear"));
  EXPECT_TRUE(module_pattern_matches("re:model.layers.1", "model.layers.10.mlp.up_proj", "Linear"));
  EXPECT_FALSE(module_pattern_matches("re:layers", "model.layers.0.mlp.up_proj", "Linear"));
  EXPECT_TRUE(module_pattern_matches("Linear", "model.layers.0.mlp.up_proj", "Linear"));
  EXPECT_TRUE(module_pattern_matches("lm_head", "lm_head", "Linear"));
  EXPECT_FALSE(module_pattern_matches("lm_head", "model.lm_head_x", "Linear"));
  EXPECT_TRUE(module_pattern_matches("model.layers.*.mlp.gate*", "model.layers.2.mlp.gate_proj", "Linear"));
  EXPECT_THROW(module_pattern_matches("re:(", "x", "Linear"), Error);
  QuantConfig q;
  q.format = CheckpointFormat::CompressedTensors;
  q.targets = {"Linear"};
  q.ignore = {"lm_head", "re:.*mlp.gate.*"};
  EXPECT_TRUE(q.quantizes("model.layers.0.mlp.up_proj"));
  EXPECT_FALSE(q.quantizes("model.layers.0.mlp.gate_proj"));
  EXPECT_FALSE(q.quantizes("lm_head"));
}

TEST(FusedSets, Keys) {
  EXPECT_EQ(fused_set_key("model.layers.3.self_attn.q_proj"), fused_set_key("model.layers.3.self_attn.v_proj"));
  EXPECT_NE(fused_set_key("model.layers.3.self_attn.q_proj"), fused_set_key("model.layers.4.self_attn.q_proj"));
  EXPECT_EQ(fused_set_key("model.layers.3.mlp.gate_proj"), fused_set_key("model.layers.3.mlp.up_proj"));
  EXPECT_NE(fused_set_key("model.layers.3.mlp.gate_proj"), fused_set_key("model.layers.3.self_attn.q_proj"));
  EXPECT_EQ(fused_set_key("model.layers.3.block_sparse_moe.experts.0.w1"),
            fused_set_key("model.layers.3.block_sparse_moe.experts.0.w3"));
  EXPECT_EQ(fused_set_key("model.layers.3.mlp.down_proj"), "");
  EXPECT_EQ(fused_set_key("model.layers.3.self_attn.o_proj"), "");
}

TEST(Calibration, ReadWriteAndErrors) {
  TmpDir d;
  write_calib_amax(d / "c.json", {{"a", 1.5f}, {"b", 0.0f}});
  const auto m = read_calib_amax(d / "c.json");
  EXPECT_EQ(m.at("a"), 1.5f);
  EXPECT_EQ(m.at("b"), 0.0f);
  write_text(d / "bad.json", R"({"a": "x"})");
  expect_has(error_of([&] { read_calib_amax(d / "bad.json"); }), {"bad.json", "'a'"});
  write_text(d / "bad.json", R"({"a": -1})");
  expect_has(error_of([&] { read_calib_amax(d / "bad.json"); }), {"bad.json", "'a'", ">= 0"});
  write_text(d / "bad.json", R"([1])");
  EXPECT_THROW(read_calib_amax(d / "bad.json"), Error);
  EXPECT_THROW(read_calib_amax(d / "missing.json"), Error);
}

}  // namespace
}  // namespace nvfp4::io
