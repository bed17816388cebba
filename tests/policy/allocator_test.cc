// One allocator for CoMix and Cocktail (issue 19): tiers of any width set, a key floor, relevance
// runs weighting a unit's blocks, and the errors for a byte target the cheapest tiers cannot meet.
// Synthetic activations on a real KvStore (3 layers, 2 KV heads): fast, no model.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kv/kv_store.h"
#include "comix_fixture.h"
#include "policy/comix_policy.h"
#include "util/thread_pool.h"

namespace chorus {
namespace {

constexpr AttentionShape kShape = test::kComixShape;
constexpr size_t kLayers = test::kComixLayers;

ComixOptions Options(double avg_bits) { return test::ComixTestOptions(0, avg_bits, 32); }

void Append(KvSequence& seq, size_t n, std::mt19937& rng, ThreadPool& pool) {
  test::AppendGaussianRows(seq, n, rng, pool, /*layer_scaled=*/true);
}

// Catches: items that ignore `choices` (a choice past the item's tiers) or overspend the capacity
// when items have 1–4 tiers.
TEST(Allocator, VariableTierCountsNeverExceedCapacity) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(0, 1);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<ComixItem> items;
    const size_t n = 1 + rng() % 50;
    for (size_t i = 0; i < n; ++i) {
      ComixItem it{.weight = 0.5 + 4 * u(rng), .blocks = rng() % 20, .choices = 1 + rng() % kComixMaxChoices};
      double e = 2 + 4 * u(rng);
      size_t b = 60 + rng() % 40;
      for (size_t c = 0; c < it.choices; ++c) it.err[c] = e, it.bytes[c] = b, e *= u(rng), b += 20 + rng() % 60;
      items.push_back(it);
    }
    size_t cheapest = 0, dearest = 0;
    for (const auto& it : items) cheapest += it.blocks * it.bytes[0], dearest += it.blocks * it.bytes[it.choices - 1];
    const size_t cap = cheapest + size_t(u(rng) * double(dearest - cheapest + 1));
    const ComixAllocation a = AllocateComix(items, cap);
    ASSERT_TRUE(a.feasible);
    size_t bytes = 0;
    for (size_t i = 0; i < n; ++i) {
      ASSERT_LT(size_t(a.choice[i]), items[i].choices);
      bytes += items[i].blocks * items[i].bytes[a.choice[i]];
    }
    EXPECT_EQ(bytes, a.bytes);
    EXPECT_LE(bytes, cap);
  }
}

// A unit of 12 blocks whose blocks 6–7 are the relevant ones: the relevant run gets at least the bits
// of every other run in every layer and more in some, the allocation stays within the target; with
// gain 0 the unit is one run (CoMix); values-only leaves the keys' bits equal across runs.
// Catches: relevance ignored, applied to the wrong run (an off-by-one in block → run), or buying bits
// beyond the target.
TEST(Allocator, RelevanceMovesBitsToTheRelevantRun) {
  std::vector<float> rel(12, 0.1f);
  rel[6] = rel[7] = 0.9f;
  for (int mode = 0; mode < 3; ++mode) {  // 0: relevance on K and V, 1: gain 0, 2: values only
    ComixOptions o = Options(3);
    o.relevance_gain = mode == 1 ? 0 : 8;
    o.relevance_values_only = mode == 2;
    ComixPolicy policy(o);
    KvStore store(KvStoreOptions{.n_layer = kLayers, .shape = kShape}, &policy);
    ThreadPool pool(1);
    std::mt19937 rng(3);
    auto seq = store.NewSequence(12 * 32);
    ASSERT_TRUE(policy.AddUnit(seq->id(), 12 * 32, 0, 1.0, "doc", rel).ok());
    // Gain 0: relevance cannot change anything, so the unit stays one run (CoMix exactly).
    const std::vector<size_t> runs = mode == 1 ? std::vector<size_t>{0} : std::vector<size_t>{0, 6, 8};
    EXPECT_EQ(policy.RunStarts(seq->id()), runs);
    Append(*seq, 70, rng, pool);  // blocks 0 (sink) and 1 sealed, every layer observed
    const ComixEvent& e = policy.events().back();
    EXPECT_LE(e.projected, e.capacity) << e.why;
    size_t more = 0;
    for (size_t l = 0; l < kLayers; ++l)
      for (KvSide side : {KvSide::kKey, KvSide::kValue}) {
        const std::vector<int> bits = policy.RunBits(seq->id(), l, side);
        ASSERT_EQ(bits.size(), mode == 1 ? 1u : 3u);
        if (mode == 1) continue;
        const bool weighted = mode == 0 || (mode == 2 && side == KvSide::kValue);
        if (weighted) {
          EXPECT_GE(bits[1], bits[0]) << "layer " << l << " side " << int(side) << " mode " << mode;
          EXPECT_GE(bits[1], bits[2]) << "layer " << l << " side " << int(side) << " mode " << mode;
          more += bits[1] > bits[0] || bits[1] > bits[2];
        } else {
          EXPECT_EQ(bits[0], bits[1]) << "layer " << l << " side " << int(side) << " mode " << mode;
          EXPECT_EQ(bits[1], bits[2]) << "layer " << l << " side " << int(side) << " mode " << mode;
        }
      }
    if (mode != 1) {
      EXPECT_GT(more, 0u) << "mode " << mode << "\n" << policy.HeatMap();
    }
    policy.RemoveUnit(seq->id());
  }
}

