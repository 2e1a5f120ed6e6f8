// What the run / eval / calibrate verbs share: the tokenizer and chat template of a model directory, and
// perplexity / calibration over a text with a fixed window.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/llama.h"
#include "model/tokenizer.h"

namespace nvfp4::model {

// <dir>/tokenizer.json. Throws nvfp4::Error.
Tokenizer load_tokenizer(const std::string& dir);
// chat_template of <dir>/tokenizer_config.json ("" when none).
std::string load_chat_template(const std::string& dir);

// The tokens of a text file as the scoring verbs read it: BOS first when the tokenizer adds one, then the whole
// text, cut to `max_tokens` (0 = all). Throws nvfp4::Error naming the file when fewer than 2 tokens remain.
std::vector<int32_t> tokenize_text_file(const Tokenizer& tok, const std::string& path, int64_t max_tokens);

struct PerplexityResult {
  double nll_sum = 0;      // Σ -log p(token | previous tokens of its window), natural log
  int64_t scored = 0;      // tokens scored (each window's first token is context only)
  int64_t windows = 0;
  double seconds = 0;      // forward time
  std::vector<double> nll; // per scored token, in text order
  double perplexity() const;  // exp(nll_sum / scored)
};

// Splits `tokens` into consecutive windows of at most `window` tokens (the last may be shorter; windows of
// one token are skipped), runs each from an empty cache with all logits and scores tokens 1.. of the window.
// Log-softmax in f64. `progress` gets (windows done, windows total).
PerplexityResult perplexity(LlamaModel& m, const std::vector<int32_t>& tokens, int64_t window,
                            const std::function<void(int64_t, int64_t)>& progress = nullptr);

// -log softmax(logits)[target] in f64.
double token_nll(const float* logits, int64_t vocab, int32_t target);

}  // namespace nvfp4::model
