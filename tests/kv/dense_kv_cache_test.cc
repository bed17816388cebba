// Dense fp16 attention kernel vs its scalar double-precision twin.
#include "kv/dense_kv_cache.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "util/fp16.h"

namespace chorus {

TEST(DenseAttention, MatchesReference) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  for (size_t head_dim : {64u, 48u, 7u}) {
    for (size_t n_ctx : {1u, 5u, 33u, 300u}) {
      const size_t stride = head_dim * 3;
      std::vector<uint16_t> k(n_ctx * stride), v(n_ctx * stride);
      for (auto& x : k) x = F32ToF16(nd(rng));
      for (auto& x : v) x = F32ToF16(nd(rng));
      std::vector<float> q(head_dim), scores(n_ctx), out(head_dim), ref(head_dim);
      for (auto& x : q) x = nd(rng) / std::sqrt(float(head_dim));
      AttendDenseHead(q.data(), k.data(), v.data(), stride, n_ctx, head_dim, scores.data(), out.data());
      AttendDenseHeadRef(q.data(), k.data(), v.data(), stride, n_ctx, head_dim, ref.data());
      // Inputs are exact in both; only float accumulation differs: relative 1e-5 of |v| ~ 4.
      for (size_t i = 0; i < head_dim; ++i) ASSERT_NEAR(out[i], ref[i], 1e-4) << head_dim << " " << n_ctx;
    }
  }
}

TEST(DenseKvCache, ShapeAndBytes) {
  DenseKvCache kv(2, 16, AttentionShape{.n_head = 8, .n_head_kv = 2, .head_dim = 4});
  EXPECT_EQ(kv.size(), 0u);
  EXPECT_EQ(kv.bytes(), 2u * 2 * 16 * 8 * 2);
  kv.K(1, 15)[7] = 1;
  kv.Commit(3);
  EXPECT_EQ(kv.size(), 3u);
  kv.Clear();
  EXPECT_EQ(kv.size(), 0u);
}

}  // namespace chorus
