// KvFootprint, the one projection: exact where it can be (bookkeeping, scratch), an upper bound of
// what a sequence holds at every instant (sampled inside each step, where the old window, the
// native rows and the new blocks coexist) and reached at a seal step; and the budget promise it
// makes possible — sequences admitted by the projection under random joins, steps and finishes
// never fail to store their KV and the store's high-water mark stays within the budget.
#include "kv/kv_footprint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "kv/kv_batch.h"
#include "kv/kv_store.h"

namespace chorus {
namespace {

constexpr AttentionShape kShape{.n_head = 6, .n_head_kv = 2, .head_dim = 64};

// Fixed formats; at every block (mid-step) records what the watched sequence holds.
class Watch : public PrecisionPolicy {
 public:
  BlockFormats FormatFor(const BlockInfo& info) override {
    Sample();
    return info.first_pos < 32 ? BlockFormats{} : BlockFormats{.k = KvFormat::kTq4, .v = KvFormat::kQ8};
  }
  void Sample() {
    if (seq) peak = std::max(peak, seq->own_bytes());
    if (store) {
      ++samples;
      consistent &= store->held() == store->Usage().total();
    }
  }
  const KvSequence* seq = nullptr;
  const KvStore* store = nullptr;
  size_t peak = 0, samples = 0;
  bool consistent = true;
};

std::vector<float> Randn(size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> nd;
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng) * scale;
  return v;
}

Status Feed(KvSequence& s, size_t n, size_t layers, std::mt19937& rng, ThreadPool& pool) {
  auto k = Randn(n * kShape.kv_dim(), rng, 2), v = Randn(n * kShape.kv_dim(), rng, 1);
  auto q = Randn(n * kShape.q_dim(), rng, 0.125f);
  std::vector<float> out(n * kShape.q_dim());
  for (size_t l = 0; l < layers; ++l)
    CHORUS_RETURN_IF_ERROR(s.AppendAndAttend(l, n, k.data(), v.data(), q.data(), out.data(), pool));
  s.Commit(n);
  return Status::Ok();
}

TEST(KvFootprint, BookkeepingAndScratchAreExact) {
  Watch policy;
  for (WindowFormat wf : {WindowFormat::kF16, WindowFormat::kQ8})
    for (size_t threads : {1u, 2u, 4u}) {
      const KvStoreOptions o{.n_layer = 3, .shape = kShape, .window = wf, .threads = threads};
      KvStore store(o, &policy);
      const KvFootprint fp(o);
      EXPECT_EQ(store.Usage().scratch_bytes, fp.Overhead(threads)) << threads << " threads";
      for (size_t cap : {1u, 31u, 32u, 100u, 4096u}) {
        auto s = store.NewSequence(cap);
        EXPECT_EQ(s->table_bytes(), fp.Bookkeeping(cap)) << "capacity " << cap;
        EXPECT_EQ(store.held(), store.Usage().total());
      }
      ThreadPool pool(threads);
      std::mt19937 rng(1);
      auto doc = store.NewSequence(150);
      ASSERT_TRUE(Feed(*doc, 150, 3, rng, pool).ok());
      EXPECT_EQ(doc->table_bytes(), fp.Bookkeeping(150)) << "tables are reserved: they never grow";
      EXPECT_EQ(store.Usage().scratch_bytes, fp.Overhead(threads)) << "the scratch never grows";
    }
}

// Prefill in chunks, then decode to capacity: what the sequence holds, sampled at every block
// sealed (mid-step) and after every step, never exceeds its projection, and a seal step reaches
// the decoding bound exactly (old window + 32 native rows at once).
TEST(KvFootprint, BoundsEveryInstantAndIsReached) {
  for (WindowFormat wf : {WindowFormat::kF16, WindowFormat::kQ8}) {
    for (size_t chunk : {1u, 32u, 100u}) {
      Watch policy;
      const KvStoreOptions o{.n_layer = 2, .shape = kShape, .window = wf};
      KvStore store(o, &policy);
      const KvFootprint fp(o);
      ThreadPool pool(1);
      std::mt19937 rng(2 + chunk);
      const size_t cap = 230, prompt = 150;
      auto s = store.NewSequence(cap);
      policy.seq = s.get();
      policy.store = &store;
      for (size_t done = 0; done < prompt; done += chunk) {
        ASSERT_TRUE(Feed(*s, std::min(chunk, prompt - done), 2, rng, pool).ok());
        policy.Sample();
      }
      EXPECT_LE(policy.peak, fp.Decoding(cap) + fp.AppendExtra(chunk)) << WindowFormatName(wf) << " chunk " << chunk;
      if (chunk % kBlockTokens == 0) {  // every chunk starts at a block boundary: no window to keep
        EXPECT_LE(policy.peak, fp.Decoding(cap) + fp.PrefillExtra(chunk)) << WindowFormatName(wf) << " chunk " << chunk;
      }
      policy.peak = 0;
      while (s->size() < cap) {
        ASSERT_TRUE(Feed(*s, 1, 2, rng, pool).ok());
        policy.Sample();
      }
      EXPECT_LE(policy.peak, fp.Decoding(cap)) << WindowFormatName(wf);
      EXPECT_EQ(policy.peak, fp.Decoding(cap)) << "a seal step holds the whole decoding bound";
      EXPECT_TRUE(policy.consistent) << "held() must equal the walk of the live objects mid-step";
      EXPECT_GT(policy.samples, 10u);
    }
  }
}

// The budget promise: a document's blocks (held by the test, as a context holds them) and agents
// reading them, admitted only if the projection of everything (the store's overhead, one
// prefill's extra, the pool's slack, the document's blocks as measured, every
// agent at blocks + Decoding of its capacity) fits; random joins, batched steps and finishes. No
// append ever fails, and the high-water mark — the most held at any instant, inside steps
// included — stays ≤ the budget; budgets chosen tight enough that agents are refused.
TEST(KvFootprint, AdmittedByProjectionNeverExceedsTheBudget) {
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    std::mt19937 rng(seed);
    Watch policy;
    const size_t budget = 900'000 + (rng() % 4) * 150'000;
    const KvStoreOptions o{.n_layer = 2, .shape = kShape, .budget_bytes = budget, .window = WindowFormat::kQ8,
                           .threads = 2};
    KvStore store(o, &policy);
    policy.store = &store;
    const KvFootprint fp(o);
    ThreadPool pool(2);
    constexpr size_t kChunk = 64;
    std::vector<std::vector<BlockId>> doc_blocks(2);  // the document's full blocks, one ref each
    {
      auto doc = store.NewSequence(300);
      for (size_t done = 0; done < 300; done += kChunk)
        ASSERT_TRUE(Feed(*doc, std::min<size_t>(kChunk, 300 - done), 2, rng, pool).ok());
      for (size_t l = 0; l < 2; ++l)
        for (BlockId id : doc->blocks(l)) {
          store.pool().Ref(id);
          doc_blocks[l].push_back(id);
        }
    }
    const size_t doc_tokens = doc_blocks[0].size() * kBlockTokens;
    const size_t block = fp.Block(KvFormat::kTq4, KvFormat::kQ8);
    struct Agent {
      std::unique_ptr<KvSequence> seq;
      size_t peak;
    };
    std::map<int, Agent> agents;
    int next = 0;
    size_t admitted = 0, refused = 0;
    for (int step = 0; step < 300; ++step) {
      if (rng() % 3 == 0) {  // a join: a prompt of up to 100 tokens, answers of up to 120
        const size_t prompt = 1 + rng() % 100, cap = doc_tokens + prompt + 1 + rng() % 120;
        const size_t peak = o.n_layer * (cap / kBlockTokens - doc_tokens / kBlockTokens) * block + fp.Decoding(cap);
        size_t projected = fp.Overhead(2) + fp.PrefillExtra(kChunk) + store.pool().SlackAllowance() + peak;
        for (int l = 0; l < 2; ++l)
          for (BlockId id : doc_blocks[l]) projected += BlockPool::BlockCost(store.pool().meta(id).k_bytes,
                                                                                store.pool().meta(id).v_bytes);
        for (const auto& [id, a] : agents) projected += a.peak;
        if (projected > budget) {
          ++refused;
        } else {
          ++admitted;
          Agent a{store.NewSequence(cap, {.tables = doc_blocks}), peak};
          for (size_t done = 0; done < prompt; done += kChunk)
            ASSERT_TRUE(Feed(*a.seq, std::min(kChunk, prompt - done), 2, rng, pool).ok()) << "seed " << seed;
          agents[next++] = std::move(a);
        }
      }
      if (!agents.empty()) {  // one batched step for every agent
        KvBatch batch(store);
        for (auto& [id, a] : agents) batch.Add(a.seq.get(), 1);
        const size_t n = agents.size();
        auto k = Randn(n * kShape.kv_dim(), rng, 2), v = Randn(n * kShape.kv_dim(), rng, 1);
        auto q = Randn(n * kShape.q_dim(), rng, 0.125f);
        std::vector<float> out(n * kShape.q_dim());
        for (size_t l = 0; l < 2; ++l) {
          Status s = batch.AppendAndAttend(l, n, k.data(), v.data(), q.data(), out.data(), pool);
          ASSERT_TRUE(s.ok()) << "seed " << seed << " step " << step << ": " << s.message();
        }
        batch.Commit(n);
      }
      for (auto it = agents.begin(); it != agents.end();)  // finish at capacity, or at random
        it = it->second.seq->size() == it->second.seq->capacity() || rng() % 40 == 0 ? agents.erase(it) : std::next(it);
      ASSERT_LE(store.high_water(), budget) << "seed " << seed << " step " << step;
    }
    EXPECT_TRUE(policy.consistent);
    EXPECT_GT(admitted, 5u) << "seed " << seed;
    EXPECT_GT(refused, 0u) << "seed " << seed << ": the budget should be tight enough to refuse agents";
    std::printf("seed %u: budget %zu, high water %zu (%.1f %%), %zu admitted, %zu refused\n", seed, budget,
                store.high_water(), 100.0 * store.high_water() / budget, admitted, refused);
    agents.clear();
    for (const auto& t : doc_blocks)
      for (BlockId id : t) store.pool().Unref(id);
  }
}

}  // namespace
}  // namespace chorus
