#include "model/gguf_import.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/error.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"

namespace nvfp4::model {

namespace fs = std::filesystem;

void unpermute_rows(const float* in, int64_t rows, int64_t cols, int64_t n_head, float* out) {
  if (n_head <= 0 || rows % n_head != 0 || (rows / n_head) % 2 != 0) {
    fail("unpermute_rows: " + std::to_string(rows) + " rows do not split into " + std::to_string(n_head) +
         " heads of an even size");
  }
  const int64_t hd = rows / n_head, half = hd / 2;
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < half; ++j) {
        const int64_t dst = h * hd + i * half + j;  // HF (h, i, j)
        const int64_t src = h * hd + j * 2 + i;     // GGUF (h, j, i)
        std::copy(in + src * cols, in + (src + 1) * cols, out + dst * cols);
      }
}

namespace {

const std::vector<std::string>& str_array(const io::GgufFile& f, const std::string& key) {
  const io::GgufValue& v = f.get(key);
  if (v.type != io::GgufValueType::ARRAY || v.elem != io::GgufValueType::STRING) {
    fail(f.path() + ": metadata '" + key + "' is not an array of strings");
  }
  return v.strs;
}

std::string hf_name(const std::string& g, int64_t n_layers) {
  if (g == "token_embd.weight") return "model.embed_tokens.weight";
  if (g == "output_norm.weight") return "model.norm.weight";
  if (g == "output.weight") return "lm_head.weight";
  if (g.rfind("blk.", 0) != 0) return "";
  const size_t dot = g.find('.', 4);
  if (dot == std::string::npos) return "";
  const std::string idx = g.substr(4, dot - 4);
  if (idx.empty() || idx.find_first_not_of("0123456789") != std::string::npos || std::stoll(idx) >= n_layers) return "";
  const std::string rest = g.substr(dot + 1);
  static const std::pair<const char*, const char*> map[] = {
      {"attn_norm.weight", "input_layernorm.weight"},     {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},       {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},       {"attn_output.weight", "self_attn.o_proj.weight"},
      {"attn_q.bias", "self_attn.q_proj.bias"},           {"attn_k.bias", "self_attn.k_proj.bias"},
      {"attn_v.bias", "self_attn.v_proj.bias"},           {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},            {"ffn_down.weight", "mlp.down_proj.weight"},
  };
  for (const auto& [a, b] : map)
    if (rest == a) return "model.layers." + idx + "." + b;
  return "";
}

}  // namespace

