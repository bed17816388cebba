// The allocator's measured ranking (ComixOptions::measured, issue 19): an item's error is the
// end-to-end KLD the table gives its (layer, side, width), so bits go where the table says the
// error hurts; the table must fit the model and the tiers; the probe that measures a table stores
// exactly one layer's side compressed. Synthetic activations on a real KvStore (3 layers, 2 KV heads).
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "comix_fixture.h"
#include "kv/kv_store.h"
#include "policy/comix_policy.h"
#include "policy/comix_sensitivity.h"
#include "util/thread_pool.h"

namespace chorus {
namespace {

constexpr AttentionShape kShape = test::kComixShape;
constexpr size_t kLayers = test::kComixLayers;

// A TQ table over widths 2, 3, 4: every side 1e-3 / 5e-4 / 2.5e-4, except `hot` (layer, side) 100×.
std::shared_ptr<ComixSensitivity> Table(size_t hot_layer, KvSide hot_side) {
  auto t = std::make_shared<ComixSensitivity>();
  t->family = ComixFamily::kTq, t->n_layer = kLayers, t->bits = {2, 3, 4};
  t->kld.resize(kLayers * 2 * 3);
  for (size_t l = 0; l < kLayers; ++l)
    for (KvSide s : {KvSide::kKey, KvSide::kValue})
      for (size_t w = 0; w < 3; ++w)
        t->kld[t->Index(l, s, w)] = 1e-3 / double(1 << w) * (l == hot_layer && s == hot_side ? 100 : 1);
  return t;
}

// At an average of 3 bits the hot side gets 4 bits and some other side pays with 2, whichever side is
// hot, and the sealed blocks follow the allocation and stay within the target.
// Catches: the table ignored (the ranking would not move with it), read with layers or sides swapped.
TEST(MeasuredRank, BitsGoWhereTheTableSaysTheErrorHurts) {
  for (const auto& [hot_layer, hot_side] : {std::pair{size_t{1}, KvSide::kKey}, std::pair{size_t{2}, KvSide::kValue},
                                            std::pair{size_t{0}, KvSide::kValue}}) {
    ComixOptions o = test::ComixTestOptions(0, 3, 32);
    o.measured = Table(hot_layer, hot_side);
    ASSERT_TRUE(ComixPolicy::Validate(o).ok()) << ComixPolicy::Validate(o).message();
    test::FilledChunk run(o, 5);
    const ComixPolicy& policy = run.policy;
    size_t two = 0;
    for (size_t l = 0; l < kLayers; ++l)
      for (KvSide s : {KvSide::kKey, KvSide::kValue}) {
        const std::string sealed = policy.SealedBits(run.seq->id(), l, s);
        ASSERT_EQ(sealed.size(), 8u);
        EXPECT_EQ(sealed[0], 'F');  // the sink
        if (l == hot_layer && s == hot_side) {
          EXPECT_EQ(sealed.substr(1), std::string(7, '4')) << l << " " << int(s) << "\n" << policy.HeatMap();
        }
        two += sealed.find('2') != std::string::npos;
      }
    EXPECT_GT(two, 0u) << policy.HeatMap();
    EXPECT_GE(policy.Capacity(), 0) << "sealed blocks cost more than the uniform target";
  }
}

// A table that does not fit: other layer count, other family, a tier it did not measure, a negative
// value. Each is an error naming the mismatch. Catches: a table of another model silently applied.
TEST(MeasuredRank, ATableThatDoesNotFitIsAnError) {
  const std::vector<std::pair<std::function<void(ComixOptions&, ComixSensitivity&)>, std::string>> cases = {
      {[](ComixOptions&, ComixSensitivity& t) { t.n_layer = 2, t.kld.resize(2 * 2 * 3); }, "of 2 layers for a model of 3"},
      {[](ComixOptions&, ComixSensitivity& t) { t.family = ComixFamily::kKivi; }, "another format family"},
      {[](ComixOptions& o, ComixSensitivity&) { o.tiers = {3, 4, 8}, o.avg_bits = 4; }, "no 8-bit column"},
      {[](ComixOptions&, ComixSensitivity& t) { t.kld[4] = -1; }, "negative or not finite"},
      {[](ComixOptions&, ComixSensitivity& t) { t.kld.pop_back(); }, "17 values for 3 layers"},
  };
  for (const auto& [edit, want] : cases) {
    ComixOptions o = test::ComixTestOptions(0, 3, 32);
    auto t = Table(0, KvSide::kKey);
    edit(o, *t);
    o.measured = t;
    const Status s = ComixPolicy::Validate(o);
    ASSERT_FALSE(s.ok()) << want;
    EXPECT_NE(s.message().find(want), std::string::npos) << s.message();
  }
}

// The probe: only `side` of `layer` is compressed, after the sink block. Catches: the probe leaking
// its format into other layers or the other side (the measured table would mix errors).
TEST(MeasuredRank, ProbeCompressesOneLayersSideOnly) {
  LayerProbePolicy probe(1, KvSide::kValue, KvFormat::kTq3, 1);
  KvStore store(KvStoreOptions{.n_layer = kLayers, .shape = kShape}, &probe);
  ThreadPool pool(1);
  std::mt19937 rng(7);
  auto seq = store.NewSequence(4 * 32);
  test::AppendGaussianRows(*seq, 4 * 32, rng, pool, /*layer_scaled=*/false);
  for (size_t l = 0; l < kLayers; ++l) {
    const auto& blocks = seq->blocks(l);
    ASSERT_EQ(blocks.size(), 4u);
    for (size_t b = 0; b < blocks.size(); ++b) {
      const BlockMeta& m = store.pool().meta(blocks[b]);
      EXPECT_EQ(m.k_format, KvFormat::kF16) << l << " " << b;
      EXPECT_EQ(m.v_format, l == 1 && b > 0 ? KvFormat::kTq3 : KvFormat::kF16) << l << " " << b;
    }
  }
}

}  // namespace
}  // namespace chorus
