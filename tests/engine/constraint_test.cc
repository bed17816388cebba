// Grammar-constrained generation on the real model (AgentOptions::constraint): every answer of a
// JSON Schema constraint parses and matches the schema, greedy and sampled, batched with an
// unconstrained request that is unchanged by its neighbour; a structural tag keeps free text and
// forces its tags' contents; refused constraints name why; the model's likelihood is unmasked.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include "chorus/engine.h"
#include "test_document.h"

namespace chorus {
namespace {

using json = nlohmann::json;
using Kind = OutputConstraint::Kind;

void RunAll(Engine& e) {
  for (int i = 0; i < 10000 && (e.running() || e.waiting()); ++i) ASSERT_TRUE(e.Step().ok());
}

std::vector<int32_t> Chat(const Engine& e, const std::string& user) {
  auto text = e.RenderChat({{"user", user}});
  EXPECT_TRUE(text.ok());
  return e.Tokenize(*text, true, true);
}

const char* kSchema = R"({"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 20},
    "population": {"type": "integer", "minimum": 0},
    "kind": {"enum": ["capital", "town"]}},
  "required": ["city", "population", "kind"], "additionalProperties": false})";

void ExpectMatchesSchema(const std::string& text) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << text;
  ASSERT_TRUE(j.is_object()) << text;
  ASSERT_EQ(j.size(), 3u) << text;
  ASSERT_TRUE(j["city"].is_string()) << text;
  EXPECT_LE(j["city"].get<std::string>().size(), 20u) << text;
  ASSERT_TRUE(j["population"].is_number_integer()) << text;
  EXPECT_GE(j["population"].get<int64_t>(), 0) << text;
  EXPECT_TRUE(j["kind"] == "capital" || j["kind"] == "town") << text;
}

TEST(Constraint, SchemaAnswersAreValidGreedyAndSampledAndLeaveNeighboursAlone) {
  auto e = testing_doc::OpenEngine({});
  const auto prompt = Chat(*e, "Describe Paris as JSON with its city name, population and kind.");
  const OutputConstraint c{.kind = Kind::kJsonSchema, .text = kSchema};
  ASSERT_TRUE(e->CheckConstraint(c).ok());
  auto plain_alone = e->Submit(prompt, {.max_tokens = 24});
  RunAll(*e);
  const std::string plain_text = e->agent(*plain_alone)->text;
  std::vector<AgentId> ids;
  for (uint64_t seed = 0; seed < 4; ++seed) {
    auto id = e->Submit(prompt, {.temperature = seed ? 1.0f : 0.0f, .seed = seed, .max_tokens = 96, .constraint = c});
    ASSERT_TRUE(id.ok()) << id.status().message();
    ids.push_back(*id);
  }
  auto plain = e->Submit(prompt, {.max_tokens = 24});  // batched beside the constrained ones
  RunAll(*e);
  for (AgentId id : ids) {
    const AgentState* s = e->agent(id);
    ASSERT_EQ(s->stop, StopReason::kEndOfGeneration) << s->text << " " << s->error;
    ExpectMatchesSchema(s->text);
    EXPECT_GT(s->nll, 0.0);  // the model's likelihood, not the masked one's
  }
  EXPECT_EQ(e->agent(*plain)->text, plain_text);
}

TEST(Constraint, JsonObjectAndStructuralTag) {
  auto e = testing_doc::OpenEngine({});
  auto obj = e->Submit(Chat(*e, "Reply with the JSON object {\"ok\": true} and nothing else."),
                       {.max_tokens = 96, .constraint = {.kind = Kind::kJsonObject}});
  ASSERT_TRUE(obj.ok()) << obj.status().message();
  // Tags only (at_least_one, no free text): the answer is one call with schema-valid arguments.
  const json tag = {
      {"type", "structural_tag"},
      {"format",
       {{"type", "tags_with_separator"},
        {"separator", "\n"},
        {"at_least_one", true},
        {"stop_after_first", true},
        {"tags", json::array({{{"type", "tag"},
                               {"begin", "<tool_call>{\"name\": \"lookup\", \"arguments\": "},
                               {"content", {{"type", "json_schema"}, {"json_schema", json::parse(kSchema)}}},
                               {"end", "}</tool_call>"}}})}}}};
  auto call = e->Submit(Chat(*e, "Look up Paris."),
                        {.max_tokens = 96, .constraint = {.kind = Kind::kStructuralTag, .text = tag.dump()}});
  ASSERT_TRUE(call.ok()) << call.status().message();
  RunAll(*e);
  const AgentState* so = e->agent(*obj);
  ASSERT_EQ(so->stop, StopReason::kEndOfGeneration) << so->text;
  const json j = json::parse(so->text, nullptr, false);
  EXPECT_TRUE(j.is_object()) << so->text;
  const std::string t = e->agent(*call)->text;
  const std::string begin = "<tool_call>{\"name\": \"lookup\", \"arguments\": ", end = "}</tool_call>";
  ASSERT_EQ(t.rfind(begin, 0), 0u) << t;
  ASSERT_GE(t.size(), begin.size() + end.size()) << t;
  ASSERT_EQ(t.substr(t.size() - end.size()), end) << t;
  ExpectMatchesSchema(t.substr(begin.size(), t.size() - begin.size() - end.size()));
}

TEST(Constraint, RefusedConstraintsNameWhy) {
  auto e = testing_doc::OpenEngine({});
  const auto prompt = Chat(*e, "Hi");
  struct Case {
    OutputConstraint c;
    std::string says;
  } cases[] = {
      {{Kind::kJsonSchema, R"({"type": "object", "not": {"required": ["a"]}})"}, "'not'"},
      {{Kind::kJsonSchema, "{not json"}, "not valid JSON"},
      {{Kind::kEbnf, "root ::= "}, "EBNF"},
      {{Kind::kStructuralTag, R"({"type": "json_schema", "json_schema": {"uniqueItems": true, "type": "array"}})"},
       "uniqueItems"},
  };
  for (const Case& k : cases) {
    const Status s = e->CheckConstraint(k.c);
    ASSERT_FALSE(s.ok()) << k.c.text;
    EXPECT_NE(s.message().find(k.says), std::string::npos) << s.message();
    auto id = e->Submit(prompt, {.max_tokens = 8, .constraint = k.c});
    ASSERT_FALSE(id.ok());
    EXPECT_EQ(id.status().message(), s.message());
  }
}

}  // namespace
}  // namespace chorus
