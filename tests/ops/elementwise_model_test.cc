// The elementwise pieces the second architectures need, against their scalar twins and known
// values: NeoX RoPE (halves), RoPE frequency scaling (linear and per-frequency factors), GeGLU
// with tanh-GELU, soft-capping.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "ops/elementwise.h"

namespace chorus {
namespace {

// Catches: pairing adjacent coordinates instead of halves, a wrong frequency index, ignoring
// freq_scale or the factors.
TEST(ElementwiseModel, NeoxRopeMatchesRefAndRotatesHalves) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  const float factors[32] = {1, 1, 2, 2, 4, 4, 8, 8, 1, 1, 2, 2, 4, 4, 8, 8, 1, 1, 2, 2, 4, 4, 8, 8, 1, 1, 2, 2, 4, 4, 8, 8};
  for (const RopeParams p : {RopeParams{.base = 1e6f}, RopeParams{.base = 1e4f, .freq_scale = 0.25f},
                             RopeParams{.base = 5e5f, .freq_factors = factors}}) {
    for (int64_t pos : {0, 1, 17, 3000}) {
      std::vector<float> x(64), y(64), cs(64);
      for (auto& v : x) v = nd(rng);
      y = x;
      RopeTable(pos, 64, p, cs.data());
      RopeApplyNeox(x.data(), 64, cs.data());
      RopeApplyNeoxRef(y.data(), 64, pos, p);
      for (size_t i = 0; i < 64; ++i) ASSERT_NEAR(x[i], y[i], 1e-5f) << pos;
    }
  }
  // Position 1, frequency 0 (θ = 1 rad) rotates (x[0], x[32]); x[1] pairs with x[33].
  std::vector<float> x(64, 0.0f), cs(64);
  x[0] = 1.0f;
  RopeTable(1, 64, RopeParams{.base = 10000.0f}, cs.data());
  RopeApplyNeox(x.data(), 64, cs.data());
  EXPECT_NEAR(x[0], std::cos(1.0f), 1e-6f);
  EXPECT_NEAR(x[32], std::sin(1.0f), 1e-6f);
  EXPECT_EQ(x[1], 0.0f);
  // Linear scaling: position 4 at scale 1/4 is position 1 unscaled.
  std::vector<float> a(64), b(64);
  RopeTable(4, 64, RopeParams{.base = 10000.0f, .freq_scale = 0.25f}, a.data());
  RopeTable(1, 64, RopeParams{.base = 10000.0f}, b.data());
  for (size_t i = 0; i < 64; ++i) EXPECT_NEAR(a[i], b[i], 1e-6f);
  // The legacy overload is unchanged, bit for bit.
  RopeTable(1234, 64, 10000.0f, a.data());
  RopeTable(1234, 64, RopeParams{.base = 10000.0f}, b.data());
  EXPECT_EQ(a, b);
}

// Catches: erf-GELU instead of tanh-GELU, a missing up factor, a wrong constant.
TEST(ElementwiseModel, GeGluTanhMatchesRefAndKnownValues) {
  const std::vector<float> g = {-3.0f, -1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 2.0f, 6.0f};
  const std::vector<float> up = {1.0f, 1.0f, 2.0f, 1.0f, -1.0f, 1.0f, 0.5f, 1.0f};
  std::vector<float> a(g.size()), b(g.size());
  GeGluTanh(g.data(), up.data(), g.size(), a.data());
  GeGluTanhRef(g.data(), up.data(), g.size(), b.data());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(a[i], b[i], 2e-6f * (1 + std::fabs(b[i])));
  EXPECT_NEAR(a[5], 0.8411920f, 1e-6f);   // gelu_tanh(1)
  EXPECT_NEAR(a[1], -0.1588080f, 1e-6f);  // gelu_tanh(-1)
  EXPECT_NEAR(a[6], 0.5f * 1.9545977f, 1e-6f);
}

TEST(ElementwiseModel, SoftCap) {
  std::vector<float> x = {0.0f, 30.0f, -300.0f, 3.0f};
  SoftCap(x.data(), x.size(), 30.0f);
  EXPECT_EQ(x[0], 0.0f);
  EXPECT_NEAR(x[1], 30.0f * std::tanh(1.0f), 1e-5f);
  EXPECT_NEAR(x[2], -30.0f, 1e-4f);
  EXPECT_NEAR(x[3], 30.0f * std::tanh(0.1f), 1e-5f);
}

}  // namespace
}  // namespace chorus
