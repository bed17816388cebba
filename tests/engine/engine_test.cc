// Engine on the real model: the shared context is stored once whatever the number of agents, total KV =
// shared + Σ private, agents joining and finishing at random leak nothing and answer exactly as when
// run alone, and bad requests get clear errors.
#include "chorus/engine.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <vector>
#include <random>
#include <string>

#include "engine/kv_config.h"  // MakeKvConfig, MakeKvRuntime
#include "model/chat_template.h"
#include "model/forward.h"     // ForwardPass
#include "model/model.h"
#include "test_document.h"

namespace chorus {
namespace {

using testing_doc::Document;
using testing_doc::kModel;

std::unique_ptr<Engine> Open(size_t budget = 0) {
  auto e = Engine::Open({.model_path = kModel, .threads = 2, .n_ctx = 1024, .kv_budget_bytes = budget});
  EXPECT_TRUE(e.ok()) << e.status().message() << " — run scripts/fetch_model.sh";
  return e.ok() ? std::move(e).value() : nullptr;
}

TEST(Engine, SharedBytesIndependentOfAgentCount) {
  for (size_t n : {1u, 4u, 16u}) {
    auto engine = Open();
    ASSERT_TRUE(engine);
    auto ctx = engine->Share(Document());
    ASSERT_TRUE(ctx.ok()) << ctx.status().message();
    const size_t shared_alone = engine->KvReport().shared_bytes;
    for (size_t i = 0; i < n; ++i)
      ASSERT_TRUE(engine->Spawn(*ctx, "\nQuestion " + std::to_string(i) + ": who ruled?\nAnswer:",
                                {.max_tokens = 40}).ok());
    ASSERT_TRUE(engine->Step().ok());
    const EngineKvReport r = engine->KvReport();
    EXPECT_EQ(r.shared_bytes, shared_alone) << n << " agents";
    EXPECT_EQ(r.total_bytes, r.shared_bytes + r.private_bytes + r.overhead_bytes) << n << " agents";
    // Sharing the same document again stores nothing new.
    auto again = engine->Share(Document());
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(*again, *ctx);
    EXPECT_EQ(engine->KvReport().shared_bytes, shared_alone);
  }
}

std::string Alone(ContextId* ctx_out, const std::string& prompt, int max_tokens) {
  auto engine = Open();
  auto ctx = engine->Share(Document());
  auto id = engine->Spawn(*ctx, prompt, {.max_tokens = max_tokens});
  EXPECT_TRUE(id.ok());
  while (engine->running()) EXPECT_TRUE(engine->Step().ok());
  return engine->agent(*id)->text;
}

TEST(Engine, LifecycleUnderLoad) {
  auto engine = Open();
  ASSERT_TRUE(engine);
  auto ctx = engine->Share(Document());
  ASSERT_TRUE(ctx.ok());
  std::mt19937 rng(11);
  std::map<AgentId, std::pair<std::string, int>> spawned;  // prompt, max_tokens
  const char* topics[] = {"emperors", "the Mediterranean", "North Africa", "Rome", "Europe", "Asia"};
  int joined = 0;
  for (int step = 0; step < 60 && (joined < 10 || engine->running()); ++step) {
    // Up to 6 running at once, joining at random steps with random answer lengths.
    if (joined < 10 && engine->running() < 6 && rng() % 3 == 0) {
      const std::string p = std::string("\nQuestion: what about ") + topics[joined % 6] + "?\nAnswer:";
      const int max_tokens = 3 + rng() % 12;
      auto id = engine->Spawn(*ctx, p, {.max_tokens = max_tokens});
      ASSERT_TRUE(id.ok()) << id.status().message();
      spawned[*id] = {p, max_tokens};
      ++joined;
    }
    ASSERT_TRUE(engine->Step().ok());
  }
  while (engine->running()) ASSERT_TRUE(engine->Step().ok());
  EXPECT_EQ(joined, 10);
  EXPECT_EQ(engine->KvReport().private_bytes, 0u);  // every finished agent freed its own blocks
  const size_t shared = engine->KvReport().shared_bytes;
  // What stays: the context (pinned) and the prompt blocks agents sealed (cached, evictable).
  EXPECT_EQ(engine->KvReport().total_bytes, shared + engine->Stats().cached_bytes + engine->KvReport().overhead_bytes);
  EXPECT_EQ(engine->Stats().in_use_bytes, 0u);
  EXPECT_EQ(engine->Stats().pinned_bytes, shared);
  engine->Release(*ctx);
  EXPECT_EQ(engine->live_contexts(), 0u);
  // Released with its last reader: unpinned, its blocks are cached prefixes now, nothing in use.
  EXPECT_EQ(engine->Stats().pinned_bytes, 0u);
  EXPECT_EQ(engine->Stats().in_use_bytes, 0u);
  EXPECT_EQ(engine->KvReport().total_bytes, engine->Stats().cached_bytes + engine->KvReport().overhead_bytes);
  for (const auto& [id, pm] : spawned) {
    ContextId unused;
    EXPECT_EQ(engine->agent(id)->text, Alone(&unused, pm.first, pm.second)) << pm.first;
  }
}

TEST(Engine, ThirtyTwoBatchedAgentsAnswerAsAlone) {
  // Issue 12 item 5: 32 agents decoding in one batch (each Step is a ~32-row forward pass; Spawn
  // prefills each prompt) give the greedy answers each gives alone. Catches any kernel whose
  // rounding depends on the number of rows in the batch (the old GEMM above 16 rows did).
  auto engine = Open();
  ASSERT_TRUE(engine);
  auto ctx = engine->Share(Document());
  ASSERT_TRUE(ctx.ok()) << ctx.status().message();
  const char* topics[] = {"emperors", "the sea", "Africa", "Rome", "Europe", "Asia", "the Republic", "holdings"};
  std::vector<std::pair<std::string, int>> asks;
  for (int i = 0; i < 32; ++i)
    asks.push_back({"\nQuestion " + std::to_string(i) + ": what about " + topics[i % 8] + "?\nAnswer:", 4 + i % 9});
  std::vector<AgentId> ids;
  for (const auto& [prompt, max_tokens] : asks) {
    auto id = engine->Spawn(*ctx, prompt, {.max_tokens = max_tokens});
    ASSERT_TRUE(id.ok()) << id.status().message();
    ids.push_back(*id);
  }
  EXPECT_GE(engine->running(), 30u);  // (an agent whose first token is end-of-text is done at Spawn)
  while (engine->running()) ASSERT_TRUE(engine->Step().ok());
  // Alone: the same engine and shared context, one agent in the batch at a time.
  for (size_t i = 0; i < asks.size(); ++i) {
    auto id = engine->Spawn(*ctx, asks[i].first, {.max_tokens = asks[i].second});
    ASSERT_TRUE(id.ok()) << id.status().message();
    while (engine->running()) ASSERT_TRUE(engine->Step().ok());
    EXPECT_EQ(engine->agent(ids[i])->text, engine->agent(*id)->text) << asks[i].first;
  }
}

TEST(Engine, PrefillLogitsEqualTokenByTokenBitwise) {
  // What the engine runs per step (ForwardPass on block KV, q8/tq3 sealed formats): a 70-token
  // prompt in one call — every matmul sees 70 rows — gives every position exactly the logits of
  // feeding the tokens one at a time. Catches any kernel whose rounding depends on the batch (the
  // old GEMM above 16 rows, the f32 panels above 8), which a short greedy answer rarely shows:
  // chunked prefill and continuous batching cannot change an answer.
  auto model = Model::Load(kModel);
  ASSERT_TRUE(model.ok()) << model.status().message();
  const ModelConfig& c = (*model)->config();
  auto cfg = MakeKvConfig("q8", "tq3", c);
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  KvRuntime rt = MakeKvRuntime(c, *cfg);
  auto batched = rt.store->NewSequence(128), single = rt.store->NewSequence(128);
  std::vector<int32_t> tokens = (*model)->tokenizer().Encode(Document(), false, false);
  ASSERT_GE(tokens.size(), 70u);
  tokens.resize(70);
  ForwardPass fwd(**model);
  ThreadPool pool(2);
  std::vector<float> all(tokens.size() * c.n_vocab), one(c.n_vocab);
  ASSERT_TRUE(fwd.Run(tokens, *batched, pool, LogitsFor::kAll, all.data()).ok());
  for (size_t t = 0; t < tokens.size(); ++t) {
    ASSERT_TRUE(fwd.Run(std::span<const int32_t>(&tokens[t], 1), *single, pool, LogitsFor::kLast, one.data()).ok());
    ASSERT_EQ(std::memcmp(one.data(), all.data() + t * c.n_vocab, c.n_vocab * sizeof(float)), 0)
        << "position " << t << ": logits of the 70-token batch differ from token by token";
  }
}

TEST(Engine, BadRequestsAreClearErrors) {
  auto engine = Open();
  ASSERT_TRUE(engine);
  std::string huge;
  for (int i = 0; i < 400; ++i) huge += "many words of a long document ";
  auto too_long = engine->Share(huge);
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("context"), std::string::npos) << too_long.status().message();
  auto ctx = engine->Share(Document());
  ASSERT_TRUE(ctx.ok());
  EXPECT_FALSE(engine->Spawn(*ctx, "", {}).ok());
  EXPECT_FALSE(engine->Spawn(12345, "hi", {}).ok());
  auto over = engine->Spawn(*ctx, "hi", {.max_tokens = 5000});
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("exceed the context"), std::string::npos);

