// Sharing scopes on the real model (AgentOptions::scope, ShareOptions::scope): prompts, segments
// and contexts are shared inside a scope and never across two; a public context is read by every
// scope; the same text shared in two scopes is two contexts. Quotas (AgentOptions::kv_quota_bytes):
// a scope over its quota loses its own idle cached blocks first, then its request fails, and
// another scope's cached blocks and running request are untouched.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "chorus/engine.h"
#include "test_document.h"

namespace chorus {
namespace {

std::unique_ptr<Engine> Open(Reuse reuse) {
  EngineOptions o;
  o.segments.reuse = reuse;
  return testing_doc::OpenEngine(std::move(o));
}

const AgentState& Complete(Engine& e, const std::vector<int32_t>& prompt, AgentOptions o) {
  auto id = e.Submit(prompt, o);
  EXPECT_TRUE(id.ok()) << id.status().message();
  for (int i = 0; i < 10000 && (e.running() || e.waiting()); ++i) EXPECT_TRUE(e.Step().ok());
  return *e.agent(*id);
}

std::vector<int32_t> RolePrompt(const Engine& e, const std::string& role, const std::string& doc) {
  auto text = e.RenderChat({{"system", role}, {"user", doc + "\n\nQuestion: who ruled it?"}});
  EXPECT_TRUE(text.ok()) << text.status().message();
  return e.Tokenize(*text, false, true);
}

TEST(Scope, PrefixBlocksAreSharedInsideAScopeOnly) {
  auto e = Open(Reuse::kExact);
  ASSERT_TRUE(e);
  const auto p = e->Tokenize(testing_doc::Document(), true, false);
  ASSERT_GT(p.size(), 128u);
  EXPECT_EQ(Complete(*e, p, {.max_tokens = 2, .scope = "tenant:a"}).cached_tokens, 0u);
  EXPECT_GE(Complete(*e, p, {.max_tokens = 2, .scope = "tenant:a"}).cached_tokens, 96u);
  EXPECT_EQ(Complete(*e, p, {.max_tokens = 2, .scope = "tenant:c"}).cached_tokens, 0u);
  EXPECT_EQ(Complete(*e, p, {.max_tokens = 2}).cached_tokens, 0u);  // public: a scope of its own
  EXPECT_GE(Complete(*e, p, {.max_tokens = 2, .scope = "tenant:c"}).cached_tokens, 96u);
}

TEST(Scope, SegmentsAreSharedInsideAScopeOnly) {
  auto e = Open(Reuse::kSegments);
  ASSERT_TRUE(e);
  const std::string doc = testing_doc::Document();
  Complete(*e, RolePrompt(*e, "You are an analyst.", doc), {.max_tokens = 2, .scope = "group:g"});
  const auto critic = RolePrompt(*e, "You are a critic who reviews every claim carefully.", doc);
  const AgentState& c = Complete(*e, critic, {.max_tokens = 2, .scope = "tenant:c"});
  EXPECT_EQ(c.reused_tokens + c.cached_tokens, 0u);
  const AgentState& b = Complete(*e, critic, {.max_tokens = 2, .scope = "group:g"});
  EXPECT_GT(b.reused_tokens, 96u);
}

TEST(Scope, ContextsAreScopedAndPublicOnesReadByAll) {
  auto e = Open(Reuse::kSegments);
  ASSERT_TRUE(e);
  const std::string doc = testing_doc::Document();
  auto a = e->Share(doc, ShareOptions{.scope = "tenant:a"});
  auto c = e->Share(doc, ShareOptions{.scope = "tenant:c"});
  ASSERT_TRUE(a.ok() && c.ok());
  EXPECT_NE(*a, *c);  // the same text in two scopes: two contexts, so an id says nothing about another
  e->Release(*c);
  const auto p = RolePrompt(*e, "You are a critic.", doc);
  EXPECT_EQ(Complete(*e, p, {.max_tokens = 2, .scope = "tenant:b"}).reused_tokens, 0u);
  EXPECT_GT(Complete(*e, p, {.max_tokens = 2, .scope = "tenant:a"}).reused_tokens, 96u);
  e->Release(*a);
  auto pub = e->Share(doc, ShareOptions{.scope = kPublicScope});
  ASSERT_TRUE(pub.ok());
  const auto q = RolePrompt(*e, "You are a careful historian.", doc);
  EXPECT_GT(Complete(*e, q, {.max_tokens = 2, .scope = "tenant:b"}).reused_tokens, 96u);
}

TEST(Scope, QuotaEvictsTheScopesOwnBlocksThenRefuses) {
  auto e = Open(Reuse::kExact);
  ASSERT_TRUE(e);
  const std::string doc = testing_doc::Document();
  const auto p1 = e->Tokenize(doc, true, false);
  const auto p2 = e->Tokenize("Another tenant's text. " + doc, true, false);
  const auto p3 = e->Tokenize("A third prompt, " + doc, true, false);
  Complete(*e, p1, {.max_tokens = 2, .scope = "tenant:a"});
  Complete(*e, p2, {.max_tokens = 2, .scope = "tenant:b"});
  // Room for its own request only: a's cached blocks go, b's stay.
  const size_t fits = e->EstimateBytes(p3.size(), 2) + 4096;
  const AgentState& a3 = Complete(*e, p3, {.max_tokens = 2, .scope = "tenant:a", .kv_quota_bytes = fits});
  EXPECT_EQ(a3.stop, StopReason::kMaxTokens) << a3.error;
  EXPECT_GT(e->Stats().evicted_blocks, 0u);
  EXPECT_GE(Complete(*e, p2, {.max_tokens = 2, .scope = "tenant:b"}).cached_tokens, 96u);
  EXPECT_EQ(Complete(*e, p1, {.max_tokens = 2, .scope = "tenant:a"}).cached_tokens, 0u);
  // Over quota while b decodes: a's request fails with the bytes, b's runs to its end.
  auto b = e->Submit(p2, {.max_tokens = 24, .ignore_eog = true, .scope = "tenant:b"});
  ASSERT_TRUE(b.ok());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(e->Step().ok());
  const AgentState& over = Complete(*e, p3, {.max_tokens = 2, .scope = "tenant:a", .kv_quota_bytes = 1000});
  EXPECT_EQ(over.stop, StopReason::kError);
  EXPECT_TRUE(over.quota_exceeded);
  EXPECT_NE(over.error.find("KV quota exceeded"), std::string::npos) << over.error;
  EXPECT_NE(over.error.find("1000-byte quota"), std::string::npos) << over.error;
  EXPECT_EQ(e->agent(*b)->stop, StopReason::kMaxTokens);
  EXPECT_EQ(e->agent(*b)->tokens.size(), 24u);
}

}  // namespace
}  // namespace chorus
