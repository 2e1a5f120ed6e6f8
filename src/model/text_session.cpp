#include "model/text_session.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.h"
#include "io/checkpoint.h"

namespace nvfp4::model {

Tokenizer load_tokenizer(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw Error(dir + (std::filesystem::exists(dir, ec) ? ": not a directory (a model directory holds config.json, "
                                                          "tokenizer.json and the .safetensors files)"
                                                        : ": no such model directory"));
  return Tokenizer::from_file(dir + "/tokenizer.json");
}

std::string load_chat_template(const std::string& dir) {
  std::ifstream f(dir + "/tokenizer_config.json", std::ios::binary);
  if (!f) return std::string();
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    const auto j = nlohmann::json::parse(ss.str());
    if (j.contains("chat_template") && j["chat_template"].is_string()) return j["chat_template"].get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    fail(dir + "/tokenizer_config.json: invalid JSON: " + e.what());
  }
  return std::string();
}

std::vector<int32_t> tokenize_text_file(const Tokenizer& tok, const std::string& path, int64_t max_tokens) {
  const std::string text = io::read_text_file(path);
  std::vector<int32_t> ids;
  if (tok.add_bos() && tok.bos_id() >= 0) ids.push_back(tok.bos_id());
  const auto enc = tok.encode(text, false);
  ids.insert(ids.end(), enc.begin(), enc.end());
  if (max_tokens > 0 && static_cast<int64_t>(ids.size()) > max_tokens) ids.resize(static_cast<size_t>(max_tokens));
  if (ids.size() < 2) fail(path + ": fewer than 2 tokens to score");
  return ids;
}

double PerplexityResult::perplexity() const { return scored ? std::exp(nll_sum / static_cast<double>(scored)) : NAN; }

double token_nll(const float* logits, int64_t vocab, int32_t target) {
  double mx = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i) mx = std::max(mx, static_cast<double>(logits[i]));
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  return -(static_cast<double>(logits[target]) - mx - std::log(sum));
}

PerplexityResult perplexity(LlamaModel& m, const std::vector<int32_t>& tokens, int64_t window,
                            const std::function<void(int64_t, int64_t)>& progress) {
  if (window < 2) fail("perplexity: window must be at least 2 tokens");
  window = std::min(window, m.context_capacity());
  PerplexityResult r;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t total = (n + window - 1) / window;
  const int64_t vocab = m.config().vocab;
  std::vector<float> logits;
  for (int64_t w = 0, start = 0; start < n; ++w, start += window) {
    const int64_t len = std::min(window, n - start);
    if (len >= 2) {
      logits.resize(static_cast<size_t>(len * vocab));
      m.reset();
      const auto t0 = std::chrono::steady_clock::now();
      m.forward(tokens.data() + start, len, logits.data(), true);
      r.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      for (int64_t i = 0; i + 1 < len; ++i) {
        const double v = token_nll(logits.data() + i * vocab, vocab, tokens[static_cast<size_t>(start + i + 1)]);
        r.nll_sum += v;
        r.nll.push_back(v);
        ++r.scored;
      }
      ++r.windows;
    }
    if (progress) progress(w + 1, total);
  }
  return r;
}

}  // namespace nvfp4::model
