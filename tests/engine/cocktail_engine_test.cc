// Cocktail in the engine, on the real model (short: ~10 blocks): the chunk map covers the context,
// says which encoder ran, keeps the sink f16, is measured smaller than f16, several queries get the
// highest precision any of them asks for, the fallback encoder gives unit vectors, and bad
// parameters / encoder paths are clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "chorus/engine.h"
#include "engine/hidden_state_encoder.h"
#include "model/forward.h"
#include "model/model.h"
#include "policy_spec.h"

namespace chorus {
namespace {

constexpr const char* kModel = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

std::string Document() {
  return "The Roman Empire was the post-Republican state of ancient Rome. It included large territorial holdings "
         "around the Mediterranean Sea in Europe, North Africa, and Western Asia, and was ruled by emperors. "
         "To bake bread, mix flour, water, salt and yeast, knead the dough for ten minutes and let it rise for an "
         "hour before baking it in a hot oven until the crust is brown. "
         "The access code for the north gate is 4817. "
         "Jupiter is the largest planet in the Solar System; it is a gas giant with a mass more than two and a half "
         "times that of all the other planets combined. Its moons include Io, Europa, Ganymede and Callisto. "
         "Football is played between two teams of eleven players with a spherical ball; the objective is to score "
         "by moving the ball beyond the goal line into the opposing goal. ";
}

std::unique_ptr<Engine> Open(EngineOptions o = {}) {
  o.model_path = kModel;
  o.threads = 2;
  o.n_ctx = 1024;
  auto e = Engine::Open(o);
  EXPECT_TRUE(e.ok()) << e.status().message() << " — run scripts/fetch_model.sh";
  return e.ok() ? std::move(e).value() : nullptr;
}

TEST(CocktailEngine, ChunkMapCoversContextAndIsMeasuredSmaller) {
  auto engine = Open();
  ASSERT_TRUE(engine);
  auto ctx = engine->ShareFor(Document(), {"What is the access code for the north gate?"});
  ASSERT_TRUE(ctx.ok()) << ctx.status().message();
  const ChunkMapReport* m = engine->chunk_map(*ctx);
  ASSERT_NE(m, nullptr);
  const size_t tokens = engine->ContextTokens(*ctx);
  EXPECT_EQ(m->blocks.size(), (tokens + 31) / 32);
  EXPECT_EQ(m->chunks, (tokens + 31) / 32);
  EXPECT_EQ(m->blocks[0], 'S');
  EXPECT_EQ(m->sink + m->fp16 + m->int4 + m->int2, tokens / 32);
  EXPECT_GT(m->int2, 0u);  // α = 0.6: the least relevant 60 % of the range is INT2
  // Installed next to the model by scripts/setup.sh → the real encoder runs (the output says so).
  EXPECT_NE(m->encoder.find("all-MiniLM-L6-v2"), std::string::npos) << m->encoder << " — run scripts/fetch_encoder.sh";
  EXPECT_LE(m->s_min, m->t_low);
  EXPECT_LE(m->t_low, m->t_high);
  EXPECT_LE(m->t_high, m->s_max);
  EXPECT_LT(m->s_min, m->s_max);
  EXPECT_LT(engine->KvReport().shared_bytes, engine->Fp16Bytes(tokens));
  std::printf("map %s, similarity [%.4f, %.4f]\n", m->blocks.c_str(), m->s_min, m->s_max);
  // An agent reads the reordered context and answers with the planted fact (greedy): catches a map
  // that puts the fact's chunk at INT2, or a reorder that breaks what the agent reads.
  auto a = engine->Spawn(*ctx, "\n\nQuestion: What is the access code for the north gate?\nAnswer:",
                         {.max_tokens = 16, .ignore_eog = true});  // always 16 tokens: the fact must be in them
  // (16, not 8: the first token is a near-tie between <|im_end|> and " ", 0.11 logits with glibc's
  // expf in SwiGLU, -0.05 with Highway's Exp; after <|im_end|> the model restarts and says 4817 later.)
  ASSERT_TRUE(a.ok()) << a.status().message();
  while (engine->running() > 0) ASSERT_TRUE(engine->Step().ok());
  EXPECT_NE(engine->agent(*a)->text.find("4817"), std::string::npos) << "answer: " << engine->agent(*a)->text;
  // A plain Share of the same text is a different context (different formats), with no chunk map.
  auto plain = engine->Share(Document());
  ASSERT_TRUE(plain.ok());
  EXPECT_NE(*plain, *ctx);
  EXPECT_EQ(engine->chunk_map(*plain), nullptr);
}

TEST(CocktailEngine, FallbackEncoderOnRequestSaysSo) {
  auto engine = Open({.encoder_path = kHiddenStateEncoder});
  ASSERT_TRUE(engine);
  auto ctx = engine->ShareFor(Document(), {"What is the access code for the north gate?"});
  ASSERT_TRUE(ctx.ok()) << ctx.status().message();
  const ChunkMapReport* m = engine->chunk_map(*ctx);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->encoder.rfind("fallback: mean-pooled hidden states", 0), 0u) << m->encoder;
}

TEST(CocktailEngine, SeveralQueriesTakeHighestPrecision) {
  auto engine = Open();
  ASSERT_TRUE(engine);
  const std::string q1 = "What is the access code for the north gate?", q2 = "Which moons does Jupiter have?";
  auto c1 = engine->ShareFor(Document(), {q1});
  auto c2 = engine->ShareFor(Document(), {q2});
  auto both = engine->ShareFor(Document(), {q1, q2});
  ASSERT_TRUE(c1.ok() && c2.ok() && both.ok());
  const std::string m1 = engine->chunk_map(*c1)->blocks, m2 = engine->chunk_map(*c2)->blocks,
                    mb = engine->chunk_map(*both)->blocks;
  ASSERT_EQ(m1.size(), mb.size());
  const auto rank = [](char c) { return c == 'S' || c == 'F' ? 2 : c == '4' ? 1 : 0; };
  for (size_t i = 0; i < mb.size(); ++i) EXPECT_EQ(rank(mb[i]), std::max(rank(m1[i]), rank(m2[i]))) << i;
}

// policy "cocktail-paper" says contexts are shared with ShareFor: the "auto" window is q8, as for every
// compressed configuration, even with f16 as the shared and private formats (uniform f16/f16 keeps
// f16 rows). Seen in an agent's own window: 66 instead of 128 bytes per token and KV head.
TEST(CocktailEngine, CocktailPolicyGetsTheQ8Window) {
  const std::string q = "What is the access code for the north gate?";
  size_t private_bytes[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    auto engine = Open({.policy = Spec(i == 0 ? "f16/f16" : "cocktail-paper"), .private_k = "f16", .private_v = "f16"});
    ASSERT_TRUE(engine);
    auto ctx = engine->ShareFor(Document(), {q});
    ASSERT_TRUE(ctx.ok()) << ctx.status().message();
    auto a = engine->Spawn(*ctx, "\n\nQuestion: " + q + "\nAnswer:", {.max_tokens = 4, .ignore_eog = true});
    ASSERT_TRUE(a.ok()) << a.status().message();
    while (engine->running() > 0) ASSERT_TRUE(engine->Step().ok());
    private_bytes[i] = engine->agent(*a)->peak_private_bytes;
  }
  EXPECT_LT(private_bytes[1], private_bytes[0]);
  auto bad = KvPolicy::Parse("mixed");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("chorus, polykv, polykv-paper, comix, cocktail, cocktail-paper"),
            std::string::npos)
      << bad.status().message();
}

