// KvBatch: a batched step of several agents over a shared frozen prefix equals each agent attended
// alone; shared bytes do not depend on the number of agents.
#include "kv/kv_batch.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace chorus {
namespace {

constexpr AttentionShape kShape{.n_head = 6, .n_head_kv = 2, .head_dim = 64};

class Mixed : public PrecisionPolicy {
 public:
  BlockFormats FormatFor(const BlockInfo& info) override {
    return info.block_index % 2 ? BlockFormats{.k = KvFormat::kQ8, .v = KvFormat::kTq3}
                                : BlockFormats{.k = KvFormat::kTq4, .v = KvFormat::kKivi4};
  }
};

std::vector<float> Randn(size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> nd;
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng) * scale;
  return v;
}

// Appends n random tokens to every layer of seq (attention output discarded).
void Feed(KvSequence& seq, size_t n, std::mt19937& rng, ThreadPool& pool, size_t layers) {
  auto k = Randn(n * kShape.kv_dim(), rng, 2), v = Randn(n * kShape.kv_dim(), rng, 1);
  auto q = Randn(n * kShape.q_dim(), rng, 0.125f);
  std::vector<float> out(n * kShape.q_dim());
  for (size_t l = 0; l < layers; ++l)
    ASSERT_TRUE(seq.AppendAndAttend(l, n, k.data(), v.data(), q.data(), out.data(), pool).ok());
  seq.Commit(n);
}

TEST(KvBatch, BatchedStepEqualsAgentsAlone) {
  Mixed policy;
  KvStore store({.n_layer = 2, .shape = kShape}, &policy);
  ThreadPool pool(2);
  std::mt19937 rng(7);
  auto doc = store.NewSequence(300);
  Feed(*doc, 250, rng, pool, 2);  // 7 sealed blocks + a 26-token tail
  doc->Freeze();
  std::shared_ptr<const KvSequence> shared(std::move(doc));
  const size_t shared_bytes = store.pool().bytes_in_use();
  EXPECT_FALSE(const_cast<KvSequence&>(*shared).Append(0, 1, nullptr, nullptr).ok());

  const size_t N = 5;
  std::vector<std::unique_ptr<KvSequence>> a, b;  // two identical sets of agents
  for (size_t i = 0; i < N; ++i) {
    a.push_back(store.NewSequence(100, shared));
    b.push_back(store.NewSequence(100, shared));
    std::mt19937 r1(100 + i), r2(100 + i);
    Feed(*a.back(), 3 + 11 * i, r1, pool, 2);  // private prompts of different lengths
    Feed(*b.back(), 3 + 11 * i, r2, pool, 2);
    EXPECT_EQ(a.back()->Position(0), 250 + 3 + 11 * i);
  }
  for (int step = 0; step < 3; ++step) {
    auto k = Randn(N * kShape.kv_dim(), rng, 2), v = Randn(N * kShape.kv_dim(), rng, 1);
    auto q = Randn(N * kShape.q_dim(), rng, 0.125f);
    KvBatch batch(store);
    for (auto& s : a) batch.Add(s.get(), 1);
    for (size_t l = 0; l < 2; ++l) {
      std::vector<float> got(N * kShape.q_dim()), want(N * kShape.q_dim());
      ASSERT_TRUE(batch.AppendAndAttend(l, N, k.data(), v.data(), q.data(), got.data(), pool).ok());
      for (size_t i = 0; i < N; ++i)
        ASSERT_TRUE(b[i]->AppendAndAttend(l, 1, k.data() + i * kShape.kv_dim(), v.data() + i * kShape.kv_dim(),
                                          q.data() + i * kShape.q_dim(), want.data() + i * kShape.q_dim(), pool)
                        .ok());
      for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5f) << "step " << step << " i " << i;
    }
    batch.Commit(N);
    for (auto& s : b) s->Commit(1);
  }
  // The prefix's blocks are stored once, whatever the number of readers.
  a.clear();
  b.clear();
  EXPECT_EQ(store.pool().bytes_in_use(), shared_bytes);
  shared.reset();
  EXPECT_EQ(store.pool().bytes_in_use(), 0u);
}

}  // namespace
}  // namespace chorus
