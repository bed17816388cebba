// The small model geometry the CoMix policy tests share (3 layers, 6 query heads over 2 KV heads of
// 64): fast to fill with synthetic activations on a real KvStore.
#pragma once
#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kv/kv_store.h"          // AttentionShape
#include "policy/comix_policy.h"  // ComixOptions
#include "util/thread_pool.h"

namespace chorus::test {

inline constexpr AttentionShape kComixShape{.n_head = 6, .n_head_kv = 2, .head_dim = 64};
inline constexpr size_t kComixLayers = 3;

// CoMix options for that geometry: TQ family, a fixed budget (bytes) or, with budget 0, avg_bits.
inline ComixOptions ComixTestOptions(size_t budget, double avg_bits = 3, size_t prefill_tokens = 40) {
  return ComixOptions{.n_layer = kComixLayers, .n_head = kComixShape.n_head, .n_head_kv = kComixShape.n_head_kv,
                      .head_dim = kComixShape.head_dim, .family = ComixFamily::kTq, .budget_bytes = budget,
                      .avg_bits = avg_bits, .realloc_every = 8, .prefill_tokens = prefill_tokens};
}

// Appends `n` rows of Gaussian keys/values/queries to every layer of `seq` (the store seals full
// blocks with its policy's formats and hands the policy its observations); with `layer_scaled` the
// layers' keys and values get different scales (layer l: keys ×(1 + l), values ×(2 − l/2)).
inline void AppendGaussianRows(KvSequence& seq, size_t n, std::mt19937& rng, ThreadPool& pool, bool layer_scaled) {
  std::normal_distribution<float> nd;
  std::vector<float> k(n * kComixShape.kv_dim()), v(k.size()), q(n * kComixShape.q_dim()), out(q.size());
  for (size_t l = 0; l < kComixLayers; ++l) {
    const float ks = layer_scaled ? 1.0f + float(l) : 1.0f, vs = layer_scaled ? 2.0f - 0.5f * float(l) : 1.0f;
    for (auto& x : k) x = nd(rng) * ks;
    for (auto& x : v) x = nd(rng) * vs;
    for (auto& x : q) x = nd(rng) * 0.3f;
    ASSERT_TRUE(seq.AppendAndAttend(l, n, k.data(), v.data(), q.data(), out.data(), pool).ok());
  }
  seq.Commit(n);
}

// A policy over a real store (the shape above) and one unit "chunk" of `blocks` blocks, filled one
// block at a time with AppendGaussianRows (layer-scaled).
struct FilledChunk {
  ComixPolicy policy;
  KvStore store;
  ThreadPool pool{1};
  std::unique_ptr<KvSequence> seq;
  FilledChunk(const ComixOptions& o, uint32_t seed, size_t blocks = 8)
      : policy(o), store(KvStoreOptions{.n_layer = kComixLayers, .shape = kComixShape}, &policy) {
    std::mt19937 rng(seed);
    seq = store.NewSequence(blocks * 32);
    const Status st = policy.AddUnit(seq->id(), blocks * 32, 0, 1.0, "chunk");
    EXPECT_TRUE(st.ok()) << st.message();
    for (size_t i = 0; i < blocks; ++i) AppendGaussianRows(*seq, 32, rng, pool, true);
  }
  ~FilledChunk() { policy.RemoveUnit(seq->id()); }
};

}  // namespace chorus::test
