// Sharing scopes on the real model (AgentOptions::scope, ShareOptions::scope): prompts, segments
// and contexts are shared inside a scope and never across two; a public context is read by every
// scope; the same text shared in two scopes is two contexts.
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

}  // namespace
}  // namespace chorus
