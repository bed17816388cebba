// research::Open and ScoreSequence on a tiny random-weight model: the rows it hands back are the model's
// logits at every position (their NLL equals Engine::Score's where both store the same formats), the
// scored tokens are stored the way a prompt is (the policy's shared formats, not the private ones
// Engine::Score's text gets), nothing is kept after the call, the allocator admits the sequence as
// a unit, an engine over another's weights scores as one with its own, and bad input is refused
// with the problem named.
#include <gtest/gtest.h>
#include <unistd.h>  // getpid

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "../model/synthetic_model.h"
#include "chorus/research.h"

namespace chorus {
namespace {

std::string TinyPath() {
  return std::string(::testing::TempDir()) + "/research_test." + std::to_string(getpid()) + ".gguf";
}

EngineOptions TinyOptions(const std::string& policy, const std::string& private_formats = "q8") {
  EngineOptions o{.model_path = TinyPath(), .threads = 2, .n_ctx = 256, .policy = KvPolicy::Parse(policy).value()};
  o.private_k = o.private_v = private_formats;
  o.kv_window = "f16";
  return o;
}

std::unique_ptr<Engine> OpenTiny(const std::string& policy, const std::string& private_formats = "q8") {
  EXPECT_TRUE(testing::SyntheticModel(testing::TinySpec("research")).WriteFile(TinyPath()).ok());
  auto e = research::Open(TinyOptions(policy, private_formats), {.join_reserve = false});
  std::remove(TinyPath().c_str());
  EXPECT_TRUE(e.ok()) << e.status().message();
  return e.ok() ? std::move(e).value() : nullptr;
}

// 80 tokens: two full 32-token blocks (sealed) and a tail.
std::vector<int32_t> Tokens() {
  std::vector<int32_t> t;
  for (int i = 0; i < 80; ++i) t.push_back(3 + (i * 37 + i * i) % 290);
  return t;
}

double LogSumExp(std::span<const float> row) {
  float m = row[0];
  for (float x : row) m = std::max(m, x);
  double s = 0;
  for (float x : row) s += std::exp(double(x) - m);
  return m + std::log(s);
}

TEST(ResearchScore, HandsEveryRowAndAgreesWithScore) {
  auto e = OpenTiny("f16", "f16");  // the text Score stores is private: the same formats here
  ASSERT_TRUE(e);
  const std::vector<int32_t> toks = Tokens();
  std::vector<size_t> seen;
  double nll = 0;
  auto kv = research::ScoreSequence(*e, toks, {.on_logits = [&](size_t j, std::span<const float> row) {
    ASSERT_EQ(row.size(), e->vocab_size());
    seen.push_back(j);
    if (j + 1 < toks.size()) nll -= row[toks[j + 1]] - LogSumExp(row);
  }});
  ASSERT_TRUE(kv.ok()) << kv.status().message();
  ASSERT_EQ(seen.size(), toks.size());
  for (size_t j = 0; j < seen.size(); ++j) EXPECT_EQ(seen[j], j);
  auto score = e->Score(0, std::span<const int32_t>(toks));
  ASSERT_TRUE(score.ok()) << score.status().message();
  EXPECT_NEAR(nll, score->nll, 1e-6 * std::abs(score->nll));
}

TEST(ResearchScore, StoresTheTokensAsAPromptAndKeepsNothing) {
  auto e = OpenTiny("kivi4/kivi2:s1");  // private q8: a sequence stored as Score's text would show q8
  ASSERT_TRUE(e);
  const std::vector<int32_t> toks = Tokens();
  auto kv = research::ScoreSequence(*e, toks, {});
  ASSERT_TRUE(kv.ok()) << kv.status().message();
  ASSERT_FALSE(kv->k_formats.empty());
  for (size_t l = 0; l < kv->k_formats.size(); ++l) {
    EXPECT_EQ(kv->k_formats[l], (std::vector<std::string>{"f16", "kivi4"})) << "layer " << l;  // sink, then shared
    EXPECT_EQ(kv->v_formats[l], (std::vector<std::string>{"f16", "kivi2"})) << "layer " << l;
  }
  EXPECT_EQ(kv->sealed_blocks, 2 * kv->k_formats.size());
  EXPECT_GT(kv->block_bytes, 0u);
  EXPECT_GE(kv->total_bytes, kv->block_bytes + kv->window_bytes + kv->table_bytes);  // and the scratch
  const size_t held = e->KvReport().total_bytes;                                     // after the call: scratch only
  EXPECT_LT(held, kv->total_bytes);
  auto again = research::ScoreSequence(*e, toks, {});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->total_bytes, kv->total_bytes);  // independent of the call before it
  EXPECT_EQ(e->KvReport().total_bytes, held);
}

TEST(ResearchScore, TheAllocatorAdmitsTheSequenceAsAUnit) {
  auto e = OpenTiny("comix-kivi:3");
  ASSERT_TRUE(e);
  auto kv = research::ScoreSequence(*e, Tokens(), {.label = "chunk 1"});
  ASSERT_TRUE(kv.ok()) << kv.status().message();
  size_t narrow = 0;
  for (const auto& layer : kv->k_formats)
    for (const std::string& f : layer) narrow += f != "f16";
  EXPECT_GT(narrow, 0u);  // the non-sink blocks got the allocator's bits
  EXPECT_GT(e->AllocationTiming().count, 0u);
}

// A second engine over the first one's weights (the file is gone: nothing is loaded again) scores
// exactly as an engine of its own would.
TEST(ResearchScore, AnEngineOverAnothersWeightsScoresTheSame) {
  auto own = OpenTiny("kivi4/kivi2");
  auto base = OpenTiny("f16");
  ASSERT_TRUE(own && base);
  auto shared = research::Open(TinyOptions("kivi4/kivi2"), {.join_reserve = false, .weights_of = base.get()});
  ASSERT_TRUE(shared.ok()) << shared.status().message();
  const auto nll = [](Engine& e) {
    const std::vector<int32_t> toks = Tokens();
    double sum = 0;
    auto kv = research::ScoreSequence(e, toks, {.on_logits = [&](size_t j, std::span<const float> row) {
                                        if (j + 1 < toks.size()) sum -= row[toks[j + 1]] - LogSumExp(row);
                                      }});
    EXPECT_TRUE(kv.ok());
    return sum;
  };
  EXPECT_EQ(nll(**shared), nll(*own));
  EXPECT_NE(nll(**shared), nll(*base));  // its own policy, not the base's
  EngineOptions other = TinyOptions("f16");
  other.model_path += ".other";
  auto wrong = research::Open(other, {.weights_of = base.get()});
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("weights_of"), std::string::npos) << wrong.status().message();
}

TEST(ResearchScore, BadInputNamesTheProblem) {
  auto e = OpenTiny("cocktail-paper");
  ASSERT_TRUE(e);
  const std::vector<int32_t> one = {5};
  auto short_seq = research::ScoreSequence(*e, one, {.query = "q"});
  ASSERT_FALSE(short_seq.ok());
  EXPECT_NE(short_seq.status().message().find("at least 2 tokens"), std::string::npos);
  auto no_query = research::ScoreSequence(*e, Tokens(), {});
  ASSERT_FALSE(no_query.ok());
  EXPECT_NE(no_query.status().message().find("needs a question"), std::string::npos) << no_query.status().message();
  const std::vector<int32_t> bad = {5, 1 << 30};
  auto out_of_vocab = research::ScoreSequence(*e, bad, {.query = "q"});
  ASSERT_FALSE(out_of_vocab.ok());
  EXPECT_NE(out_of_vocab.status().message().find("outside the vocabulary"), std::string::npos);
}

}  // namespace
}  // namespace chorus
