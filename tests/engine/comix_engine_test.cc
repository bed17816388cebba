// Engine with --policy comix on the real model: bad budgets and targets get errors that name the
// minimum / range; under a tight budget, agents join and finish at random, the measured KV bytes
// never exceed the budget, agents that do not fit are refused with a message (and fit once others
// have finished), running agents are not damaged, and the allocation gives different bits to
// different (sequence, layer)s.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>

#include "chorus/engine.h"
#include "model/model.h"
#include "test_document.h"

namespace chorus {
namespace {

using testing_doc::Document;
using testing_doc::kModel;

Result<std::unique_ptr<Engine>> Open(size_t budget, double avg_bits = 3, std::string family = "tq") {
  auto policy = KvPolicy::Parse("comix-" + family + ":" + std::to_string(avg_bits));
  if (!policy.ok()) return policy.status();
  return Engine::Open(
      {.model_path = kModel, .threads = 2, .n_ctx = 1024, .policy = *policy, .kv_budget_bytes = budget});
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
  EXPECT_FALSE(KvPolicy::Parse("mystery").ok());
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
    if (engine.running() > 0) { ASSERT_TRUE(engine.Step().ok()); }
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

// The first `chars` characters of the WikiText-2 article the repository ships (≈ 1 token / 4.5 chars).
std::string Article(size_t chars) {
  std::ifstream f("examples/du_fu.txt");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str().substr(0, chars);
}

// Readers the caller announces (ShareOptions::readers) are planned for when the document is
// sealed. Catches a document sealed before its readers attach taking every byte of the budget
// ("no agent could start"): for uniform configurations U, the budget is U's own projection with
// all N agents admitted (so U runs them all concurrently); CoMix at that budget, told the N
// readers, runs all N concurrently too (both configurations), with a lower error than the issue's
// tq2 shared + q8 private — the mean increase of the teacher-forced NLL over the f16 cache's on
// the same 384 answer tokens (8 agents × 48; the answers are the f16 cache's greedy ones). The
// default tq4/tq3 + q8 is measured and printed (see below: not reached on main).
TEST(ComixEngine, PlansForKnownReadersAndBeatsUniformAtItsBudget) {
  const std::string doc = Article(2000);  // ≈ 470 tokens
  constexpr size_t kAgents = 8;
  constexpr int kAnswer = 48;
  const auto prompt = [](size_t i) {
    static const char* q[] = {"When did Du Fu live?", "Who was Li Bai?", "What was Du Fu's ambition?",
                              "What devastated the country?", "How was Du Fu's work received?",
                              "What did Du Fu write about?", "Where did Du Fu travel?", "What is his legacy?"};
    return std::string("\n\nQuestion: ") + q[i] + "\nAnswer:";
  };
  struct Run {
    std::vector<double> nll;  // per agent
    size_t concurrent = 0;
    size_t projected = 0;
    size_t high_water = 0;
  };
  std::vector<std::vector<int32_t>> answers(kAgents);
  const auto run = [&](EngineOptions o, bool forced, const ShareOptions& so, bool step = true) -> Run {
    o.model_path = kModel;
    o.threads = 2;
    o.n_ctx = 1024;
    auto e = Engine::Open(o);
    EXPECT_TRUE(e.ok()) << e.status().message();
    Run r;
    if (!e.ok()) return r;
    Engine& engine = **e;
    auto ctx = engine.Share(doc, so);
    EXPECT_TRUE(ctx.ok()) << ctx.status().message();
    if (!ctx.ok()) return r;
    std::vector<AgentId> ids;
    for (size_t i = 0; i < kAgents; ++i) {
      AgentOptions ao{.max_tokens = kAnswer, .ignore_eog = true};
      if (forced) ao.forced_tokens = answers[i];
      auto id = engine.Spawn(*ctx, prompt(i), ao);
      if (id.ok()) ids.push_back(*id);
    }
    r.concurrent = engine.running();
    r.projected = engine.KvReport().projected_bytes;
    if (!step) return r;
    while (engine.running() > 0) EXPECT_TRUE(engine.Step().ok());
    r.high_water = engine.KvReport().high_water_bytes;
    for (size_t i = 0; i < ids.size(); ++i) {
      const AgentState& st = *engine.agent(ids[i]);
      EXPECT_NE(st.stop, StopReason::kError) << st.error;
      if (!forced) answers[i] = st.tokens;
      r.nll.push_back(st.nll);
    }
    return r;
  };
  // The f16 cache's greedy answers and its NLL of them.
  const EngineOptions f16{
      .policy = {KvPolicy::Uniform{.k = "f16", .v = "f16"}}, .private_k = "f16", .private_v = "f16"};
  const Run ref = run(f16, false, {});
  ASSERT_EQ(ref.nll.size(), kAgents);
  const auto excess = [&](const Run& r) {
    double d = 0;
    for (size_t i = 0; i < r.nll.size(); ++i) d += r.nll[i] - ref.nll[i];
    return d / double(kAgents * kAnswer);
  };
  size_t own = 0;  // the readers' own tokens: the longest prompt + the answer
  {
    auto m = Model::Load(kModel);
    ASSERT_TRUE(m.ok());
    for (size_t i = 0; i < kAgents; ++i)
      own = std::max(own, (*m)->tokenizer().Encode(prompt(i), false, true).size() + kAnswer);
  }
  struct Uniform {
    const char *sk, *sv, *pk, *pv;
  };
  for (const Uniform u : {Uniform{"tq2", "tq2", "q8", "q8"}, Uniform{"tq4", "tq3", "q8", "q8"}}) {
    const std::string name = std::string(u.sk) + "/" + u.sv + " shared, " + u.pk + "/" + u.pv + " private";
    const EngineOptions uo{.policy = {KvPolicy::Uniform{.k = u.sk, .v = u.sv}}, .private_k = u.pk, .private_v = u.pv};
    const Run probe = run(uo, true, {});
    ASSERT_EQ(probe.concurrent, kAgents);
    EngineOptions ub = uo;
    ub.kv_budget_bytes = probe.projected;  // U's own projection of all N agents: U runs them all
    ASSERT_EQ(run(ub, true, {}, /*step=*/false).concurrent, kAgents) << name;  // admission only: same formats
    const Run& uniform = probe;
    const Run comix = run({.policy = {KvPolicy::Allocator{.join_reserve = 0}}, .kv_budget_bytes = probe.projected},
                          true, {.readers = kAgents, .reader_tokens = own});
    std::printf("%-32s budget %8zu: uniform NLL +%.4f/token (high water %zu), comix +%.4f/token (%zu concurrent, "
                "high water %zu)\n",
                name.c_str(), probe.projected, excess(uniform), uniform.high_water, excess(comix), comix.concurrent,
                comix.high_water);
    EXPECT_EQ(comix.concurrent, kAgents) << name << ": CoMix must run every agent a uniform configuration runs";
    EXPECT_LE(comix.high_water, probe.projected) << name;
    // Measured on main (int8 kernels, q8 windows): tq2/tq2 + q8: uniform +0.2123 vs comix +0.0263
    // NLL/token; tq4/tq3 + q8: uniform +0.0206 vs comix +0.0263 — CoMix's allocation is not
    // budget-bound there (the same bits at both budgets: its formats stop at 4 bits while uniform's
    // private blocks are q8), so only the 2-bit configuration is asserted to lose to CoMix.
    if (std::string(u.sk) == "tq2") { EXPECT_LT(excess(comix), excess(uniform)) << name; }
  }
}

}  // namespace
}  // namespace chorus
