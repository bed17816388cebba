// Cocktail thresholds and assignment on constructed similarity vectors (METHODS.md §3).
#include "policy/cocktail_policy.h"

#include <gtest/gtest.h>

#include <cmath>

namespace chorus {
namespace {

using P = ChunkPrecision;

std::vector<P> Assign(std::vector<float> s, double a = 0.6, double b = 0.1) {
  auto r = AssignPrecision(s, a, b);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : std::vector<P>{};
}

TEST(Cocktail, ThresholdsFromSpread) {
  const std::vector<float> s = {0.0f, 0.25f, 1.0f, 0.5f};
  auto t = ComputeThresholds(s, 0.6, 0.1);
  ASSERT_TRUE(t.ok());
  EXPECT_DOUBLE_EQ(t->s_min, 0.0);
  EXPECT_DOUBLE_EQ(t->s_max, 1.0);
  EXPECT_NEAR(t->t_low, 0.6, 1e-12);
  EXPECT_NEAR(t->t_high, 0.9, 1e-12);
  // Shifted and scaled scores give the same decisions (thresholds follow the spread).
  std::vector<float> s2;
  for (float x : s) s2.push_back(0.5f + 0.25f * x);
  EXPECT_EQ(Assign(s), Assign(s2));
}

TEST(Cocktail, ThreeBands) {
  // spread 1: T_low = 0.6, T_high = 0.9
  EXPECT_EQ(Assign({0.0f, 0.59f, 0.61f, 0.89f, 0.91f, 1.0f}),
            (std::vector<P>{P::kInt2, P::kInt2, P::kInt4, P::kInt4, P::kFp16, P::kFp16}));
}

TEST(Cocktail, TiesAtThresholdsGoDown) {
  // Exactly representable: α = β = 0.25 on [0, 1] → T_low = 0.25, T_high = 0.75.
  // s = T_high → INT4 (needs s > T_high for FP16); s = T_low → INT2 (needs s > T_low for INT4).
  EXPECT_EQ(Assign({0.0f, 0.25f, 0.5f, 0.75f, 1.0f}, 0.25, 0.25),
            (std::vector<P>{P::kInt2, P::kInt2, P::kInt4, P::kInt4, P::kFp16}));
  // α + β = 1: T_low = T_high, no INT4 band; a score on it is INT2.
  EXPECT_EQ(Assign({0.0f, 0.5f, 1.0f}, 0.5, 0.5), (std::vector<P>{P::kInt2, P::kInt2, P::kFp16}));
  // Equal scores get equal precision.
  EXPECT_EQ(Assign({0.0f, 0.95f, 0.95f, 1.0f}), (std::vector<P>{P::kInt2, P::kFp16, P::kFp16, P::kFp16}));
}

TEST(Cocktail, AllEqualAndOneChunkAreInt2) {
  // s_max = s_min: T_low = T_high = s, and s ≤ T_low → INT2 (the rule applied literally).
  EXPECT_EQ(Assign({0.3f, 0.3f, 0.3f}), (std::vector<P>(3, P::kInt2)));
  EXPECT_EQ(Assign({0.7f}), (std::vector<P>{P::kInt2}));
  EXPECT_EQ(Assign({0.7f}, 0.0, 0.0), (std::vector<P>{P::kInt2}));
}

TEST(Cocktail, AlphaBetaExtremes) {
  const std::vector<float> s = {0.0f, 0.3f, 0.6f, 1.0f};
  // β = 0: T_high = s_max, nothing is strictly above → no FP16.
  for (P p : Assign(s, 0.6, 0.0)) EXPECT_NE(p, P::kFp16);
  // α = 0: only s_min is ≤ T_low.
  EXPECT_EQ(Assign(s, 0.0, 0.1), (std::vector<P>{P::kInt2, P::kInt4, P::kInt4, P::kFp16}));
  // β = 1: T_high = s_min → everything above the minimum is FP16.
  EXPECT_EQ(Assign(s, 0.0, 1.0), (std::vector<P>{P::kInt2, P::kFp16, P::kFp16, P::kFp16}));
}

TEST(Cocktail, BadParametersAreErrors) {
  const std::vector<float> s = {0.0f, 1.0f};
  for (auto [a, b] : {std::pair{-0.1, 0.1}, {1.1, 0.0}, {0.5, -0.01}, {0.0, 1.5}, {0.6, 0.5}, {NAN, 0.1}}) {
    auto r = AssignPrecision(s, a, b);
    EXPECT_FALSE(r.ok()) << a << " " << b;
  }
  EXPECT_FALSE(AssignPrecision(std::vector<float>{}, 0.6, 0.1).ok());
  EXPECT_FALSE(AssignPrecision(std::vector<float>{0.1f, NAN}, 0.6, 0.1).ok());
  EXPECT_NE(ValidateCocktailParams(0.7, 0.4).message().find("alpha + beta"), std::string::npos);
}

TEST(Cocktail, ChunksToBlocks) {
  // 16-token chunks: a block is the max of its two halves; a trailing half-block counts alone.
  EXPECT_EQ(ChunksToBlocks(std::vector<P>{P::kInt2, P::kFp16, P::kInt4, P::kInt2, P::kInt2}, 16, 80),
            (std::vector<P>{P::kFp16, P::kInt4, P::kInt2}));
  // 64-token chunks: both blocks share one decision.
  EXPECT_EQ(ChunksToBlocks(std::vector<P>{P::kInt4, P::kFp16}, 64, 100),
            (std::vector<P>{P::kInt4, P::kInt4, P::kFp16, P::kFp16}));
  // 32: identity.
  EXPECT_EQ(ChunksToBlocks(std::vector<P>{P::kInt4, P::kInt2}, 32, 64), (std::vector<P>{P::kInt4, P::kInt2}));
}

TEST(Cocktail, SharedQueriesTakeHighestPrecision) {
  EXPECT_EQ(MaxOverQueries({{0.1f, 0.9f, 0.2f}, {0.8f, 0.1f, 0.3f}}), (std::vector<float>{0.8f, 0.9f, 0.3f}));
  const auto a = Assign({0.0f, 1.0f, 0.7f, 0.1f}), b = Assign({1.0f, 0.0f, 0.1f, 0.2f});
  EXPECT_EQ(a, (std::vector<P>{P::kInt2, P::kFp16, P::kInt4, P::kInt2}));
  EXPECT_EQ(b, (std::vector<P>{P::kFp16, P::kInt2, P::kInt2, P::kInt2}));
  EXPECT_EQ(MaxPrecision({a, b}), (std::vector<P>{P::kFp16, P::kFp16, P::kInt4, P::kInt2}));
  EXPECT_EQ(MaxPrecision({a}), a);
}

TEST(Cocktail, PolicyMapsBlocksAndKeepsSink) {
  CocktailPolicy pol({P::kInt2, P::kFp16, P::kInt4, P::kInt2}, /*sink_blocks=*/1);
  auto f = [&](size_t i) { return pol.FormatFor(BlockInfo{.block_index = i, .first_pos = i * 32}); };
  EXPECT_EQ(f(0).k, KvFormat::kF16);  // sink, though the map says INT2
  EXPECT_EQ(f(1).k, KvFormat::kF16);
  EXPECT_EQ(f(2).k, KvFormat::kKivi4);
  EXPECT_EQ(f(2).v, KvFormat::kKivi4);
  EXPECT_EQ(f(3).k, KvFormat::kKivi2);
  EXPECT_EQ(f(3).v, KvFormat::kKivi2);
  EXPECT_EQ(pol.beyond_map(), 0u);
  EXPECT_EQ(f(9).k, KvFormat::kKivi4);
  EXPECT_EQ(pol.beyond_map(), 1u);
  EXPECT_EQ(ChunkMapString(pol.map(), 1), "SF42");
}

}  // namespace
}  // namespace chorus