TEST(CocktailEngine, BadParametersAndEncoderPathsAreErrors) {
  for (auto [a, b] : {std::pair{1.5, 0.1}, {0.6, -0.1}, {0.7, 0.4}}) {
    auto e = Engine::Open({.model_path = kModel, .policy = {KvPolicy::CocktailPaper{.alpha = a, .beta = b}}});
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.status().message().find("cocktail"), std::string::npos) << e.status().message();
  }
  auto chunk = Engine::Open({.model_path = kModel, .policy = {KvPolicy::CocktailPaper{.chunk_tokens = 48}}});
  ASSERT_FALSE(chunk.ok());
  EXPECT_NE(chunk.status().message().find("16, 32 or 64"), std::string::npos);
  auto missing = Engine::Open({.model_path = kModel, .encoder_path = "/nonexistent/encoder"});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("does not exist"), std::string::npos) << missing.status().message();
  auto unsupported = Engine::Open({.model_path = kModel, .encoder_path = kModel});  // a GGUF LLM, not an encoder
  ASSERT_FALSE(unsupported.ok());
  EXPECT_NE(unsupported.status().message().find("encoder"), std::string::npos);
  auto engine = Open();
  ASSERT_TRUE(engine);
  auto none = engine->ShareFor(Document(), {});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("query"), std::string::npos);
}

