// The grammar engine on a small synthetic vocab (no model): random decoding from the mask always
// gives JSON valid against the schema; a token outside the mask is refused; unsupported schema
// features and malformed schemas are errors that name the problem; compiled grammars are cached.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "grammar/grammar_compiler.h"
#include "grammar/grammar_matcher.h"
#include "grammar/schema_support.h"
#include "grammar/token_vocab.h"
#include "test_schema.h"

namespace chorus {
namespace {

using grammar_test::DecodeRandomly;
using grammar_test::kSchema;
using grammar_test::Violation;

// Printable ASCII one char per token, some longer tokens, the two halves of "é" as byte tokens,
// a control token (empty piece), then the stop token; the logits are 3 wider than the vocab.
struct SyntheticVocab {
  std::vector<std::string> pieces;
  int32_t stop = -1, control = -1, e_acute = -1;
  SyntheticVocab() {
    for (char c = 0x20; c < 0x7f; ++c) pieces.push_back(std::string(1, c));
    for (const char* p :
         {"{\"", "\": ", "\", \"", "true", "false", "null", "12", "[[", "]]", "],[", "admin", "ser", "\xc3", "\xa9"}) {
      pieces.push_back(p);
    }
    e_acute = static_cast<int32_t>(pieces.size());
    pieces.push_back("\xc3\xa9");
    control = static_cast<int32_t>(pieces.size());
    pieces.push_back("");
    stop = static_cast<int32_t>(pieces.size());
    pieces.push_back("");
  }
  int32_t Id(const std::string& piece) const {
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (pieces[i] == piece) return static_cast<int32_t>(i);
    }
    return -1;
  }
};

class GrammarTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const int32_t stops[] = {v_.stop};
    auto vocab = TokenVocab::FromPieces(v_.pieces, stops, static_cast<int32_t>(v_.pieces.size()) + 3);
    ASSERT_TRUE(vocab.ok()) << vocab.status().message();
    auto compiler = GrammarCompiler::Create(*vocab);
    ASSERT_TRUE(compiler.ok()) << compiler.status().message();
    compiler_.emplace(std::move(*compiler));
  }
  Grammar MustCompile(GrammarKind kind, const std::string& text) {
    auto g = compiler_->Compile({.kind = kind, .text = text});
    EXPECT_TRUE(g.ok()) << g.status().message();
    return std::move(g).value();
  }
  // Accepts `text` one char token at a time, then the stop token.
  bool AcceptsText(const Grammar& g, const std::string& text) {
    auto m = GrammarMatcher::Create(g);
    if (!m.ok()) return false;
    for (char c : text) {
      if (!m->Accept(v_.Id(std::string(1, c)))) return false;
    }
    return m->Accept(v_.stop) && m->IsTerminated();
  }
  SyntheticVocab v_;
  std::optional<GrammarCompiler> compiler_;
};

TEST_F(GrammarTest, RandomDecodingFromTheMaskGivesValidJsonForTheSchema) {
  const Grammar g = MustCompile(GrammarKind::kJsonSchema, kSchema);
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    auto m = GrammarMatcher::Create(g);
    ASSERT_TRUE(m.ok()) << m.status().message();
    const auto d = DecodeRandomly(*m, seed, 2000, [&](int32_t t) { return v_.pieces[t]; });
    ASSERT_TRUE(d.every_pick_accepted) << "seed " << seed << ": " << d.text;
    ASSERT_TRUE(d.terminated) << "seed " << seed << " after " << d.steps << " tokens: " << d.text;
    const auto json = nlohmann::json::parse(d.text, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(json.is_discarded()) << "seed " << seed << ": not JSON: " << d.text;
    EXPECT_EQ(Violation(json), "") << "seed " << seed << ": " << d.text;
    if (seed <= 3) std::printf("seed %d, %d tokens: %s\n", static_cast<int>(seed), d.steps, d.text.c_str());
  }
}

TEST_F(GrammarTest, TokenOutsideTheMaskIsRefusedAndLeavesTheStateAlone) {
  const Grammar g = MustCompile(GrammarKind::kJsonSchema, kSchema);
  auto m = GrammarMatcher::Create(g);
  ASSERT_TRUE(m.ok());
  std::vector<uint32_t> mask(MaskWords(g.vocab().Size()));
  ASSERT_TRUE(m->FillMask(mask).ok());
  const int32_t a = v_.Id("a"), brace = v_.Id("{");
  EXPECT_FALSE(MaskAllows(mask, a));
  EXPECT_TRUE(MaskAllows(mask, brace));
  EXPECT_FALSE(MaskAllows(mask, v_.stop));     // the object has not started
  EXPECT_FALSE(MaskAllows(mask, v_.control));  // never text
  const int32_t padding = static_cast<int32_t>(v_.pieces.size()) + 1;
  EXPECT_FALSE(MaskAllows(mask, padding));
  EXPECT_FALSE(m->Accept(a));
  EXPECT_FALSE(m->Accept(v_.stop));
  EXPECT_FALSE(m->Accept(v_.control));
  EXPECT_FALSE(m->Accept(padding));
  EXPECT_FALSE(m->Accept(-1));
  EXPECT_TRUE(m->Accept(brace));  // the refusals changed nothing
  EXPECT_FALSE(m->Accept(brace));
  std::vector<uint32_t> wrong(mask.size() + 1);
  EXPECT_FALSE(m->FillMask(wrong).ok());
}

