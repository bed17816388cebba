// Sliding-window layers of the KV store (KvStoreOptions::layer_window): a local layer's token at
// position p attends exactly positions (p - W, p] — masked per token inside a partly covered
// block —, decode-faithful prefill stays bit-identical to token-by-token decode, a batched step
// over a shared prefix equals each agent alone, and blocks no reader's window reaches are freed
// at once (and never read again).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kv/dense_kv_cache.h"
#include "kv/kv_batch.h"
#include "kv/kv_store.h"

namespace chorus {
namespace {

constexpr AttentionShape kShape{.n_head = 4, .n_head_kv = 2, .head_dim = 64};
constexpr uint32_t kWindow = 80;  // not a multiple of 32: the edge cuts through blocks
const std::vector<uint32_t> kWindows = {kWindow, 0};  // layer 0 local, layer 1 global

class CyclePolicy : public PrecisionPolicy {
 public:
  explicit CyclePolicy(std::vector<std::pair<KvFormat, KvFormat>> f) : f_(std::move(f)) {}
  BlockFormats FormatFor(const BlockInfo& info) override {
    auto [k, v] = f_[(info.block_index + info.layer) % f_.size()];
    return BlockFormats{.k = k, .v = v};
  }

 private:
  std::vector<std::pair<KvFormat, KvFormat>> f_;
};

struct Rows {
  std::vector<float> k, v, q;
};

Rows RandomRows(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  Rows r{std::vector<float>(n * kShape.kv_dim()), std::vector<float>(n * kShape.kv_dim()),
         std::vector<float>(n * kShape.q_dim())};
  for (auto& x : r.k) x = nd(rng) * 2.0f;
  for (auto& x : r.v) x = nd(rng);
  for (auto& x : r.q) x = nd(rng) * 0.125f;
  return r;
}

// Runs rows through both layers of seq (out: layer-major (2, n, q_dim)) and commits them.
std::vector<float> Step(SequenceKv& seq, const Rows& r, size_t n, ThreadPool& pool) {
  std::vector<float> out(2 * n * kShape.q_dim());
  for (size_t l = 0; l < 2; ++l)
    EXPECT_TRUE(seq.AppendAndAttend(l, n, r.k.data(), r.v.data(), r.q.data(), out.data() + l * n * kShape.q_dim(), pool)
                    .ok());
  seq.Commit(n);
  return out;
}

// Catches: a window edge off by one, a partly covered block not masked (or masked for the wrong
// rows), a local layer attending everything; f16 blocks must equal the fp16 dense reference,
// which masks by position (DenseKvCache with the same windows).
TEST(SlidingWindow, F16BlocksEqualDenseWindowedReference) {
  CyclePolicy f16({{KvFormat::kF16, KvFormat::kF16}});
  KvStore store({.n_layer = 2, .shape = kShape, .layer_window = kWindows}, &f16);
  DenseKvCache dense(2, 400, kShape, kWindows);
  auto seq = store.NewSequence(400);
  ThreadPool pool(2);
  std::mt19937 rng(3);
  for (size_t n : {45u, 130u, 1u, 1u, 7u, 64u, 33u}) {
    Rows r = RandomRows(n, rng);
    const auto got = Step(*seq, r, n, pool), want = Step(dense, r, n, pool);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-5f) << "batch of " << n << " i " << i;
  }
  // A global-layer reference differs once the window bites: the comparison above can fail.
  DenseKvCache global(2, 400, kShape);
  std::mt19937 rng2(3);
  auto seq2 = store.NewSequence(400);
  double max_diff = 0;
  for (size_t n : {45u, 130u}) {
    Rows r = RandomRows(n, rng2);
    const auto got = Step(*seq2, r, n, pool), want = Step(global, r, n, pool);
    for (size_t i = 0; i < n * kShape.q_dim(); ++i) max_diff = std::max<double>(max_diff, std::abs(got[i] - want[i]));
  }
  EXPECT_GT(max_diff, 1e-2) << "the local layer attended beyond its window";
}

// Catches: stacking that folds a window's edge block in a different order or with another
// token's mask than token-by-token decode does (bits differ), on compressed formats.
TEST(SlidingWindow, PrefillEqualsTokenByTokenBitwise) {
  CyclePolicy policy({{KvFormat::kTq4, KvFormat::kTq3}, {KvFormat::kKivi4, KvFormat::kKivi2}, {KvFormat::kQ8, KvFormat::kF16}});
  for (WindowFormat wf : {WindowFormat::kF16, WindowFormat::kQ8}) {
    KvStore store({.n_layer = 2, .shape = kShape, .window = wf, .layer_window = kWindows}, &policy);
    auto batched = store.NewSequence(400), single = store.NewSequence(400);
    ThreadPool pool(2);
    std::mt19937 rng(7);
    for (size_t n : {45u, 130u, 7u, 96u}) {
      Rows r = RandomRows(n, rng);
      const auto out = Step(*batched, r, n, pool);
      for (size_t t = 0; t < n; ++t) {
        Rows one{{r.k.begin() + t * kShape.kv_dim(), r.k.begin() + (t + 1) * kShape.kv_dim()},
                 {r.v.begin() + t * kShape.kv_dim(), r.v.begin() + (t + 1) * kShape.kv_dim()},
                 {r.q.begin() + t * kShape.q_dim(), r.q.begin() + (t + 1) * kShape.q_dim()}};
        const auto o = Step(*single, one, 1, pool);
        for (size_t l = 0; l < 2; ++l)
          for (size_t i = 0; i < kShape.q_dim(); ++i)
            ASSERT_EQ(out[(l * n + t) * kShape.q_dim() + i], o[l * kShape.q_dim() + i])
                << WindowFormatName(wf) << " batch of " << n << ", token " << t << ", layer " << l;
      }
    }
  }
}

// Catches: blocks kept after no window can reach them (bytes), or freed too early (then the
// dense comparison above, and the CHORUS_CHECK in the fold, fail).
TEST(SlidingWindow, FreesBlocksNoWindowReaches) {
  CyclePolicy f16({{KvFormat::kF16, KvFormat::kF16}});
  KvStore store({.n_layer = 2, .shape = kShape, .layer_window = kWindows}, &f16);
  auto seq = store.NewSequence(1000);
  ThreadPool pool(2);
  std::mt19937 rng(5);
  size_t pos = 0;
  for (size_t n : {100u, 300u, 1u, 31u, 200u}) {
    Step(*seq, RandomRows(n, rng), n, pool);
    pos += n;
    // The next token (position pos) sees (pos - W, pos]: a block [32 i, 32 i + 32) is needed iff
    // 32 i + 32 > pos + 1 - W.
    const size_t lo = pos + 1 > kWindow ? pos + 1 - kWindow : 0;
    const size_t first_needed = lo / kBlockTokens, sealed = pos / kBlockTokens;
    EXPECT_EQ(seq->first_block(0), first_needed) << "at " << pos;
    EXPECT_EQ(seq->blocks(0).size(), sealed - first_needed) << "at " << pos;
    EXPECT_EQ(seq->first_block(1), 0u);
    EXPECT_EQ(seq->blocks(1).size(), sealed);
    EXPECT_EQ(store.pool().live_blocks(), seq->blocks(0).size() + sealed) << "freed blocks went back to the pool";
  }
}

// A shared document: its local layer keeps only the tail its readers can reach; agents at
// different positions in one batched step (the window edge cuts the prefix differently for
// each) equal each agent alone, bit for bit; freed blocks reused by another sequence with other
// contents are never read (the outputs would change, or the fold's check would abort).
TEST(SlidingWindow, SharedPrefixKeepsTailAndBatchEqualsAlone) {
  CyclePolicy policy({{KvFormat::kQ8, KvFormat::kTq3}, {KvFormat::kTq4, KvFormat::kKivi4}});
  KvStore store({.n_layer = 2, .shape = kShape, .window = WindowFormat::kQ8, .layer_window = kWindows}, &policy);
  ThreadPool pool(2);
  std::mt19937 rng(11);
  auto doc = store.NewSequence(600);
  Step(*doc, RandomRows(500, rng), 500, pool);  // 15 sealed blocks + a 20-token tail
  doc->Freeze();
  // Readers start at 500: they see (500 - 80, ...] → blocks from 419/32 = 13 on.
  EXPECT_EQ(doc->first_block(0), (500 + 1 - kWindow) / kBlockTokens);
  EXPECT_EQ(doc->blocks(0).size(), 15u - (500 + 1 - kWindow) / kBlockTokens);
  EXPECT_EQ(doc->blocks(1).size(), 15u);
  std::shared_ptr<const KvSequence> shared(std::move(doc));
  // Another sequence takes over the freed ids with different contents.
  auto other = store.NewSequence(400);
  Step(*other, RandomRows(300, rng), 300, pool);

  const size_t N = 4;
  std::vector<std::unique_ptr<KvSequence>> a, b;
  for (size_t i = 0; i < N; ++i) {
    a.push_back(store.NewSequence(200, shared));
    b.push_back(store.NewSequence(200, shared));
    std::mt19937 r1(100 + i), r2(100 + i);
    const size_t prompt = 5 + 23 * i;  // 5 .. 74: edges from 426 to 495, some past the prefix tail start
    Step(*a.back(), RandomRows(prompt, r1), prompt, pool);
    Step(*b.back(), RandomRows(prompt, r2), prompt, pool);
  }
  for (int step = 0; step < 40; ++step) {
    Rows r = RandomRows(N, rng);
    KvBatch batch(store);
    for (auto& s : a) batch.Add(s.get(), 1);
    for (size_t l = 0; l < 2; ++l) {
      std::vector<float> got(N * kShape.q_dim()), want(N * kShape.q_dim());
      ASSERT_TRUE(batch.AppendAndAttend(l, N, r.k.data(), r.v.data(), r.q.data(), got.data(), pool).ok());
      for (size_t i = 0; i < N; ++i)
        ASSERT_TRUE(b[i]->AppendAndAttend(l, 1, r.k.data() + i * kShape.kv_dim(), r.v.data() + i * kShape.kv_dim(),
                                          r.q.data() + i * kShape.q_dim(), want.data() + i * kShape.q_dim(), pool)
                        .ok());
      for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "step " << step << " layer " << l << " i " << i;
    }
    batch.Commit(N);
    for (auto& s : b) s->Commit(1);
  }
}

}  // namespace
}  // namespace chorus
