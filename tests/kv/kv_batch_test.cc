// KvBatch: a batched step of several agents over shared borrowed blocks equals each agent attended
// alone, bit for bit, also with prefill rows in the same step; shared blocks are stored once.
#include "kv/kv_batch.h"

#include <gtest/gtest.h>

#include <algorithm>
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

std::vector<std::vector<BlockId>> Tables(const KvSequence& s, size_t layers) {
  std::vector<std::vector<BlockId>> t;
  for (size_t l = 0; l < layers; ++l) t.push_back(s.blocks(l));
  return t;
}

// Agents borrowing a document's blocks, batched, get exactly what each gets alone, and the
// borrowed blocks are stored once whatever the number of readers. 15 agents on 3 threads: the
// decode rows of a KV head are split across threads mid-head (PlanUnits' equal spans), so a row
// that were dropped, or attended with another row's queries, would fail it.
void BatchedEqualsAlone(size_t N, int threads) {
  SCOPED_TRACE(testing::Message() << N << " agents, " << threads << " threads");
  Mixed policy;
  KvStore store({.n_layer = 2, .shape = kShape}, &policy);
  ThreadPool pool(threads);
  std::mt19937 rng(7);
  auto doc = store.NewSequence(300);
  Feed(*doc, 256, rng, pool, 2);  // 8 sealed blocks
  const auto shared = Tables(*doc, 2);
  const size_t doc_bytes = store.pool().payload_bytes();  // the document's 2 x 8 blocks
  std::vector<std::unique_ptr<KvSequence>> a, b;  // two identical sets of agents
  for (size_t i = 0; i < N; ++i) {
    a.push_back(store.NewSequence(600, {.tables = shared}));
    b.push_back(store.NewSequence(600, {.tables = shared}));
    EXPECT_EQ(a.back()->size(), 256u);
    EXPECT_EQ(a.back()->borrowed_blocks(), 8u);
  }
  ASSERT_GT(doc_bytes, 0u);
  doc.reset();  // the readers hold the blocks now
  EXPECT_EQ(store.pool().payload_bytes(), doc_bytes);  // 2N readers, the blocks stored once
  for (size_t i = 0; i < N; ++i) {
    std::mt19937 r1(100 + i), r2(100 + i);
    Feed(*a[i], 3 + 11 * i, r1, pool, 2);  // private prompts of different lengths
    Feed(*b[i], 3 + 11 * i, r2, pool, 2);
    EXPECT_EQ(a[i]->Position(0), 256 + 3 + 11 * i);
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
      for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "step " << step << " i " << i;
    }
    batch.Commit(N);
    for (auto& s : b) s->Commit(1);
  }
  a.clear();
  b.clear();
  EXPECT_EQ(store.pool().payload_bytes(), 0u);  // nobody holds the document's blocks any more
}

TEST(KvBatch, BatchedStepEqualsAgentsAlone) {
  BatchedEqualsAlone(5, 2);
  BatchedEqualsAlone(15, 3);
}

// One step: a's sequences batched (rows[i] rows each, every layer) against b's, the same sequences
// advanced alone: every output equal, bit for bit. Commits both.
void BatchedStepEqualsAlone(KvStore& store, ThreadPool& pool, std::mt19937& rng,
                            const std::vector<std::unique_ptr<KvSequence>>& a,
                            const std::vector<std::unique_ptr<KvSequence>>& b, const std::vector<size_t>& rows) {
  size_t total = 0;
  for (size_t r : rows) total += r;
  auto k = Randn(total * kShape.kv_dim(), rng, 2), v = Randn(total * kShape.kv_dim(), rng, 1);
  auto q = Randn(total * kShape.q_dim(), rng, 0.125f);
  KvBatch batch(store);
  for (size_t i = 0; i < a.size(); ++i) batch.Add(a[i].get(), rows[i]);
  for (size_t l = 0; l < 2; ++l) {
    std::vector<float> got(total * kShape.q_dim()), want(total * kShape.q_dim());
    ASSERT_TRUE(batch.AppendAndAttend(l, total, k.data(), v.data(), q.data(), got.data(), pool).ok());
    size_t r0 = 0;
    for (size_t i = 0; i < b.size(); ++i) {
      ASSERT_TRUE(b[i]->AppendAndAttend(l, rows[i], k.data() + r0 * kShape.kv_dim(), v.data() + r0 * kShape.kv_dim(),
                                        q.data() + r0 * kShape.q_dim(), want.data() + r0 * kShape.q_dim(), pool)
                      .ok());
      r0 += rows[i];
    }
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "layer " << l << " i " << i;
  }
  batch.Commit(total);
  for (size_t i = 0; i < b.size(); ++i) b[i]->Commit(rows[i]);
}

