// CoMix: the knapsack (budget held, better error per byte wins, weights count), and the budget as a
// promise on a real KvStore under random joins, decodes and finishes (measured bytes ≤ budget).
#include "policy/comix_policy.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "kv/kv_store.h"
#include "comix_fixture.h"
#include "util/thread_pool.h"

namespace chorus {
namespace {

ComixItem Item(double w, size_t blocks, double e2, double e3, double e4) {
  return ComixItem{.weight = w, .blocks = blocks, .err = {e2, e3, e4}, .bytes = {100, 140, 180}};
}

TEST(ComixAlloc, StartsAtTwoBitsAndRespectsCapacity) {
  std::vector<ComixItem> items = {Item(1, 10, 5, 2, 1), Item(1, 10, 1, 0.5, 0.2)};
  ComixAllocation a = AllocateComix(items, 2000);  // exactly all-2-bit
  ASSERT_TRUE(a.feasible);
  EXPECT_EQ(a.choice, (std::vector<int>{0, 0}));
  a = AllocateComix(items, 1999);
  EXPECT_FALSE(a.feasible);
  a = AllocateComix(items, 2400);  // room for one upgrade 2→3 (400 bytes): the sensitive item gets it
  ASSERT_TRUE(a.feasible);
  EXPECT_EQ(a.choice, (std::vector<int>{1, 0}));
  EXPECT_LE(a.bytes, 2400u);
  a = AllocateComix(items, 1u << 20);  // unlimited: everything at 4 bits
  EXPECT_EQ(a.choice, (std::vector<int>{2, 2}));
}

TEST(ComixAlloc, SharedUnitWeightedByReaders) {
  // Same bound, same bytes: the unit read by 4 agents wins the one affordable upgrade.
  std::vector<ComixItem> items = {Item(1, 10, 3, 1, 0.5), Item(4, 10, 3, 1, 0.5)};
  const ComixAllocation a = AllocateComix(items, 2400);
  ASSERT_TRUE(a.feasible);
  EXPECT_EQ(a.choice, (std::vector<int>{0, 1}));
}

// (Random items never exceeding the capacity, with 1–4 choices each: allocator_test.cc.)

constexpr AttentionShape kShape = test::kComixShape;
constexpr size_t kLayers = test::kComixLayers;

ComixOptions Options(size_t budget) { return test::ComixTestOptions(budget); }

TEST(ComixPolicy, BadBudgetNamesTheMinimum) {
  const size_t min = ComixPolicy::MinimumBudget(Options(0));
  Status s = ComixPolicy::Validate(Options(min - 1));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(std::to_string(min)), std::string::npos) << s.message();
  EXPECT_TRUE(ComixPolicy::Validate(Options(min)).ok());
  ComixOptions o = Options(0);
  o.avg_bits = 1.5;
  EXPECT_FALSE(ComixPolicy::Validate(o).ok());
  o.avg_bits = 9;
  EXPECT_FALSE(ComixPolicy::Validate(o).ok());
}

// Random joins, decode steps and finishes on a real KvStore: the most the KV layer ever held at
// once (its high-water mark, inside appends included: windows, native rows, scratch, slots) never
// exceeds the budget, refused agents get a message and leave the others untouched (their appends
// keep succeeding), and every byte goes back when all have finished.
TEST(ComixPolicy, BudgetHoldsUnderRandomJoinsAndFinishes) {
  ThreadPool pool(1);
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    std::mt19937 rng(seed);
    // 280-440 KB of room beside the attention's part states (kPartSlots × n_head) and its per-thread
    // merge accumulator. (Before, prefills here started anywhere and an admitted agent's window append
    // failed below ~380 KB: an Append off a block boundary keeps the old window for Rollback, which
    // the projection leaves out by contract — KvFootprint::AppendExtra — and the engine never does.)
    const size_t part_bytes = (kPartSlots * kShape.n_head + kStackTokens * (kShape.n_head / kShape.n_head_kv) + 1) *
                              BlockAttention::PartStateFloats(kShape.head_dim) * sizeof(float);
    // and beside BlockAttention's int8 queries with their 16 zero rows for the AMX kernels (reserved on every CPU)
    const size_t qp_bytes = (kStackTokens * (kShape.n_head / kShape.n_head_kv) + 16) * kShape.head_dim;
    const size_t budget = 280'000 + part_bytes + qp_bytes + (rng() % 5) * 40'000;
    ComixPolicy policy(Options(budget));
    KvStore store(KvStoreOptions{.n_layer = kLayers, .shape = kShape, .budget_bytes = budget}, &policy);
    policy.SetStore(&store);
    struct Agent {
      std::unique_ptr<KvSequence> seq;
      size_t left;
      float scale;
    };
    std::vector<Agent> agents;
    size_t refused = 0, admitted = 0, peak = 0;
    std::normal_distribution<float> nd;
    std::vector<float> k, v, q, out;
    for (int step = 0; step < 400; ++step) {
      const int action = int(rng() % 10);
      if (action == 0 || agents.empty()) {  // join
        const size_t cap = 32 * (1 + rng() % 8) + rng() % 32;
        auto seq = store.NewSequence(cap);
        Status s = policy.AddUnit(seq->id(), cap, 0, 1.0, "agent " + std::to_string(seq->id()));
        if (!s.ok()) {
          EXPECT_NE(s.message().find("refused"), std::string::npos) << s.message();
          ++refused;
          continue;
        }
        ++admitted;
        agents.push_back({std::move(seq), cap, 0.2f + float(rng() % 8)});
      } else if (action == 1) {  // finish one
        const size_t i = rng() % agents.size();
        policy.RemoveUnit(agents[i].seq->id());
        agents.erase(agents.begin() + i);
      } else {  // one decode token for a random agent (or a short prefill)
        Agent& a = agents[rng() % agents.size()];
        // A prefill starts at a block boundary, as the engine's prompt chunks do (KvFootprint's
        // contract: an Append elsewhere would keep the old window for Rollback, AppendExtra).
        const bool prefill = action == 2 && a.seq->size() % kBlockTokens == 0;
        const size_t n = std::min<size_t>(a.left, prefill ? 1 + rng() % 40 : 1);
        if (n == 0) continue;
        k.resize(n * kShape.kv_dim()), v.resize(k.size()), q.resize(n * kShape.q_dim()), out.resize(q.size());
        for (auto& x : k) x = nd(rng) * a.scale;
        for (auto& x : v) x = nd(rng) * a.scale;
        for (auto& x : q) x = nd(rng) * 0.3f;
        for (size_t l = 0; l < kLayers; ++l) {
          Status st = a.seq->AppendAndAttend(l, n, k.data(), v.data(), q.data(), out.data(), pool);
          ASSERT_TRUE(st.ok()) << "seed " << seed << " step " << step << " layer " << l << " n " << n << " at "
                               << a.seq->size() << ": " << st.message();
        }
        a.seq->Commit(n);
        a.left -= n;
      }
      const size_t used = store.high_water();
      peak = std::max(peak, used);
      ASSERT_EQ(store.held(), store.Usage().total());
      ASSERT_LE(used, budget) << "seed " << seed << " step " << step << " blocks " << store.Usage().block_bytes
                              << " windows " << store.Usage().window_bytes << " tables " << store.Usage().table_bytes
                              << " committed " << policy.committed_bytes() << " last event "
                              << policy.events().back().why << " " << policy.events().back().projected << "/"
                              << policy.events().back().capacity << "\n" << policy.HeatMap();
    }
    EXPECT_GT(admitted, 3u);
    EXPECT_GT(refused, 0u) << "the budget should be tight enough to refuse someone (seed " << seed << ")";
    for (Agent& a : agents) policy.RemoveUnit(a.seq->id());
    agents.clear();
    EXPECT_EQ(policy.committed_bytes(), 0u);
  }
}

