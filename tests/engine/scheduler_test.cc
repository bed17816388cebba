// The engine's scheduler on the real model, without HTTP: prefix-cache borrowing across requests
// (running and finished), in-flight deduplication of a shared prompt, chunked prefill beside
// decodes, admission against the budget with LRU eviction, cancellation, forgetting finished
// requests, and 64+ concurrent requests under every policy.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "chorus/engine.h"
#include "test_document.h"

namespace chorus {
namespace {

using testing_doc::kModel;

std::unique_ptr<Engine> Open(EngineOptions o = {}) { return testing_doc::OpenEngine(std::move(o)); }

// A prompt of about n tokens: the document repeated, then a question.
std::vector<int32_t> Prompt(const Engine& e, size_t doc_repeats, const std::string& question) {
  std::string text;
  for (size_t i = 0; i < doc_repeats; ++i) text += testing_doc::Document();
  return e.Tokenize(text + "\nQuestion: " + question + "\nAnswer:", true, false);
}

void RunAll(Engine& e) {
  for (int i = 0; i < 10000 && (e.running() || e.waiting()); ++i) ASSERT_TRUE(e.Step().ok());
}

TEST(Scheduler, LaterRequestsBorrowCachedBlocksAndAnswerTheSame) {
  auto e = Open();
  const auto p1 = Prompt(*e, 2, "Who ruled?"), p2 = Prompt(*e, 2, "Where was it?");
  auto a = e->Submit(p1, {.max_tokens = 8});
  ASSERT_TRUE(a.ok()) << a.status().message();
  RunAll(*e);
  const AgentState* sa = e->agent(*a);
  EXPECT_EQ(sa->cached_tokens, 0u);
  // Finished, its prompt blocks stay cached: the same prompt again borrows every full block but
  // the one holding the last token (its logits must be computed), and answers the same.
  auto b = e->Submit(p1, {.max_tokens = 8});
  RunAll(*e);
  EXPECT_EQ(e->agent(*b)->cached_tokens, (p1.size() - 1) / 32 * 32);
  EXPECT_EQ(e->agent(*b)->text, sa->text);
  // A different question after the same document borrows the document's blocks.
  auto c = e->Submit(p2, {.max_tokens = 8});
  RunAll(*e);
  EXPECT_GE(e->agent(*c)->cached_tokens, 32u * 10);
  auto fresh = Open();
  auto c_alone = fresh->Submit(p2, {.max_tokens = 8});
  RunAll(*fresh);
  EXPECT_EQ(e->agent(*c)->text, fresh->agent(*c_alone)->text);  // borrowed == computed, to the bit
  const EngineStats s = e->Stats();
  EXPECT_EQ(s.prefix_queried_tokens, p1.size() * 2 + p2.size());
  EXPECT_EQ(s.prefix_hit_tokens, e->agent(*b)->cached_tokens + e->agent(*c)->cached_tokens);
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_GT(s.cached_bytes, 0u);
}

TEST(Scheduler, ConcurrentSharedPromptsArePrefilledOnce) {
  auto e = Open();
  std::vector<AgentId> ids;
  size_t prompt_sum = 0;
#if defined(__SANITIZE_THREAD__)
  const size_t repeats = 1;  // the dedup's threads are the same with a shorter document (123 s under TSan with 3)
#else
  const size_t repeats = 3;
#endif
  for (int i = 0; i < 6; ++i) {
    auto p = Prompt(*e, repeats, "Question number " + std::to_string(i) + "?");
    prompt_sum += p.size();
    ids.push_back(e->Submit(p, {.max_tokens = 4}).value());
  }
  RunAll(*e);
  const EngineStats s = e->Stats();
  const size_t doc = e->agent(ids[0])->prompt_tokens;
  // The first computes the shared document; the others wait for its blocks, then borrow them.
  for (size_t i = 1; i < ids.size(); ++i) EXPECT_GE(e->agent(ids[i])->cached_tokens, (doc - 40) / 32 * 32) << i;
  EXPECT_LT(s.prefilled_tokens, prompt_sum - 5 * ((doc - 40) / 32 * 32) + 1);
  EXPECT_GE(s.prefix_hit_tokens, 5 * ((doc - 40) / 32 * 32));
}

TEST(Scheduler, PrefillIsChunkedBesideDecodes) {
  EngineOptions o;
  o.serve.prefill_chunk = 64;
  auto e = Open(o);
  auto a = e->Submit(Prompt(*e, 1, "first?"), {.max_tokens = 40, .ignore_eog = true});
  for (int i = 0; i < 50 && e->agent(*a)->tokens.empty(); ++i) ASSERT_TRUE(e->Step().ok());
  ASSERT_FALSE(e->agent(*a)->tokens.empty());
  // A long prompt arrives: while it is prefilled, the running request still gets a token per step.
  auto b = e->Submit(Prompt(*e, 6, "second?"), {.max_tokens = 2});
  size_t steps = 0, before = e->agent(*a)->tokens.size();
  while (e->agent(*b)->phase != AgentPhase::kDecode && !e->agent(*b)->done) {
    ASSERT_TRUE(e->Step().ok());
    ++steps;
    EXPECT_LE(e->Stats().last_step_prefill_tokens, 64u);
  }
  EXPECT_GT(steps, 5u);                                   // ~1500 tokens in 64-token chunks
  EXPECT_EQ(e->agent(*a)->tokens.size(), before + steps);  // one token each step meanwhile
  RunAll(*e);
}

TEST(Scheduler, BudgetQueuesThenEvictsLeastRecentlyUsed) {
  auto probe = Open();
  const auto p = Prompt(*probe, 2, "x?");
  const size_t one = probe->EstimateBytes(p.size(), 16);
  EngineOptions o;
  o.kv_budget_bytes = one * 5 / 2;  // room for two requests at a time
  auto e = Open(o);
  std::vector<AgentId> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(e->Submit(Prompt(*e, 2, "q" + std::to_string(i) + "?"), {.max_tokens = 16}).value());
  ASSERT_TRUE(e->Step().ok());
  EXPECT_LE(e->running(), 2u);
  EXPECT_GE(e->waiting(), 3u);
  size_t peak = 0;
  while (e->running() || e->waiting()) {
    ASSERT_TRUE(e->Step().ok());
    peak = std::max(peak, e->Stats().total_bytes);
    ASSERT_LE(e->Stats().total_bytes, o.kv_budget_bytes);
  }
  for (AgentId id : ids) EXPECT_TRUE(e->agent(id)->done && e->agent(id)->error.empty()) << e->agent(id)->error;
  // Unrelated prompts fill the cache; evictions keep it under the budget.
  for (int i = 0; i < 6; ++i) {
    auto q = e->Tokenize(std::string(600, 'a' + i) + " unrelated " + std::to_string(i), true, false);
    ASSERT_TRUE(e->Submit(q, {.max_tokens = 4}).ok());
    RunAll(*e);
  }
  EXPECT_GT(e->Stats().evicted_blocks, 0u);
  EXPECT_LE(e->Stats().total_bytes, o.kv_budget_bytes);
  // Too big for the whole budget: refused at once, with the numbers.
  auto huge = e->Submit(Prompt(*e, 20, "too big?"), {.max_tokens = 1000});
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("budget"), std::string::npos) << huge.status().message();
}

TEST(Scheduler, CancelFreesAndForgetDropsState) {
  auto e = Open();
  auto a = e->Submit(Prompt(*e, 2, "long?"), {.max_tokens = 200, .ignore_eog = true});
  auto w = e->Submit(Prompt(*e, 1, "waiting?"), {.max_tokens = 5});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(e->Step().ok());
  e->Cancel(*a);
  ASSERT_TRUE(e->Step().ok());
  EXPECT_TRUE(e->agent(*a)->done);
  EXPECT_EQ(e->agent(*a)->stop, StopReason::kCancelled);
  RunAll(*e);
  EXPECT_EQ(e->Stats().in_use_bytes, 0u);
  e->Forget(*a);
  e->Forget(*w);
  EXPECT_EQ(e->agent(*a), nullptr);
  EXPECT_EQ(e->agent(*w), nullptr);
  e->Cancel(*a);  // unknown now: nothing happens
  EXPECT_FALSE(e->Submit({}, {}).ok());
  EXPECT_FALSE(e->Submit({int32_t(e->vocab_size())}, {}).ok());
  EXPECT_FALSE(e->Submit(std::vector<int32_t>(e->context_size(), 1), {.max_tokens = 1}).ok());
}

// ≥ 64 requests at once, under every policy (the forward's micro-batch and the step's batch agree).
class ManyRequests : public ::testing::TestWithParam<const char*> {};
TEST_P(ManyRequests, SixtyFourAtOnce) {
  EngineOptions o;
  o.policy = KvPolicy::Parse(GetParam()).value();
  if (o.policy.allocator()) o.kv_budget_bytes = 512 << 20;
  o.serve.max_running = 80;
  auto e = Open(o);
  std::vector<AgentId> ids;
  for (int i = 0; i < 70; ++i) ids.push_back(e->Submit(Prompt(*e, 1, "n" + std::to_string(i % 7) + "?"), {.max_tokens = 16, .ignore_eog = true}).value());
  ASSERT_TRUE(e->Step().ok());
  size_t peak = e->running();
  while (e->running() || e->waiting()) {
    ASSERT_TRUE(e->Step().ok());
    peak = std::max(peak, e->running());
  }
  EXPECT_GE(peak, 64u);
  for (AgentId id : ids) EXPECT_TRUE(e->agent(id)->error.empty()) << e->agent(id)->error;
}
INSTANTIATE_TEST_SUITE_P(Policies, ManyRequests, ::testing::Values("chorus", "comix"));

}  // namespace
}  // namespace chorus