// A step mixing decode rows of agents on a shared run, a prefill chunk of one of them (60 rows,
// crossing block boundaries), and an unrelated sequence: every row equals the same sequence
// advanced alone, bit for bit (the grouping and stacking change no result).
TEST(KvBatch, MixedDecodeAndPrefillRowsEqualAlone) {
  Mixed policy;
  KvStore store({.n_layer = 2, .shape = kShape}, &policy);
  ThreadPool pool(2);
  std::mt19937 rng(11);
  auto doc = store.NewSequence(200);
  Feed(*doc, 160, rng, pool, 2);
  const auto shared = Tables(*doc, 2);
  // sizes: two readers of the document at different depths, one prefilling reader, a loner
  const std::vector<size_t> pre = {5, 40, 0, 70}, rows = {1, 1, 60, 1};
  std::vector<std::unique_ptr<KvSequence>> a, b;
  for (size_t i = 0; i < pre.size(); ++i) {
    const bool reader = i < 3;
    a.push_back(reader ? store.NewSequence(400, {.tables = shared}) : store.NewSequence(400));
    b.push_back(reader ? store.NewSequence(400, {.tables = shared}) : store.NewSequence(400));
    if (pre[i]) {
      std::mt19937 r1(50 + i), r2(50 + i);
      Feed(*a[i], pre[i], r1, pool, 2);
      Feed(*b[i], pre[i], r2, pool, 2);
    }
  }
  ASSERT_NO_FATAL_FAILURE(BatchedStepEqualsAlone(store, pool, rng, a, b, rows));
}

// A step in which every agent seals a block: the batch defers the encodings and runs them over the
// pool (KvStore::EncodeDeferredSeals, blocks dealt round-robin to the threads). Each new block's bytes
// and every attention output equal the same agent advanced alone (its seal encoded at once), at 1, 2
// and 3 threads, with prefill rows sealing several blocks in the same step.
TEST(KvBatch, SealsEncodedOverThePoolEqualSealsAlone) {
  for (int threads : {1, 2, 3}) {
    SCOPED_TRACE(testing::Message() << threads << " threads");
    Mixed policy;
    KvStore store({.n_layer = 2, .shape = kShape}, &policy);
    ThreadPool pool(threads);
    std::mt19937 rng(23);
    const std::vector<size_t> pre = {31, 63, 31, 95, 31, 0, 31}, rows = {1, 1, 1, 1, 1, 70, 1};
    std::vector<std::unique_ptr<KvSequence>> a, b;
    for (size_t i = 0; i < pre.size(); ++i) {
      a.push_back(store.NewSequence(200));
      b.push_back(store.NewSequence(200));
      if (pre[i]) {
        std::mt19937 r1(80 + i), r2(80 + i);
        Feed(*a[i], pre[i], r1, pool, 2);
        Feed(*b[i], pre[i], r2, pool, 2);
      }
    }
    ASSERT_NO_FATAL_FAILURE(BatchedStepEqualsAlone(store, pool, rng, a, b, rows));
    size_t sealed = 0;
    for (size_t i = 0; i < a.size(); ++i)
      for (size_t l = 0; l < 2; ++l) {
        const std::vector<BlockId> ta = a[i]->blocks(l), tb = b[i]->blocks(l);
        ASSERT_EQ(ta.size(), (pre[i] + rows[i]) / kBlockTokens);
        ASSERT_EQ(ta.size(), tb.size());
        for (size_t j = pre[i] / kBlockTokens; j < ta.size(); ++j, ++sealed) {
          const BlockMeta &ma = store.pool().meta(ta[j]), &mb = store.pool().meta(tb[j]);
          ASSERT_EQ(ma.k_bytes, mb.k_bytes);
          const size_t n = ma.k_bytes + ma.v_bytes;
          ASSERT_EQ(n, mb.k_bytes + mb.v_bytes);
          ASSERT_TRUE(std::equal(ma.data, ma.data + n, mb.data)) << "agent " << i << " layer " << l << " block " << j;
        }
      }
    EXPECT_EQ(sealed, 2u * (6 + 2));  // 6 decode rows seal one block each, the prefill two; per layer
  }
}

}  // namespace
}  // namespace chorus