TEST_F(GrammarTest, StopTokenEndsTheGrammarOnlyWhereItMayEnd) {
  const Grammar g = MustCompile(GrammarKind::kJsonSchema, R"({"type": "object", "properties": {"a": {"type": "string"}},
                                                            "required": ["a"]})");
  auto m = GrammarMatcher::Create(g);
  ASSERT_TRUE(m.ok());
  std::vector<uint32_t> mask(MaskWords(g.vocab().Size()));
  for (char c : std::string(R"({"a": "x)")) ASSERT_TRUE(m->Accept(v_.Id(std::string(1, c)))) << c;
  ASSERT_TRUE(m->Accept(v_.e_acute));     // a whole UTF-8 character
  ASSERT_TRUE(m->Accept(v_.Id("\xc3")));  // a character in two byte tokens
  ASSERT_TRUE(m->FillMask(mask).ok());
  EXPECT_TRUE(MaskAllows(mask, v_.Id("\xa9")));
  EXPECT_FALSE(MaskAllows(mask, v_.Id("\"")));  // not inside a character
  ASSERT_TRUE(m->Accept(v_.Id("\xa9")));
  ASSERT_TRUE(m->Accept(v_.Id("\"")));
  EXPECT_FALSE(m->Accept(v_.stop));
  ASSERT_TRUE(m->Accept(v_.Id("}")));
  ASSERT_TRUE(m->FillMask(mask).ok());
  EXPECT_TRUE(MaskAllows(mask, v_.stop));
  EXPECT_FALSE(MaskAllows(mask, v_.Id(" ")));  // compact: no trailing whitespace
  EXPECT_FALSE(m->IsTerminated());
  ASSERT_TRUE(m->Accept(v_.stop));
  EXPECT_TRUE(m->IsTerminated());
  EXPECT_FALSE(m->Accept(v_.Id("}")));
  EXPECT_FALSE(m->FillMask(mask).ok());
}

TEST_F(GrammarTest, JsonObjectTakesAnyObjectAndNothingElse) {
  const Grammar g = MustCompile(GrammarKind::kJsonObject, "");
  EXPECT_TRUE(AcceptsText(g, R"({"a": [1, 2.5, {"b": null}], "c": "d", "e": true})"));
  EXPECT_TRUE(AcceptsText(g, "{}"));
  EXPECT_FALSE(AcceptsText(g, "[1, 2]"));
  EXPECT_FALSE(AcceptsText(g, R"({"a": })"));
  EXPECT_FALSE(AcceptsText(g, "\"text\""));
}

TEST_F(GrammarTest, EbnfGrammar) {
  const Grammar g = MustCompile(GrammarKind::kEbnf, R"(root ::= "yes" | "no" | "n/a")");
  EXPECT_TRUE(AcceptsText(g, "yes"));
  EXPECT_TRUE(AcceptsText(g, "n/a"));
  EXPECT_FALSE(AcceptsText(g, "maybe"));
  auto bad = compiler_->Compile({.kind = GrammarKind::kEbnf, .text = "root ::= (\"a\""});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("EBNF"), std::string::npos) << bad.status().message();
}

TEST_F(GrammarTest, CompiledGrammarsAreCachedByText) {
  const Grammar a = MustCompile(GrammarKind::kJsonSchema, kSchema);
  const Grammar b = MustCompile(GrammarKind::kJsonSchema, kSchema);
  const Grammar c = MustCompile(GrammarKind::kJsonSchema, R"({"type": "integer"})");
  EXPECT_TRUE(a.SameCompiled(b));
  EXPECT_FALSE(a.SameCompiled(c));
  EXPECT_TRUE(MustCompile(GrammarKind::kJsonObject, "").SameCompiled(MustCompile(GrammarKind::kJsonObject, "")));
}