std::string gguf_tokenizer_json(const io::GgufFile& f) {
  const std::string model = f.get_string("tokenizer.ggml.model", "");
  if (model != "gpt2") {
    fail(f.path() + ": tokenizer.ggml.model is '" + model + "'; only byte-level BPE ('gpt2') vocabularies are supported");
  }
  const auto& tokens = str_array(f, "tokenizer.ggml.tokens");
  const auto& merges = str_array(f, "tokenizer.ggml.merges");
  std::vector<int64_t> types(tokens.size(), 1);
  if (f.has("tokenizer.ggml.token_type")) {
    const auto& tv = f.get("tokenizer.ggml.token_type");
    if (tv.ints.size() == tokens.size()) types = tv.ints;
  }
  const std::string pre = f.get_string("tokenizer.ggml.pre", "default");
  nlohmann::ordered_json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  nlohmann::ordered_json added = nlohmann::ordered_json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    // llama.cpp token types: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
    if (types[i] == 3 || types[i] == 4) {
      added.push_back({{"id", i}, {"content", tokens[i]}, {"single_word", false}, {"lstrip", false},
                       {"rstrip", false}, {"normalized", types[i] == 4}, {"special", types[i] == 3}});
    }
  }
  j["added_tokens"] = added;
  j["normalizer"] = nullptr;
  nlohmann::ordered_json bytelevel = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                                      {"use_regex", true}};
  if (pre == "smollm" || pre == "starcoder" || pre == "refact") {
    j["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, bytelevel}}};
  } else if (pre == "llama-bpe" || pre == "llama3" || pre == "qwen2") {
    const std::string digits = pre == "qwen2" ? "\\p{N}" : "\\p{N}{1,3}";
    const std::string pat = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" + digits +
                            "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    nlohmann::ordered_json bl = bytelevel;
    bl["use_regex"] = false;
    j["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers",
                           {{{"type", "Split"}, {"pattern", {{"Regex", pat}}}, {"behavior", "Isolated"}, {"invert", false}},
                            bl}}};
  } else if (pre == "default" || pre == "gpt-2" || pre == "gpt2") {
    j["pre_tokenizer"] = bytelevel;
  } else {
    fail(f.path() + ": tokenizer.ggml.pre '" + pre + "' is not supported (expected smollm, starcoder, gpt-2, llama-bpe or qwen2)");
  }
  j["post_processor"] = nullptr;
  if (f.get_bool("tokenizer.ggml.add_bos_token", false) && f.has("tokenizer.ggml.bos_token_id")) {
    const uint64_t b = f.get_uint("tokenizer.ggml.bos_token_id");
    if (b < tokens.size()) {
      j["post_processor"] = {{"type", "TemplateProcessing"},
                             {"single", {{{"SpecialToken", {{"id", tokens[b]}, {"type_id", 0}}}},
                                         {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                             {"pair", nlohmann::ordered_json::array()},
                             {"special_tokens", nlohmann::ordered_json::object()}};
    }
  }
  j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
  j["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
                {"ignore_merges", false}, {"vocab", vocab}, {"merges", merges}};
  return j.dump(1) + "\n";
}

ImportSummary import_gguf(const std::string& gguf_path, const std::string& out_dir_arg, bool overwrite,
                          const Reporter& rep) {
  // "dir/" and "dir" are the same output (the temporary "<dir>.partial" must be a sibling, not a child).
  std::string out_dir = out_dir_arg;
  while (out_dir.size() > 1 && out_dir.back() == '/') out_dir.pop_back();
  if (out_dir.empty() || out_dir == "." || out_dir == "..") throw UsageError("import-gguf: output directory '" + out_dir_arg + "' is not a new directory name");
  if (fs::exists(out_dir) && !overwrite) {
    throw UsageError(out_dir + ": already exists (use --force to replace it)");
  }
  auto f = io::GgufFile::open(gguf_path);
  ImportSummary s;
  s.architecture = f->get_string("general.architecture", "");
  const std::string& a = s.architecture;
  if (a != "llama" && a != "qwen2") {
    fail(gguf_path + ": general.architecture is '" + a + "', expected llama or qwen2");
  }
  const int64_t hidden = static_cast<int64_t>(f->get_uint(a + ".embedding_length"));
  const int64_t inter = static_cast<int64_t>(f->get_uint(a + ".feed_forward_length"));
  const int64_t layers = static_cast<int64_t>(f->get_uint(a + ".block_count"));
  const int64_t heads = static_cast<int64_t>(f->get_uint(a + ".attention.head_count"));
  const int64_t kv_heads = static_cast<int64_t>(f->get_uint(a + ".attention.head_count_kv", static_cast<uint64_t>(heads)));
  const int64_t ctx = static_cast<int64_t>(f->get_uint(a + ".context_length", 2048));
  const double theta = f->get_float(a + ".rope.freq_base", 10000.0);
  const double eps = f->get_float(a + ".attention.layer_norm_rms_epsilon", 1e-6);
  if (heads <= 0 || kv_heads <= 0 || hidden % heads != 0) fail(gguf_path + ": inconsistent head counts");
  const int64_t head_dim = static_cast<int64_t>(f->get_uint(a + ".attention.key_length", static_cast<uint64_t>(hidden / heads)));
  const auto& tokens = str_array(*f, "tokenizer.ggml.tokens");
  s.vocab = static_cast<int64_t>(tokens.size());
  s.pretokenizer = f->get_string("tokenizer.ggml.pre", "default");
  const bool tied = f->find("output.weight") == nullptr;
  if (f->find("rope_freqs.weight")) {
    rep.warn(gguf_path + ": rope_freqs.weight (Llama 3.1 rope scaling factors) is not imported; set rope_scaling in config.json");
  }

  const std::string tmp = out_dir + ".partial";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  try {
    io::SafetensorsWriter w;
    const auto& ts = f->tensors();
    int64_t done = 0;
    for (const auto& t : ts) {
      ++done;
      const std::string name = hf_name(t.name, layers);
      if (name.empty()) {
        if (t.name != "rope_freqs.weight") rep.warn(gguf_path + ": tensor '" + t.name + "' is not a Llama tensor; skipped");
        continue;
      }
      std::vector<float> v = f->dequantize(t);
      std::vector<int64_t> shape = t.shape();
      const bool is_q = name.find("self_attn.q_proj.") != std::string::npos;
      const bool is_k = name.find("self_attn.k_proj.") != std::string::npos;
      if (a == "llama" && (is_q || is_k)) {
        const int64_t rows = shape[0], cols = shape.size() > 1 ? shape[1] : 1;
        std::vector<float> u(v.size());
        unpermute_rows(v.data(), rows, cols, is_q ? heads : kv_heads, u.data());
        v.swap(u);
      }
      s.parameters += static_cast<int64_t>(v.size());
      ++s.tensors;
      w.add_f32(name, DType::BF16, shape, v.data());
      rep.step(name + " (" + io::ggml_type_name(t.type) + ")", static_cast<size_t>(done), ts.size());
    }
    w.write(tmp + "/model.safetensors");

    const int64_t bos = static_cast<int64_t>(f->get_uint("tokenizer.ggml.bos_token_id", 0));
    const int64_t eos = static_cast<int64_t>(f->get_uint("tokenizer.ggml.eos_token_id", 0));
    nlohmann::ordered_json cfg;
    cfg["architectures"] = {a == "qwen2" ? "Qwen2ForCausalLM" : "LlamaForCausalLM"};
    cfg["model_type"] = a;
    cfg["hidden_size"] = hidden;
    cfg["intermediate_size"] = inter;
    cfg["num_hidden_layers"] = layers;
    cfg["num_attention_heads"] = heads;
    cfg["num_key_value_heads"] = kv_heads;
    cfg["head_dim"] = head_dim;
    cfg["vocab_size"] = s.vocab;
    cfg["max_position_embeddings"] = ctx;
    cfg["rms_norm_eps"] = eps;
    cfg["rope_theta"] = theta;
    cfg["rope_scaling"] = nullptr;
    if (f->get_string(a + ".rope.scaling.type", "") == "linear") {
      cfg["rope_scaling"] = {{"type", "linear"}, {"factor", f->get_float(a + ".rope.scaling.factor", 1.0)}};
    }
    cfg["hidden_act"] = "silu";
    cfg["attention_bias"] = a == "qwen2";
    cfg["mlp_bias"] = false;
    cfg["tie_word_embeddings"] = tied;
    cfg["torch_dtype"] = "bfloat16";
    cfg["bos_token_id"] = bos;
    cfg["eos_token_id"] = eos;
    cfg["transformers_version"] = "4.46.0";
    cfg["nvfp4_source"] = fs::path(gguf_path).filename().string();
    io::write_text_file_atomic(tmp + "/config.json", cfg.dump(2) + "\n");

    nlohmann::ordered_json gen = {{"bos_token_id", bos}, {"eos_token_id", eos}};
    if (f->has("tokenizer.ggml.padding_token_id")) gen["pad_token_id"] = f->get_uint("tokenizer.ggml.padding_token_id");
    io::write_text_file_atomic(tmp + "/generation_config.json", gen.dump(2) + "\n");

    io::write_text_file_atomic(tmp + "/tokenizer.json", gguf_tokenizer_json(*f));
    nlohmann::ordered_json tc;
    tc["add_bos_token"] = f->get_bool("tokenizer.ggml.add_bos_token", false);
    tc["bos_token"] = bos >= 0 && bos < s.vocab ? tokens[bos] : "";
    tc["eos_token"] = eos >= 0 && eos < s.vocab ? tokens[eos] : "";
    tc["model_max_length"] = ctx;
    tc["tokenizer_class"] = "GPT2Tokenizer";
    tc["chat_template"] = f->get_string("tokenizer.chat_template", "");
    io::write_text_file_atomic(tmp + "/tokenizer_config.json", tc.dump(2) + "\n");

    if (fs::exists(out_dir)) fs::remove_all(out_dir);
    fs::rename(tmp, out_dir);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  return s;
}

}  // namespace nvfp4::model