// chorus's Cocktail in the engine (policy "cocktail"): ShareFor registers the document as one
// allocator unit weighted by relevance. Catches: blocks sealed by another policy than the
// allocator (the uniform shared formats or the paper's map: the store's formats then differ from
// what the allocator handed out, or it handed out nothing), keys below the floor, a context that
// costs more than the uniform kivi4 blocks its target promises (measured from the store), and a
// relevance that does not reach the allocation (the most relevant block no better than the least).
TEST(CocktailAllocatorEngine, SealsTheAllocatorsBitsWithinTheTarget) {
  const std::string q = "What is the access code for the north gate?";
  auto engine = Open({.policy = Spec("cocktail-kivi:4:t348:k4:g8")});
  ASSERT_TRUE(engine);
  auto ctx = engine->ShareFor(Document(), {q});
  ASSERT_TRUE(ctx.ok()) << ctx.status().message();
  const ChunkMapReport* m = engine->chunk_map(*ctx);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->policy, KvPolicyKind::kRelevance);
  const size_t tokens = engine->ContextTokens(*ctx), full = tokens / 32;
  ASSERT_EQ(m->blocks.size(), (tokens + 31) / 32);
  EXPECT_EQ(m->blocks[0], 'S');
  ASSERT_EQ(m->stored_k.size(), 30u);  // SmolLM2-135M's layers
  ASSERT_EQ(m->alloc_k.size(), m->stored_k.size());
  size_t upgraded = 0, most = 1, least = 1;  // the most / least relevant non-sink full blocks
  for (size_t b = 1; b < full; ++b) {
    if (m->blocks[b] > m->blocks[most]) most = b;
    if (m->blocks[b] < m->blocks[least]) least = b;
  }
  ASSERT_NE(m->blocks[most], m->blocks[least]) << m->blocks;
  int most_bits = 0, least_bits = 0;
  for (size_t l = 0; l < m->stored_k.size(); ++l) {
    ASSERT_EQ(m->stored_k[l].size(), full);
    EXPECT_EQ(m->alloc_k[l], m->stored_k[l]) << "layer " << l;
    EXPECT_EQ(m->alloc_v[l], m->stored_v[l]) << "layer " << l;
    EXPECT_EQ(m->stored_k[l][0], 'F');  // the sink
    EXPECT_EQ(m->stored_k[l].substr(1).find_first_of("23F"), std::string::npos) << m->stored_k[l];  // keys >= 4
    for (size_t b = 1; b < full; ++b) upgraded += m->stored_v[l][b] == '8' || m->stored_k[l][b] == '8';
    most_bits += m->stored_v[l][most] - '0';
    least_bits += m->stored_v[l][least] - '0';
  }
  EXPECT_GT(upgraded, 0u);  // the target leaves room above the cheapest tiers: the allocator chose
  EXPECT_GT(most_bits, least_bits) << "relevance " << m->blocks;
  // Bytes: the average-bits target 4 = the uniform kivi4 blocks of the same document, measured.
  auto kivi4 = Open({.policy = Spec("kivi4/kivi4")});
  ASSERT_TRUE(kivi4);
  auto uctx = kivi4->Share(Document());
  ASSERT_TRUE(uctx.ok()) << uctx.status().message();
  ASSERT_EQ(kivi4->ContextTokens(*uctx), tokens);
  EXPECT_LE(engine->ContextBytes(*ctx), kivi4->ContextBytes(*uctx));
  EXPECT_GT(engine->ContextBytes(*ctx), kivi4->ContextBytes(*uctx) * 9 / 10);  // and spends them
  std::printf("relevance %s, middle layer K %s V %s, bytes %zu vs kivi4 %zu\n", m->blocks.c_str(),
              m->stored_k[15].c_str(), m->stored_v[15].c_str(), engine->ContextBytes(*ctx),
              kivi4->ContextBytes(*uctx));
  // An agent reads it and its answer is scored like any other context's.
  auto a = engine->Spawn(*ctx, "\n\nQuestion: " + q + "\nAnswer:", {.max_tokens = 8, .ignore_eog = true});
  ASSERT_TRUE(a.ok()) << a.status().message();
  while (engine->running() > 0) ASSERT_TRUE(engine->Step().ok());
  EXPECT_NE(engine->agent(*a)->text.find("4817"), std::string::npos) << "answer: " << engine->agent(*a)->text;
}