// split_kv off: every (unit, layer) gets one bit width for K and V; on: the rows may differ.
TEST(ComixPolicy, JointAllocationGivesKAndVTheSameBits) {
  for (bool split : {false, true}) {
    ComixOptions o = Options(0);
    o.avg_bits = 3;
    o.split_kv = split;
    ComixPolicy policy(o);
    KvStore store(KvStoreOptions{.n_layer = kLayers, .shape = kShape}, &policy);
    ThreadPool pool(1);
    std::mt19937 rng(5);
    std::normal_distribution<float> nd;
    std::vector<std::unique_ptr<KvSequence>> seqs;
    for (int a = 0; a < 3; ++a) {
      seqs.push_back(store.NewSequence(256));
      ASSERT_TRUE(policy.AddUnit(seqs.back()->id(), 256, 0, 1.0, "agent").ok());
    }
    const size_t n = 100;
    std::vector<float> k(n * kShape.kv_dim()), v(k.size()), q(n * kShape.q_dim()), out(q.size());
    for (int a = 0; a < 3; ++a) {
      for (size_t l = 0; l < kLayers; ++l) {
        const float ks = 0.5f + float(a + l), vs = 2.0f / float(1 + a + l);  // units differ
        for (auto& x : k) x = nd(rng) * ks;
        for (auto& x : v) x = nd(rng) * vs;
        for (auto& x : q) x = nd(rng) * 0.3f;
        ASSERT_TRUE(seqs[a]->AppendAndAttend(l, n, k.data(), v.data(), q.data(), out.data(), pool).ok());
      }
      seqs[a]->Commit(n);
    }
    // Heat map: "K <digits>" then "V <digits>" per unit.
    const std::string map = policy.HeatMap();
    size_t differ = 0;
    for (size_t p = map.find(" K "); p != std::string::npos; p = map.find(" K ", p + 1)) {
      const std::string krow = map.substr(p + 3, kLayers);
      const size_t pv = map.find(" V ", p);
      ASSERT_NE(pv, std::string::npos);
      differ += krow != map.substr(pv + 3, kLayers);
    }
    if (!split) { EXPECT_EQ(differ, 0u) << map; }
    for (auto& s : seqs) policy.RemoveUnit(s->id());
  }
}

}  // namespace
}  // namespace chorus