  // A budget that fits the document and one agent, not two: the second is refused with numbers.
  auto small = Open();
  auto c2 = small->Share(Document());
  ASSERT_TRUE(c2.ok());
  const size_t shared = small->KvReport().total_bytes;
  auto tight = Open(shared + 2200000);
  auto c3 = tight->Share(Document());
  ASSERT_TRUE(c3.ok()) << c3.status().message();
  auto first = tight->Spawn(*c3, "\nQuestion: who?\nAnswer:", {.max_tokens = 64});
  ASSERT_TRUE(first.ok()) << first.status().message();
  auto refused = tight->Spawn(*c3, "\nQuestion: where?\nAnswer:", {.max_tokens = 64});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("budget"), std::string::npos) << refused.status().message();
  while (tight->running()) ASSERT_TRUE(tight->Step().ok());  // the admitted agent is unharmed
}

TEST(Engine, ScoreTokensEqualsScoreText) {
  // Score(tokens) is Score(text) for the text's tokens (encoded as Score(text) does: no specials), and
  // the prompt + answer split used by `eval needle` adds up: NLL(P + A) − NLL(P) is positive and
  // counted over A's tokens only. Bad ids and one-token inputs are errors.
  auto engine = Open();
  ASSERT_TRUE(engine);
  auto model = Model::Load(kModel);
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto ctx = engine->Share(Document());
  ASSERT_TRUE(ctx.ok()) << ctx.status().message();
  const std::string p = "\nQuestion: who ruled the empire?\nAnswer: The emperor", a = " Augustus";
  const std::vector<int32_t> pt = model.value()->tokenizer().Encode(p, false, false);
  std::vector<int32_t> pat = model.value()->tokenizer().Encode(p + a, false, false);
  auto by_text = engine->Score(*ctx, p + a);
  auto by_tokens = engine->Score(*ctx, std::span<const int32_t>(pat));
  auto prompt_only = engine->Score(*ctx, std::span<const int32_t>(pt));
  ASSERT_TRUE(by_text.ok() && by_tokens.ok() && prompt_only.ok());
  EXPECT_EQ(by_text->nll, by_tokens->nll);
  EXPECT_EQ(by_text->count, pat.size() - 1);
  EXPECT_EQ(by_tokens->count, pat.size() - 1);
  ASSERT_GT(pat.size(), pt.size());
  EXPECT_EQ(by_tokens->count - prompt_only->count, pat.size() - pt.size());
  EXPECT_GT(by_tokens->nll - prompt_only->nll, 0);
  const std::vector<int32_t> bad = {pt[0], -1}, one = {pt[0]};
  EXPECT_FALSE(engine->Score(*ctx, std::span<const int32_t>(bad)).ok());
  EXPECT_FALSE(engine->Score(*ctx, std::span<const int32_t>(one)).ok());
  EXPECT_FALSE(engine->Score(12345, std::span<const int32_t>(pat)).ok());
}

}  // namespace
}  // namespace chorus
