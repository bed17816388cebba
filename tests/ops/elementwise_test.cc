// Elementwise ops vs their scalar twins.
#include "ops/elementwise.h"

#include <gtest/gtest.h>

#include <cfloat>
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

// LogSumExpFast (f32 SIMD) against the scalar double LogSumExp: within 1e-5 of it at vocabulary sizes,
// with the tails, masked (-inf) entries and the all-masked case.
TEST(Elementwise, LogSumExpFastMatchesTheScalarForm) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  double worst = 0;
  for (size_t n : {1, 3, 15, 16, 17, 63, 64, 65, 1000, 1023, 1025, 4097, 49152, 262144}) {
    std::vector<float> x(n);
    for (auto& v : x) v = nd(rng);
    if (n > 100) x[n / 3] = 30.0f;  // one dominant logit
    if (n > 3) x[1] = -INFINITY;
    const double ref = LogSumExp(x.data(), n), fast = LogSumExpFast(x.data(), n);
    worst = std::max(worst, std::abs(fast - ref));
    EXPECT_NEAR(fast, ref, 1e-5) << "n=" << n;
  }
  std::printf("  LogSumExpFast max |err| = %.2e\n", worst);
  const std::vector<float> masked(40, -INFINITY);
  EXPECT_EQ(LogSumExpFast(masked.data(), masked.size()), -INFINITY);
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

// SwiGlu is SIMD (Highway's Exp) with the tail through the same lanes; SwiGluRef is double.
// Catches: a wrong sign in exp, a missing up factor, a tail that differs from the body, overflow
// garbage beyond exp's range (|gate| up to 200), a bound that drifts from the measured few ulp.
TEST(Elementwise, SwiGluSimdWithinFewUlpOfRefAnyLength) {
  double worst = 0;
  for (size_t n : {1u, 7u, 15u, 16u, 17u, 100u, 1536u, 1537u}) {
    auto g = Randn(n, 40 + static_cast<uint32_t>(n)), u = Randn(n, 41);
    for (size_t i = 0; i < n; ++i) g[i] *= (i % 3 == 0) ? 8.0f : 1.0f;  // reach exp's flat tails too
    std::vector<float> a(n), b(n), one(1);
    SwiGlu(g.data(), u.data(), n, a.data());
    SwiGluRef(g.data(), u.data(), n, b.data());
    for (size_t i = 0; i < n; ++i) {
      if (b[i] != 0) worst = std::max(worst, std::fabs(double(a[i]) - b[i]) / std::fabs(double(b[i])));
      else ASSERT_EQ(a[i], 0.0f);
      SwiGlu(g.data() + i, u.data() + i, 1, one.data());  // an element's value does not depend on n
      ASSERT_EQ(one[0], a[i]) << n << " " << i;
    }
  }
  std::printf("SwiGlu max relative error vs SwiGluRef: %.3g (%.2f FLT_EPSILON)\n", worst, worst / FLT_EPSILON);
  EXPECT_LT(worst, 2 * FLT_EPSILON);  // measured 1.57 FLT_EPSILON (AVX-512)
  // Known values and the flat tails: silu(1) = 0.7310586, silu(-1) = -0.2689414, silu(±200).
  const float g[6] = {1.0f, -1.0f, 0.0f, 200.0f, -200.0f, -90.0f}, u[6] = {1, 1, 1, 1, 1, 1};
  float o[6];
  SwiGlu(g, u, 6, o);
  EXPECT_NEAR(o[0], 0.7310586f, 1e-6f);
  EXPECT_NEAR(o[1], -0.2689414f, 1e-6f);
  EXPECT_EQ(o[2], 0.0f);
  EXPECT_EQ(o[3], 200.0f);
  EXPECT_EQ(o[4], 0.0f);
  EXPECT_EQ(o[5], 0.0f);
}

}  // namespace chorus
