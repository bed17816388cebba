// Segments on the real model: a document after one agent's role is reused after another's (its
// blocks attached at another offset, its head recomputed); reuse off is bit-identical to the
// engine without it; concurrent roles wait for the document and prefill only their role and the
// repair; a partly cached span reuses what is there; a tight budget never evicts a planned run.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "chorus/engine.h"
#include "test_document.h"

namespace chorus {
namespace {

std::unique_ptr<Engine> Open(EngineOptions o = {}) { return testing_doc::OpenEngine(std::move(o)); }

EngineOptions WithSegments(double repair = 0.15) {
  EngineOptions o;
  o.segments = {.reuse = Reuse::kSegments, .repair = repair};
  return o;
}

// The first `words` words of the Du Fu article (examples/): real prose, no repeated blocks.
std::string Article(size_t words) {
  std::ifstream f("examples/du_fu.txt");
  std::string w, out;
  for (size_t i = 0; i < words && f >> w; ++i) out += (i ? " " : "") + w;
  EXPECT_FALSE(out.empty()) << "examples/du_fu.txt (tests run from the repository root)";
  return out;
}

// A role's prompt as a framework builds it: its system prompt, then the document and a question.
std::vector<int32_t> RolePrompt(const Engine& e, const std::string& role, const std::string& doc,
                                const std::string& question) {
  auto text = e.RenderChat({{"system", role}, {"user", doc + "\n\nQuestion: " + question}});
  EXPECT_TRUE(text.ok()) << text.status().message();
  return e.Tokenize(*text, false, true);
}

void RunAll(Engine& e) {
  for (int i = 0; i < 10000 && (e.running() || e.waiting()); ++i) ASSERT_TRUE(e.Step().ok());
}

const AgentState& Complete(Engine& e, const std::vector<int32_t>& prompt, AgentOptions o) {
  auto id = e.Submit(prompt, o);
  EXPECT_TRUE(id.ok()) << id.status().message();
  RunAll(e);
  return *e.agent(*id);
}

const char* kAnalyst = "You are an analyst. Answer in one sentence.";
const char* kCritic = "You are a critic who reviews every claim carefully, and you answer briefly.";

TEST(Segments, DocumentAfterAnotherRoleIsReused) {
  const std::string doc = Article(900);
  auto e = Open(WithSegments());
  const auto pa = RolePrompt(*e, kAnalyst, doc, "When was Du Fu born?");
  const auto pb = RolePrompt(*e, kCritic, doc, "When was Du Fu born?");
  const AgentState& a = Complete(*e, pa, {.max_tokens = 12});
  EXPECT_EQ(a.reused_tokens, 0u);
  // B: its role differs from the first token on, so nothing is an exact prefix hit beyond the
  // template's first block; the document's blocks come from A at another offset.
  const AgentState& b = Complete(*e, pb, {.max_tokens = 12, .capture_logits = true});
  EXPECT_GT(b.reused_tokens, pb.size() * 7 / 10) << "prompt " << pb.size() << ", repaired " << b.repaired_tokens;
  EXPECT_GT(b.repaired_tokens, 0u);
  EXPECT_EQ(e->Stats().segment_reused_tokens, b.reused_tokens);
  // Against a full prefill of the same prompt (teacher-forced on its greedy answer): the answer's
  // tokens keep nearly the same distribution.
  auto full = Open();
  const AgentState& f = Complete(*full, pb, {.max_tokens = 12, .capture_logits = true});
  auto e2 = Open(WithSegments());
  Complete(*e2, pa, {.max_tokens = 1});
  const AgentState& b2 =
      Complete(*e2, pb, {.max_tokens = int(f.tokens.size()), .forced_tokens = f.tokens, .capture_logits = true});
  ASSERT_EQ(b2.logits.size(), f.logits.size());
  const size_t V = e->vocab_size(), n = f.tokens.size();
  double kld = 0;
  for (size_t t = 0; t < n; ++t) {
    const float* p = f.logits.data() + t * V;
    const float* q = b2.logits.data() + t * V;
    double mp = -INFINITY, mq = -INFINITY, sp = 0, sq = 0;
    for (size_t i = 0; i < V; ++i) mp = std::max(mp, double(p[i])), mq = std::max(mq, double(q[i]));
    for (size_t i = 0; i < V; ++i) sp += std::exp(p[i] - mp), sq += std::exp(q[i] - mq);
    for (size_t i = 0; i < V; ++i) {
      const double lp = p[i] - mp - std::log(sp), lq = q[i] - mq - std::log(sq);
      kld += std::exp(lp) * (lp - lq);
    }
  }
  kld /= double(n);
  RecordProperty("answer_kld", std::to_string(kld));
  EXPECT_LT(kld, 0.25) << "mean KLD of the answer tokens against a full prefill";
}

TEST(Segments, ReuseOffIsBitIdentical) {
  const std::string doc = Article(400);
  auto plain = Open();
  auto on = Open(WithSegments());
  const AgentOptions exact{.max_tokens = 10, .reuse = Reuse::kExact};
  for (Engine* e : {plain.get(), on.get()})
    Complete(*e, RolePrompt(*e, kAnalyst, doc, "Who was Du Fu?"), {.max_tokens = 4});
  const auto pb = RolePrompt(*plain, kCritic, doc, "Who was Du Fu?");
  const AgentState& x = Complete(*plain, pb, {.max_tokens = 10});
  const AgentState& y = Complete(*on, pb, exact);
  EXPECT_EQ(y.reused_tokens, 0u);
  EXPECT_EQ(x.text, y.text);
  EXPECT_EQ(x.tokens, y.tokens);
  EXPECT_EQ(x.nll, y.nll);  // to the bit
  EXPECT_EQ(x.cached_tokens, y.cached_tokens);
}

TEST(Segments, ConcurrentRolesPrefillTheDocumentOnce) {
  const std::string doc = Article(700);
  auto e = Open(WithSegments());
  const std::vector<std::string> roles = {kAnalyst, kCritic, "You summarize documents for busy readers.",
                                          "You are a lawyer. Point out anything that could be disputed."};
  std::vector<AgentId> ids;
  size_t prompt_sum = 0;
  for (const std::string& r : roles) {
    const auto p = RolePrompt(*e, r, doc, "What is this about?");
    prompt_sum += p.size();
    ids.push_back(e->Submit(p, {.max_tokens = 4}).value());
  }
  RunAll(*e);
  const EngineStats s = e->Stats();
  const size_t doc_tokens = e->Tokenize(doc, false, false).size();
  for (size_t i = 1; i < ids.size(); ++i) {
    const AgentState* a = e->agent(ids[i]);
    EXPECT_EQ(a->stop, StopReason::kMaxTokens) << a->error;
    // Agents 2..N prefill their role and the repaired head only.
    EXPECT_GT(a->reused_tokens, doc_tokens - a->repaired_tokens - 2 * 32) << i;
  }
  EXPECT_EQ(s.prefilled_tokens + s.segment_reused_tokens + s.prefix_hit_tokens, prompt_sum);
  EXPECT_LT(s.prefilled_tokens, prompt_sum - 3 * doc_tokens * 7 / 10);
}

TEST(Segments, PartlyCachedSpanReusesWhatIsThere) {
  const std::string doc = Article(600);
  const std::string half = Article(300);
  auto e = Open(WithSegments(0.0));
  Complete(*e, RolePrompt(*e, kAnalyst, half, "Summarize."), {.max_tokens = 2});
  const auto pb = RolePrompt(*e, kCritic, doc, "Summarize.");
  const AgentState& b = Complete(*e, pb, {.max_tokens = 2});
  const size_t half_tokens = e->Tokenize(half, false, false).size();
  EXPECT_GT(b.reused_tokens, half_tokens - 2 * 32);
  EXPECT_LE(b.reused_tokens, half_tokens);
}

TEST(Segments, SameRoleAgainReusesItsOwnContinuation) {
  // B reuses A's document once (repaired); B's next turn starts with B's whole previous prompt: it
  // finds B's own blocks and attached runs again (its continuation), recomputes nothing of them,
  // and reads the same KV, so a repeated question gets the same answer.
  const std::string doc = Article(600);
  auto e = Open(WithSegments());
  Complete(*e, RolePrompt(*e, kAnalyst, doc, "Who was Du Fu?"), {.max_tokens = 2});
  const auto pb = RolePrompt(*e, kCritic, doc, "Who was Du Fu?");
  const AgentState first = Complete(*e, pb, {.max_tokens = 10});
  ASSERT_GT(first.reused_tokens, 0u);
  ASSERT_GT(first.repaired_tokens, 0u);
  const AgentState again = Complete(*e, pb, {.max_tokens = 10});
  EXPECT_EQ(again.repaired_tokens, 0u);
  // All but the last partial block and the token whose logits start the answer come from the cache.
  EXPECT_GE(again.cached_tokens + again.reused_tokens, pb.size() - 2 * 32);
  EXPECT_EQ(again.tokens, first.tokens);
  // An exact-only request never sees the continuation (it is not an exact prefix).
  const AgentState exact = Complete(*e, pb, {.max_tokens = 10, .reuse = Reuse::kExact});
  EXPECT_EQ(exact.reused_tokens, 0u);
  EXPECT_LE(exact.cached_tokens, first.cached_tokens + (first.repaired_tokens + 31) / 32 * 32 + 32);
}

TEST(Segments, PinnedContextIsFoundAfterARole) {
  // A document pinned with Share is reused by a prompt that holds it after a role (POST
  // /v1/contexts, then agents that paste the same text).
  const std::string doc = Article(500);
  auto e = Open(WithSegments());
  ASSERT_TRUE(e->Share(doc).ok());
  const auto p = RolePrompt(*e, kCritic, doc, "Who was Du Fu?");
  const AgentState& b = Complete(*e, p, {.max_tokens = 2});
  EXPECT_GT(b.reused_tokens, e->Tokenize(doc, false, false).size() * 6 / 10);
}

TEST(Segments, TightBudgetNeverEvictsAPlannedRun) {
  // Room for about one document's KV and a few agents' own: later agents evict idle cached blocks
  // while others hold planned runs; every request finishes, and the budget holds.
  const std::string doc = Article(500);
  EngineOptions o = WithSegments();
  o.kv_budget_bytes = 6u << 20;
  auto e = Open(o);
  std::vector<AgentId> ids;
  for (int i = 0; i < 12; ++i) {
    const auto p = RolePrompt(*e, "You are agent number " + std::to_string(i) + (i % 3 ? " of the team." : "."),
                              i % 4 == 3 ? Article(200 + 20 * i) : doc, "Why?");
    ids.push_back(e->Submit(p, {.max_tokens = 6}).value());
  }
  RunAll(*e);
  for (AgentId id : ids) {
    const AgentState* a = e->agent(id);
    EXPECT_EQ(a->stop, StopReason::kMaxTokens) << ToString(a->stop) << " " << a->error;
  }
  const EngineStats s = e->Stats();
  EXPECT_GT(s.segment_reused_tokens, 0u) << "steps " << s.steps << " w " << s.waiting << " p " << s.prefilling << " d "
                                         << s.decoding << " prefilled " << s.prefilled_tokens << " hit "
                                         << s.prefix_hit_tokens << " evicted " << s.evicted_blocks << " runs "
                                         << s.segment_runs << " high water " << s.high_water_bytes;
  EXPECT_LE(s.high_water_bytes, o.kv_budget_bytes);
}

}  // namespace
}  // namespace chorus
