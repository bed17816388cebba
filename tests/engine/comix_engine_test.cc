// Engine with --policy comix on the real model: bad budgets and targets get errors that name the
// minimum / range; under a tight budget, agents join and finish at random, the measured KV bytes
// never exceed the budget, agents that do not fit are refused with a message (and fit once others
// have finished), running agents are not damaged, and the allocation gives different bits to
// different (sequence, layer)s.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>

#include "chorus/engine.h"
#include "test_document.h"

namespace chorus {
namespace {

using testing_doc::Document;
using testing_doc::kModel;

Result<std::unique_ptr<Engine>> Open(size_t budget, double avg_bits = 3, std::string family = "tq") {
  return Engine::Open({.model_path = kModel, .threads = 2, .n_ctx = 1024, .kv_budget_bytes = budget,
                       .policy = "comix", .kv_avg_bits = avg_bits, .comix_family = family});
}

TEST(ComixEngine, BadInputsNameTheLimit) {
  auto small = Open(1000);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("minimum"), std::string::npos) << small.status().message();
  auto bits = Open(0, 1.0);
  ASSERT_FALSE(bits.ok());
  EXPECT_NE(bits.status().message().find("between 2 and 8"), std::string::npos) << bits.status().message();
  EXPECT_FALSE(Open(0, 9.0).ok());
  EXPECT_FALSE(Open(0, 3, "nf4").ok());
  auto policy = Engine::Open({.model_path = kModel, .policy = "mystery"});
  EXPECT_FALSE(policy.ok());
}

TEST(ComixEngine, BudgetHoldsUnderRandomJoinsAndFinishes) {
  const size_t budget = 4'500'000;
  auto e = Open(budget);
  ASSERT_TRUE(e.ok()) << e.status().message();
  Engine& engine = **e;
  auto ctx = engine.Share(Document());
  ASSERT_TRUE(ctx.ok()) << ctx.status().message();
  std::mt19937 rng(3);
  size_t started = 0, refused = 0, late = 0;
  std::set<char> digits;
  for (int step = 0; step < 160; ++step) {
    if (rng() % 6 == 0) {
      const int max_tokens = 16 + int(rng() % 80);
      auto id = engine.Spawn(*ctx, "\nQuestion " + std::to_string(step) + ": who ruled the empire?\nAnswer:",
                             {.max_tokens = max_tokens, .ignore_eog = true});
      if (id.ok()) {
        ++started;
        late += refused > 0;
      } else {
        ++refused;
        EXPECT_NE(id.status().message().find("refused"), std::string::npos) << id.status().message();
      }
    }
    if (engine.running() > 0) ASSERT_TRUE(engine.Step().ok());
    const EngineKvReport r = engine.KvReport();
    ASSERT_LE(r.total_bytes, budget) << "step " << step;
    const std::string map = engine.AllocationReport();
    for (size_t p = map.find(" K "); p != std::string::npos; p = map.find(" K ", p + 1))
      for (size_t i = p + 3; i < map.size() && map[i] != '\n'; ++i) digits.insert(map[i]);
  }
  while (engine.running() > 0) ASSERT_TRUE(engine.Step().ok());
  EXPECT_GT(started, 2u);
  EXPECT_GT(refused, 0u) << "the budget should be tight enough to refuse an agent";
  EXPECT_GT(late, 0u) << "a refused agent should fit once others have finished";
  digits.erase('-');
  EXPECT_GE(digits.size(), 2u) << "expected different key bits across agents/layers";
  const auto t = engine.AllocationTiming();
  EXPECT_GT(t.count, 0u);
  std::printf("started %zu, refused %zu; %zu reallocations, %.1f us mean, %.1f us max\n", started, refused, t.count,
              t.mean_us, t.max_us);
}

}  // namespace
}  // namespace chorus