// Policy "cocktail" needs questions and a byte target above its cheapest tiers: each is a clear error.
TEST(CocktailAllocatorEngine, NoQuestionOrTooFewBytesIsAClearError) {
  auto tiers = Engine::Open({.model_path = kModel, .policy = Spec("cocktail-tq:3:t48")});
  ASSERT_FALSE(tiers.ok());
  EXPECT_NE(tiers.status().message().find("the minimum for tiers 4,8"), std::string::npos) << tiers.status().message();
  auto floor = Engine::Open({.model_path = kModel, .policy = Spec("cocktail-tq:3:t2348:k8")});
  ASSERT_FALSE(floor.ok());
  EXPECT_NE(floor.status().message().find("minimum"), std::string::npos) << floor.status().message();
  auto budget = Engine::Open({.model_path = kModel, .policy = Spec("cocktail"), .kv_budget_bytes = 1000});
  ASSERT_FALSE(budget.ok());
  EXPECT_NE(budget.status().message().find("minimum"), std::string::npos) << budget.status().message();
  auto engine = Open({.policy = Spec("cocktail-kivi:4")});
  ASSERT_TRUE(engine);
  for (const std::vector<std::string>& none : {std::vector<std::string>{}, {" \n"}}) {
    auto ctx = engine->ShareFor(Document(), none);
    ASSERT_FALSE(ctx.ok());
    EXPECT_NE(ctx.status().message().find("needs at least one non-empty question"), std::string::npos)
        << ctx.status().message();
  }
  auto plain = engine->Share(Document());
  ASSERT_FALSE(plain.ok());
  EXPECT_NE(plain.status().message().find("ShareFor(text, questions)"), std::string::npos) << plain.status().message();
  EXPECT_EQ(engine->live_contexts(), 0u);  // nothing half-made is left
}

TEST(HiddenStateEncoder, UnitVectorsDeterministicAndErrors) {
  auto model = Model::Load(kModel);
  ASSERT_TRUE(model.ok()) << model.status().message();
  ForwardPass fwd(**model, 512);
  ThreadPool pool(2);
  HiddenStateEncoder enc(**model, fwd, pool);
  EXPECT_EQ(enc.dim(), (*model)->config().n_embd);
  auto a = enc.Embed("The access code for the north gate is 4817.");
  auto b = enc.Embed("The access code for the north gate is 4817.");
  auto c = enc.Embed("Jupiter is the largest planet in the Solar System.");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  double n2 = 0, ab = 0, ac = 0;
  for (size_t i = 0; i < a->size(); ++i) {
    n2 += double((*a)[i]) * (*a)[i];
    ab += double((*a)[i]) * (*b)[i];
    ac += double((*a)[i]) * (*c)[i];
  }
  EXPECT_NEAR(n2, 1.0, 1e-5);
  EXPECT_NEAR(ab, 1.0, 1e-5);  // same text, same vector
  EXPECT_LT(ac, 0.9999);       // different text, different vector
  EXPECT_FALSE(enc.Embed("").ok());
}

}  // namespace
}  // namespace chorus
