// Sampler: greedy picks the argmax; seeded sampling is reproducible and respects top-k.
#include "model/sampler.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace chorus {

TEST(Sampler, GreedyIsArgmaxLowestIdOnTies) {
  std::vector<float> l = {0.1f, 3.0f, 3.0f, -1.0f};
  Sampler s({.temperature = 0.0f});
  EXPECT_EQ(s.Sample(l.data(), l.size()), 1);
}

TEST(Sampler, SeededAndTopK) {
  std::vector<float> l(100);
  for (size_t i = 0; i < l.size(); ++i) l[i] = 0.01f * i;
  SamplingOptions o{.temperature = 1.0f, .top_k = 5, .top_p = 1.0f, .seed = 42};
  Sampler a(o), b(o);
  std::set<int> seen;
  for (int i = 0; i < 200; ++i) {
    const int x = a.Sample(l.data(), l.size());
    EXPECT_EQ(x, b.Sample(l.data(), l.size()));
    EXPECT_GE(x, 95);
    seen.insert(x);
  }
  EXPECT_GT(seen.size(), 2u);
}

TEST(Sampler, TopPKeepsNucleus) {
  std::vector<float> l = {10.0f, 0.0f, 0.0f, 0.0f};
  Sampler s({.temperature = 1.0f, .top_k = 0, .top_p = 0.5f, .seed = 1});
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.Sample(l.data(), l.size()), 0);
}

TEST(Sampler, RejectsBadOptions) {
  EXPECT_FALSE(ValidateSampling({.temperature = -1.0f}).ok());
  EXPECT_FALSE(ValidateSampling({.top_k = -3}).ok());
  EXPECT_FALSE(ValidateSampling({.top_p = 0.0f}).ok());
  EXPECT_TRUE(ValidateSampling({}).ok());
}

}  // namespace chorus
