// The grammar engine on real vocabs: SmolLM2 (GPT-2 byte-level BPE, 49152 tokens) and Gemma 3
// (SentencePiece with byte fallback, 262144 tokens). Random decoding from the mask over SmolLM2's
// vocab always gives JSON valid against the test schema; tokenized JSON text is accepted token by
// token and ends on the model's end-of-generation tokens; control tokens are never allowed.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "grammar/grammar_compiler.h"
#include "grammar/grammar_matcher.h"
#include "grammar/token_vocab.h"
#include "model/tokenizer.h"
#include "model/tokenizer_gguf.h"
#include "test_schema.h"

namespace chorus {
namespace {

constexpr const char* kSmolLm2 = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
constexpr const char* kGemma3 = "models/gemma-3-270m-q4_k_m.gguf";

std::optional<Tokenizer> LoadTokenizer(const char* path) {
  auto f = GgufFile::Open(path);
  if (!f.ok()) return std::nullopt;
  auto data = TokenizerDataFromGguf(**f);
  if (!data.ok()) return std::nullopt;
  auto tok = Tokenizer::Create(*data);
  if (!tok.ok()) return std::nullopt;
  return std::move(*tok);
}

struct Loaded {
  std::optional<Tokenizer> tok;
  std::optional<GrammarCompiler> compiler;
};

Loaded Load(const char* path) {
  Loaded s;
  s.tok = LoadTokenizer(path);
  if (!s.tok) return s;
  auto vocab = TokenVocab::FromTokenizer(*s.tok);
  EXPECT_TRUE(vocab.ok()) << vocab.status().message();
  if (!vocab.ok()) return s;
  auto compiler = GrammarCompiler::Create(*vocab);
  EXPECT_TRUE(compiler.ok()) << compiler.status().message();
  if (compiler.ok()) s.compiler.emplace(std::move(*compiler));
  return s;
}

// Accepts the tokenization of `text`, then the first stop id; whether all of it was accepted.
bool AcceptsEncoded(const Tokenizer& tok, const Grammar& g, const std::string& text) {
  auto m = GrammarMatcher::Create(g);
  if (!m.ok()) return false;
  for (int32_t t : tok.Encode(text, /*add_special=*/false, /*parse_special=*/false)) {
    if (!m->Accept(t)) return false;
  }
  return m->Accept(g.vocab().StopIds().front()) && m->IsTerminated();
}

TEST(GrammarModel, SmolLm2RandomDecodingFromTheMaskGivesValidJsonForTheSchema) {
  if (!std::filesystem::exists(kSmolLm2)) GTEST_SKIP() << kSmolLm2 << " missing: scripts/fetch_model.sh";
  Loaded s = Load(kSmolLm2);
  ASSERT_TRUE(s.compiler);
  const auto t0 = std::chrono::steady_clock::now();
  auto g = s.compiler->Compile({.kind = GrammarKind::kJsonSchema, .text = grammar_test::kSchema});
  ASSERT_TRUE(g.ok()) << g.status().message();
  std::printf("compile: %.1f ms, %zu bytes\n",
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(),
              g->MemoryBytes());
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    auto m = GrammarMatcher::Create(*g);
    ASSERT_TRUE(m.ok());
    const auto d = grammar_test::DecodeRandomly(*m, seed, 3000, [&](int32_t t) { return s.tok->TokenToPiece(t); });
    ASSERT_TRUE(d.every_pick_accepted) << "seed " << seed << ": " << d.text;
    ASSERT_TRUE(d.terminated) << "seed " << seed << " after " << d.steps << " tokens: " << d.text;
    const auto json = nlohmann::json::parse(d.text, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(json.is_discarded()) << "seed " << seed << ": not JSON: " << d.text;
    EXPECT_EQ(grammar_test::Violation(json), "") << "seed " << seed << ": " << d.text;
    if (seed <= 2) std::printf("seed %d, %d tokens: %s\n", static_cast<int>(seed), d.steps, d.text.c_str());
  }
}

TEST(GrammarModel, SmolLm2TokenizedJsonIsAcceptedAndEndsOnEndOfGeneration) {
  if (!std::filesystem::exists(kSmolLm2)) GTEST_SKIP() << kSmolLm2 << " missing: scripts/fetch_model.sh";
  Loaded s = Load(kSmolLm2);
  ASSERT_TRUE(s.compiler);
  const TokenVocab& vocab = s.compiler->vocab();
  EXPECT_EQ(vocab.Size(), s.tok->n_vocab());
  const auto im_end = s.tok->Find("<|im_end|>"), im_start = s.tok->Find("<|im_start|>");
  ASSERT_TRUE(im_end && im_start);
  EXPECT_NE(std::find(vocab.StopIds().begin(), vocab.StopIds().end(), *im_end), vocab.StopIds().end());
  EXPECT_TRUE(vocab.IsNeverAllowed(*im_start));

  auto object = s.compiler->Compile({.kind = GrammarKind::kJsonObject});
  ASSERT_TRUE(object.ok()) << object.status().message();
  EXPECT_TRUE(AcceptsEncoded(*s.tok, *object, R"({"city": "Zürich", "temps": [-3, 4.5e1], "ok": true, "x": null})"));
  EXPECT_FALSE(AcceptsEncoded(*s.tok, *object, R"(Sure! {"city": "Zürich"})"));

  auto g = s.compiler->Compile({.kind = GrammarKind::kJsonSchema, .text = grammar_test::kSchema});
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(AcceptsEncoded(*s.tok, *g, R"({"name": "Ann", "age": 42, "role": "user", "scores": [[1, -5], []]})"));
  EXPECT_FALSE(AcceptsEncoded(*s.tok, *g, R"({"name": "Ann", "age": 420, "role": "user", "scores": []})"));
  EXPECT_FALSE(AcceptsEncoded(*s.tok, *g, R"({"name": "Ann", "age": 42, "role": "root", "scores": []})"));
  EXPECT_FALSE(AcceptsEncoded(*s.tok, *g, R"({"name": "Ann", "age": 42, "role": "user"})"));

  // Where the object is complete, only the end-of-generation tokens are allowed.
  auto m = GrammarMatcher::Create(*object);
  ASSERT_TRUE(m.ok());
  for (int32_t t : s.tok->Encode(R"({"a": 1})", false, false)) ASSERT_TRUE(m->Accept(t));
  std::vector<uint32_t> mask(MaskWords(vocab.Size()));
  ASSERT_TRUE(m->FillMask(mask).ok());
  for (int32_t t = 0; t < vocab.Size(); ++t) {
    const bool stop = std::find(vocab.StopIds().begin(), vocab.StopIds().end(), t) != vocab.StopIds().end();
    ASSERT_EQ(MaskAllows(mask, t), stop) << t << " " << s.tok->TokenToPiece(t);
  }
}

TEST(GrammarModel, Gemma3SentencePieceVocabAcceptsTokenizedJson) {
  if (!std::filesystem::exists(kGemma3)) GTEST_SKIP() << kGemma3 << " missing: scripts/fetch_model.sh gemma3-270m";
  Loaded s = Load(kGemma3);
  ASSERT_TRUE(s.compiler);
  auto g = s.compiler->Compile({.kind = GrammarKind::kJsonSchema, .text = grammar_test::kSchema});
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_TRUE(AcceptsEncoded(*s.tok, *g, R"({"name": "Zoë 🙂", "age": 7, "role": "guest", "scores": [[0]]})"));
  EXPECT_FALSE(AcceptsEncoded(*s.tok, *g, R"({"name": "Zoë", "age": 7, "role": "guest", "scores": [[9]]})"));
  const auto end_of_turn = s.tok->Find("<end_of_turn>");
  ASSERT_TRUE(end_of_turn);
  const auto& stops = g->vocab().StopIds();
  EXPECT_NE(std::find(stops.begin(), stops.end(), *end_of_turn), stops.end());
}

}  // namespace
}  // namespace chorus