TEST_F(GrammarTest, MalformedSchemaIsAnError) {
  for (const char* text :
       {R"({"type": )", R"([1, 2])", R"({"type": "strin"})", R"({"type": "integer", "minimum": 5, "maximum": 1})",
        R"({"type": "object", "required": "a"})"}) {
    auto g = compiler_->Compile({.kind = GrammarKind::kJsonSchema, .text = text});
    ASSERT_FALSE(g.ok()) << text;
    EXPECT_NE(g.status().message().find("JSON Schema"), std::string::npos) << g.status().message();
    std::printf("%s\n", g.status().message().c_str());
  }
}

TEST_F(GrammarTest, UnsupportedFeatureIsAnErrorNamingIt) {
  struct Case {
    const char* schema;
    const char* feature;
    const char* at;
  };
  const Case cases[] = {
      {R"({"type": "object", "properties": {"a": {"type": "string", "not": {"const": "x"}}}})", "'not'",
       "/properties/a"},
      {R"({"if": {"type": "string"}, "then": {"maxLength": 3}})", "'if'", "at /"},
      {R"({"type": "array", "uniqueItems": true})", "'uniqueItems'", "at /"},
      {R"({"type": "array", "items": {"type": "array", "contains": {"type": "integer"}}})", "'contains'", "/items"},
      {R"({"type": "object", "dependentRequired": {"a": ["b"]}})", "'dependentRequired'", "at /"},
      {R"({"allOf": [{"type": "object"}, {"required": ["a"]}]})", "'allOf'", "at /"},
      {R"({"type": "object", "anyOf": [{"required": ["a"]}, {"required": ["b"]}]})", "'type'", "at /"},
      {R"({"$defs": {"x": {"type": "number", "multipleOf": 0.5}}, "$ref": "#/$defs/x"})", "'multipleOf'", "/$defs/x"},
      {R"({"type": "string", "format": "credit-card"})", "'format'", "at /"},
      {R"({"type": "string", "pattern": "^a+$", "maxLength": 4})", "'maxLength'", "at /"},
      {R"({"$ref": "https://example.com/s.json"})", "'$ref'", "at /"},
      {R"({"type": "object", "properties": {"x/y": {"oneOf": [{"type": "integer", "exclusiveMaximum": 3,
          "dependencies": {}}]}}})",
       "'dependencies'", "/properties/x~1y/oneOf/0"},
  };
  for (const Case& c : cases) {
    auto g = compiler_->Compile({.kind = GrammarKind::kJsonSchema, .text = c.schema});
    ASSERT_FALSE(g.ok()) << c.schema;
    const std::string& msg = g.status().message();
    EXPECT_NE(msg.find(c.feature), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.at), std::string::npos) << msg;
    EXPECT_NE(msg.find("not supported"), std::string::npos) << msg;
    if (&c == &cases[0] || &c == &cases[6]) std::printf("%s\n", msg.c_str());
  }
}

TEST_F(GrammarTest, SupportedSchemasCompile) {
  for (const char* text : {
           R"({"type": "object", "properties": {"a": {"$ref": "#/$defs/a", "description": "x"}},
               "$defs": {"a": {"type": "array", "items": {"type": ["integer", "null"]}, "uniqueItems": false}}})",
           R"({"anyOf": [{"type": "string", "format": "date"}, {"type": "integer", "multipleOf": 3}]})",
           R"({"oneOf": [{"const": 1}, {"enum": ["a", "b"]}], "title": "t"})",
           R"({"type": "string", "pattern": "^[a-z]+$"})", R"({"allOf": [{"type": "boolean"}]})", "true"}) {
    auto g = compiler_->Compile({.kind = GrammarKind::kJsonSchema, .text = text});
    EXPECT_TRUE(g.ok()) << text << ": " << g.status().message();
  }
}

TEST(TokenVocab, RefusesVocabsItCannotMask) {
  const std::vector<std::string> pieces = {"a", "b", ""};
  const int32_t stop[] = {2}, far[] = {5};
  EXPECT_FALSE(TokenVocab::FromPieces({}, stop).ok());
  EXPECT_FALSE(TokenVocab::FromPieces(pieces, {}).ok());
  EXPECT_FALSE(TokenVocab::FromPieces(pieces, far).ok());
  EXPECT_FALSE(TokenVocab::FromPieces(pieces, stop, 2).ok());
  auto v = TokenVocab::FromPieces(pieces, stop, 40);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->Size(), 40);
  EXPECT_EQ(MaskWords(v->Size()), 2u);
  EXPECT_FALSE(v->IsNeverAllowed(0));
  EXPECT_FALSE(v->IsNeverAllowed(2));
  EXPECT_TRUE(v->IsNeverAllowed(3));
  EXPECT_TRUE(v->IsNeverAllowed(40));
}

}  // namespace
}  // namespace chorus
