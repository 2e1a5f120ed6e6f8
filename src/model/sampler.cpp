#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/error.h"

namespace nvfp4::model {

int32_t argmax(const float* logits, int64_t vocab) {
  int32_t best = -1;
  for (int64_t i = 0; i < vocab; ++i) {
    if (std::isnan(logits[i])) continue;
    if (best < 0 || logits[i] > logits[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

int32_t Sampler::sample(const float* logits, int64_t vocab) {
  const int32_t top = argmax(logits, vocab);
  if (top < 0) fail("sampling: every logit is NaN");
  if (opt_.temperature <= 0.0f) return top;
  std::vector<std::pair<float, int32_t>> c;
  c.reserve(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i)
    if (!std::isnan(logits[i])) c.push_back({logits[i], static_cast<int32_t>(i)});
  auto by_logit = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  if (opt_.top_k > 0 && static_cast<size_t>(opt_.top_k) < c.size()) {
    std::partial_sort(c.begin(), c.begin() + opt_.top_k, c.end(), by_logit);
    c.resize(static_cast<size_t>(opt_.top_k));
  } else {
    std::sort(c.begin(), c.end(), by_logit);
  }
  // Softmax of logit/T in f64 over the kept candidates (sorted, largest first).
  std::vector<double> p(c.size());
  const double mx = c[0].first;
  double sum = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    p[i] = std::exp((static_cast<double>(c[i].first) - mx) / opt_.temperature);
    sum += p[i];
  }
  size_t keep = c.size();
  if (opt_.top_p < 1.0f) {
    double cum = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      cum += p[i] / sum;
      if (cum >= opt_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += p[i];
  const double r = std::uniform_real_distribution<double>(0.0, total)(rng_);
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += p[i];
    if (r < acc) return c[i].second;
  }
  return c[keep - 1].second;
}

}  // namespace nvfp4::model
