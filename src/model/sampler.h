// Next-token choice from f32 logits: greedy (temperature 0) or temperature + top-k + top-p sampling with a
// seeded generator (std::mt19937_64, so a seed gives the same tokens on every platform with the same logits).
#pragma once
#include <cstdint>
#include <random>

namespace nvfp4::model {

struct SamplerOptions {
  float temperature = 0.0f;  // <= 0: greedy (argmax, lowest id on ties)
  int top_k = 40;            // <= 0: no top-k cut
  float top_p = 0.95f;       // >= 1: no nucleus cut
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& o) : opt_(o), rng_(o.seed) {}
  // logits: (vocab) f32. Throws nvfp4::Error when every logit is NaN.
  int32_t sample(const float* logits, int64_t vocab);

 private:
  SamplerOptions opt_;
  std::mt19937_64 rng_;
};

// Index of the largest logit (lowest index on ties; NaN never wins); -1 when all are NaN.
int32_t argmax(const float* logits, int64_t vocab);

}  // namespace nvfp4::model
