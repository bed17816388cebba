// Elementwise ops vs their scalar twins.
#include "ops/elementwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace chorus {
namespace {
std::vector<float> Randn(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}
}  // namespace

TEST(Elementwise, RmsNormMatchesRef) {
  for (size_t n : {1u, 17u, 576u}) {
    auto x = Randn(n, 1), w = Randn(n, 2);
    std::vector<float> a(n), b(n);
    RmsNorm(x.data(), w.data(), n, 1e-5f, a.data());
    RmsNormRef(x.data(), w.data(), n, 1e-5f, b.data());
    for (size_t i = 0; i < n; ++i) ASSERT_NEAR(a[i], b[i], 1e-5f * (1 + std::fabs(b[i])));
  }
}

TEST(Elementwise, RopeMatchesRefAndPreservesNorm) {
  for (int64_t pos : {0, 1, 77, 8000}) {
    auto x = Randn(64, 3);
    auto y = x;
    std::vector<float> cs(64);
    RopeTable(pos, 64, 100000.0f, cs.data());
    RopeApply(x.data(), 64, cs.data());
    RopeApplyRef(y.data(), 64, pos, 100000.0f);
    double n0 = 0, n1 = 0;
    auto z = Randn(64, 3);
    for (size_t i = 0; i < 64; ++i) {
      ASSERT_NEAR(x[i], y[i], 1e-4f);
      n0 += z[i] * z[i];
      n1 += x[i] * x[i];
    }
    EXPECT_NEAR(n0, n1, 1e-3 * n0);
  }
}

TEST(Elementwise, SoftmaxAndLogSumExp) {
  std::vector<float> x = {1000.0f, 1000.0f, -5.0f};
  EXPECT_NEAR(LogSumExp(x.data(), 3), 1000.0 + std::log(2.0), 1e-6);
  Softmax(x.data(), 3);
  EXPECT_NEAR(x[0], 0.5f, 1e-6f);
  EXPECT_NEAR(x[2], 0.0f, 1e-6f);
}

TEST(Elementwise, SwiGluDotAxpy) {
  auto g = Randn(100, 4), u = Randn(100, 5);
  std::vector<float> a(100), b(100);
  SwiGlu(g.data(), u.data(), 100, a.data());
  SwiGluRef(g.data(), u.data(), 100, b.data());
  for (size_t i = 0; i < 100; ++i) ASSERT_NEAR(a[i], b[i], 1e-5f * (1 + std::fabs(b[i])));
  double ref = 0;
  for (size_t i = 0; i < 100; ++i) ref += double(g[i]) * u[i];
  EXPECT_NEAR(Dot(g.data(), u.data(), 100), ref, 1e-4);
  std::vector<float> y = u;
  Axpy(2.0f, g.data(), 100, y.data());
  for (size_t i = 0; i < 100; ++i) ASSERT_FLOAT_EQ(y[i], u[i] + 2.0f * g[i]);
}

}  // namespace chorus
