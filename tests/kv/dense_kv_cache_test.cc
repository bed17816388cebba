// DenseKvCache's causal attention (tiled, transposed key tiles) vs the scalar double-precision twin.
#include "kv/dense_kv_cache.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "util/fp16.h"
#include "util/thread_pool.h"

namespace chorus {
namespace {

struct Case {
  AttentionShape shape;
  uint32_t window;                // 0 = global
  std::vector<size_t> pieces;     // tokens fed per AppendAndAttend call
  int threads;
};

// Feeds random K/V/Q in pieces and checks every output row against AttendDenseHeadRef over the rows
// that token may see ([p + 1 - window, p] or [0, p]), from a row-major fp16 copy kept by the test.
// Catches a wrong key-tile layout (a transposed element in the wrong tile or column), a causal tail
// or window head read or missed, a tile folded twice, heads split wrongly across work units.
void CheckAgainstReference(const Case& c) {
  const AttentionShape& sh = c.shape;
  const size_t hd = sh.head_dim, kv_dim = sh.kv_dim(), q_dim = sh.q_dim(), group = sh.n_head / sh.n_head_kv;
  size_t total = 0;
  for (size_t n : c.pieces) total += n;
  DenseKvCache kv(1, total, sh, {c.window});
  ThreadPool pool(c.threads);
  std::mt19937 rng(static_cast<uint32_t>(hd * 131 + total + c.window));
  std::normal_distribution<float> nd;
  std::vector<uint16_t> k_rows, v_rows;  // (total, kv_dim) as the cache rounds them
  size_t pos = 0;
  for (size_t n : c.pieces) {
    std::vector<float> k(n * kv_dim), v(n * kv_dim), q(n * q_dim), out(n * q_dim);
    for (auto& x : k) x = nd(rng);
    for (auto& x : v) x = nd(rng);
    for (auto& x : q) x = nd(rng) / std::sqrt(float(hd));
    for (float x : k) k_rows.push_back(F32ToF16(x));
    for (float x : v) v_rows.push_back(F32ToF16(x));
    ASSERT_TRUE(kv.AppendAndAttend(0, n, k.data(), v.data(), q.data(), out.data(), pool).ok());
    kv.Commit(n);
    std::vector<float> ref(hd);
    for (size_t t = 0; t < n; ++t) {
      const size_t p = pos + t, first = c.window > 0 && p + 1 > c.window ? p + 1 - c.window : 0;
      for (size_t h = 0; h < sh.n_head; ++h) {
        const size_t hk = h / group;
        AttendDenseHeadRef(q.data() + t * q_dim + h * hd, k_rows.data() + first * kv_dim + hk * hd,
                           v_rows.data() + first * kv_dim + hk * hd, kv_dim, p + 1 - first, hd, ref.data());
        // Inputs are exact in both; only float accumulation differs: relative 1e-5 of |v| ~ 4.
        for (size_t i = 0; i < hd; ++i)
          ASSERT_NEAR(out[t * q_dim + h * hd + i], ref[i], 1e-4)
              << "hd " << hd << " window " << c.window << " pos " << p << " head " << h << " col " << i;
      }
    }
    pos += n;
  }
  for (size_t p = 0; p < total; ++p)  // the transposed tiles hold exactly the rows fed
    for (size_t hk = 0; hk < sh.n_head_kv; ++hk)
      for (size_t i = 0; i < hd; i += 7)
        ASSERT_EQ(kv.Key(0, p, hk, i), F16ToF32(k_rows[p * kv_dim + hk * hd + i])) << p << " " << hk << " " << i;
}

TEST(DenseAttention, EveryTokenMatchesTheReferenceOfItsRows) {
  // SmolLM2's shape (GQA 3:1, head_dim 64): a prompt, decode steps, a second prompt piece.
  CheckAgainstReference({{.n_head = 9, .n_head_kv = 3, .head_dim = 64}, 0, {70, 1, 1, 33}, 2});
  // Gemma 3's (one KV head, head_dim 256) with a sliding window shorter than the context.
  CheckAgainstReference({{.n_head = 4, .n_head_kv = 1, .head_dim = 256}, 40, {90, 1, 25}, 2});
  // Odd sizes: head_dim not a multiple of any vector, MHA, one thread.
  CheckAgainstReference({{.n_head = 2, .n_head_kv = 2, .head_dim = 7}, 0, {5, 40, 1}, 1});
  CheckAgainstReference({{.n_head = 8, .n_head_kv = 2, .head_dim = 48}, 17, {100}, 3});
}

TEST(DenseKvCache, ShapeAndBytes) {
  DenseKvCache kv(2, 16, AttentionShape{.n_head = 8, .n_head_kv = 2, .head_dim = 4});
  EXPECT_EQ(kv.size(), 0u);
  // V: 16 rows; K: one 32-position tile per KV head; 2 layers, fp16.
  EXPECT_EQ(kv.bytes(), 2u * (16 * 8 + 32 * 8) * 2);
  kv.Commit(3);
  EXPECT_EQ(kv.size(), 3u);
  kv.Clear();
  EXPECT_EQ(kv.size(), 0u);
}

}  // namespace
}  // namespace chorus