// Sealed formats follow the tiers and the key floor, and the sealed bytes stay within the uniform
// target. Catches: a floor not applied to keys, a tier outside the set, q8 priced wrong.
TEST(Allocator, TiersAndKeyFloorAreRespected) {
  struct Case {
    std::vector<int> tiers;
    int min_k;
    double avg;
    std::set<KvFormat> k_ok, v_ok;
  };
  const std::vector<Case> cases = {
      {{2, 3, 4}, 4, 3, {KvFormat::kTq4}, {KvFormat::kTq2, KvFormat::kTq3, KvFormat::kTq4}},
      {{3, 4, 8}, 0, 4, {KvFormat::kTq3, KvFormat::kTq4, KvFormat::kQ8}, {KvFormat::kTq3, KvFormat::kTq4, KvFormat::kQ8}},
      {{3, 4}, 4, 3.75, {KvFormat::kTq4}, {KvFormat::kTq3, KvFormat::kTq4}},
  };
  for (const Case& c : cases) {
    ComixOptions o = Options(c.avg);
    o.tiers = c.tiers, o.min_k_bits = c.min_k;
    ASSERT_TRUE(ComixPolicy::Validate(o).ok()) << ComixPolicy::Validate(o).message();
    test::FilledChunk run(o, 9);
    KvStore& store = run.store;
    ComixPolicy& policy = run.policy;
    size_t sealed = 0;
    for (size_t l = 0; l < kLayers; ++l)
      for (BlockId id : run.seq->blocks(l)) {
        const BlockMeta& m = store.pool().meta(id);
        if (m.k_format == KvFormat::kF16) continue;  // the sink block
        ++sealed;
        EXPECT_TRUE(c.k_ok.count(m.k_format)) << KvFormatName(m.k_format);
        EXPECT_TRUE(c.v_ok.count(m.v_format)) << KvFormatName(m.v_format);
      }
    EXPECT_GE(sealed, kLayers * 6);
    EXPECT_GE(policy.Capacity(), 0) << "sealed blocks cost more than the uniform target";
  }
}

// Bad input: a target the cheapest tiers cannot meet names the minimum; bad tier lists and floors name
// the value. Catches: silently clamping an impossible target (the allocation would overspend).
TEST(Allocator, BadTargetsNameTheMinimum) {
  ComixOptions o = Options(3);
  o.tiers = {4, 8};
  Status s = ComixPolicy::Validate(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("below the cheapest tiers' cost"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("is 4.000 average bits"), std::string::npos) << s.message();
  o.avg_bits = 4;
  EXPECT_TRUE(ComixPolicy::Validate(o).ok()) << ComixPolicy::Validate(o).message();

  ComixOptions b = Options(3);
  b.tiers = {3, 4, 8}, b.min_k_bits = 4;
  const size_t min = ComixPolicy::MinimumBudget(b);
  EXPECT_GT(min, ComixPolicy::MinimumBudget(Options(3)));  // cheapest tiers dearer than 2 bits
  b.budget_bytes = min - 1;
  s = ComixPolicy::Validate(b);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(std::to_string(min)), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("keys 4 bits, values 3 bits"), std::string::npos) << s.message();

  for (const auto& [tiers, min_k, what] : std::vector<std::tuple<std::vector<int>, int, std::string>>{
           {{5}, 0, "5 is not a tier"},
           {{3, 2}, 0, "must be ascending"},
           {{}, 0, "give 1 to 4"},
           {{2, 3, 4}, 8, "above every tier"},
           {{2, 3, 4}, 5, "not a tier"}}) {
    ComixOptions t = Options(3);
    t.tiers = tiers, t.min_k_bits = min_k;
    const Status st = ComixPolicy::Validate(t);
    ASSERT_FALSE(st.ok()) << what;
    EXPECT_NE(st.message().find(what), std::string::npos) << st.message();
  }
}

}  // namespace
}  // namespace chorus