namespace chorus {
namespace {

// cache_answer: the next turn's prompt (prompt + answer + new text) borrows the answer's full
// blocks too (held in the private formats: a cold run of that prompt would hold the shared ones).
TEST(Scheduler, CachedAnswerBlocksServeTheNextTurn) {
  auto e = testing_doc::OpenEngine({});
  const auto p1 = Prompt(*e, 1, "Who ruled?");
  auto a = e->Submit(p1, {.max_tokens = 80, .ignore_eog = true, .cache_answer = true});
  ASSERT_TRUE(a.ok());
  RunAll(*e);
  std::vector<int32_t> p2 = p1;
  const auto& answer = e->agent(*a)->tokens;
  p2.insert(p2.end(), answer.begin(), answer.end());
  const auto more = e->Tokenize("\nQuestion: and then?\nAnswer:", false, false);
  p2.insert(p2.end(), more.begin(), more.end());
  auto b = e->Submit(p2, {.max_tokens = 8});
  RunAll(*e);
  const size_t held = p1.size() + answer.size() - 1;  // the last answer token has no KV
  EXPECT_EQ(e->agent(*b)->cached_tokens, held / 32 * 32);
  EXPECT_GT(held / 32, p1.size() / 32);  // more than the prompt's blocks
  EXPECT_EQ(e->agent(*b)->stop, StopReason::kMaxTokens);
  // Without cache_answer only the prompt's blocks are there.
  auto e2 = testing_doc::OpenEngine({});
  auto a2 = e2->Submit(p1, {.max_tokens = 80, .ignore_eog = true});
  RunAll(*e2);
  auto b2 = e2->Submit(p2, {.max_tokens = 8});
  RunAll(*e2);
  ASSERT_TRUE(a2.ok());
  EXPECT_EQ(e2->agent(*b2)->cached_tokens, p1.size() / 32 * 32);
}

}  // namespace
}  // namespace chorus
