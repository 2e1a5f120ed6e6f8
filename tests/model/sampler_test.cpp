// Sampling: greedy, determinism per seed, the top-k / top-p cuts, and the empirical distribution at T = 1.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/error.h"
#include "model/sampler.h"

using namespace nvfp4::model;

TEST(Sampler, GreedyIsArgmaxLowestIdOnTies) {
  const std::vector<float> l = {0.5f, 2.0f, NAN, 2.0f, -1.0f};
  EXPECT_EQ(argmax(l.data(), 5), 1);
  Sampler s({0.0f, 40, 0.95f, 1});
  EXPECT_EQ(s.sample(l.data(), 5), 1);
  const std::vector<float> nan = {NAN, NAN};
  EXPECT_EQ(argmax(nan.data(), 2), -1);
  EXPECT_THROW(s.sample(nan.data(), 2), nvfp4::Error);
}

TEST(Sampler, SameSeedSameTokens) {
  std::vector<float> l(100);
  for (int i = 0; i < 100; ++i) l[i] = std::sin(i * 0.7f);
  Sampler a({1.0f, 0, 1.0f, 42}), b({1.0f, 0, 1.0f, 42}), c({1.0f, 0, 1.0f, 43});
  int differ = 0;
  for (int i = 0; i < 50; ++i) {
    const int x = a.sample(l.data(), 100), y = b.sample(l.data(), 100), z = c.sample(l.data(), 100);
    EXPECT_EQ(x, y);
    differ += x != z;
  }
  EXPECT_GT(differ, 0) << "a different seed should give a different sequence";
}

TEST(Sampler, TopKAndTopPCuts) {
  // softmax of {3, 2, 1, 0} at T = 1: 0.6439, 0.2369, 0.0871, 0.0321.
  const std::vector<float> l = {1.0f, 3.0f, 0.0f, 2.0f};
  Sampler k1({1.0f, 1, 1.0f, 7});
  for (int i = 0; i < 20; ++i) EXPECT_EQ(k1.sample(l.data(), 4), 1);
  // top-p 0.6: the first candidate alone has 0.644 >= 0.6.
  Sampler p({1.0f, 0, 0.6f, 7});
  for (int i = 0; i < 20; ++i) EXPECT_EQ(p.sample(l.data(), 4), 1);
  // top-p 0.85: {3, 2} (0.881 cumulative); id 0 and 2 never appear.
  Sampler p2({1.0f, 0, 0.85f, 7});
  for (int i = 0; i < 200; ++i) {
    const int t = p2.sample(l.data(), 4);
    EXPECT_TRUE(t == 1 || t == 3) << t;
  }
}

TEST(Sampler, EmpiricalDistributionAtTemperatureOne) {
  const std::vector<float> l = {1.0f, 3.0f, 0.0f, 2.0f};
  const double z = std::exp(1.0) + std::exp(3.0) + 1.0 + std::exp(2.0);
  const double p[4] = {std::exp(1.0) / z, std::exp(3.0) / z, 1.0 / z, std::exp(2.0) / z};
  Sampler s({1.0f, 0, 1.0f, 123});
  const int n = 40000;
  int count[4] = {0, 0, 0, 0};
  for (int i = 0; i < n; ++i) ++count[s.sample(l.data(), 4)];
  // Each count is binomial(n, p): 5 standard deviations sqrt(n p (1-p)) is the bound (a false failure has
  // probability < 1e-6 per category).
  for (int i = 0; i < 4; ++i) {
    const double sd = std::sqrt(n * p[i] * (1 - p[i]));
    EXPECT_NEAR(count[i], n * p[i], 5 * sd) << i;
  }
}
