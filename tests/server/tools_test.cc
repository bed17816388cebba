// Tools and structured output on the chat protocol (tools.h): parsing into native types, the
// fallback prompt, the constraint each tool_choice gets, and the call parser — whole and streamed
// a byte at a time give the same content and calls.
#include "server/tools.h"

#include <gtest/gtest.h>

#include <string>
#include <variant>

namespace chorus::server {
namespace {

using json = nlohmann::json;

GenerationRequest Parse(const json& body) {
  ParsedRequest p = ParseChatCompletion(body.dump());
  if (auto* e = std::get_if<ApiError>(&p)) ADD_FAILURE() << e->message;
  return std::get_if<GenerationRequest>(&p) ? std::get<GenerationRequest>(p) : GenerationRequest{};
}

json Weather() {
  return {{"type", "function"},
          {"function",
           {{"name", "get_weather"},
            {"description", "Weather in a city"},
            {"parameters",
             {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}, {"required", {"city"}}}}}}};
}
json Time() { return {{"type", "function"}, {"function", {{"name", "get_time"}}}}; }

TEST(Tools, ParsesToolsChoiceAndMessages) {
  const json msgs =
      json::array({{{"role", "user"}, {"content", "Weather in Paris?"}},
                   {{"role", "assistant"},
                    {"content", nullptr},
                    {"tool_calls",
                     {{{"id", "call_1"},
                       {"type", "function"},
                       {"function", {{"name", "get_weather"}, {"arguments", "{\"city\": \"Paris\"}"}}}}}}},
                   {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "sunny"}}});
  GenerationRequest g = Parse({{"messages", msgs}, {"tools", {Weather(), Time()}}});
  ASSERT_EQ(g.tools.size(), 2u);
  EXPECT_EQ(g.tool_choice, ToolChoice::kAuto);
  EXPECT_EQ(g.tools[1].parameters, json({{"type", "object"}, {"properties", json::object()}}));
  ASSERT_EQ(g.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(g.messages[1].tool_calls[0].arguments, "{\"city\": \"Paris\"}");
  EXPECT_EQ(g.messages[2].tool_call_id, "call_1");
  EXPECT_EQ(Parse({{"messages", msgs}, {"tools", {Weather()}}, {"tool_choice", "required"}}).tool_choice,
            ToolChoice::kRequired);
  GenerationRequest named = Parse({{"messages", msgs},
                                   {"tools", {Weather(), Time()}},
                                   {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_time"}}}}}});
  EXPECT_EQ(named.tool_choice, ToolChoice::kNamed);
  EXPECT_EQ(named.tool_name, "get_time");
  EXPECT_EQ(Parse({{"messages", msgs}}).tool_choice, ToolChoice::kNone);
  EXPECT_FALSE(Parse({{"messages", msgs}, {"tools", {Weather()}}, {"parallel_tool_calls", false}}).parallel_tool_calls);
}

TEST(Tools, RendersTheFallbackPrompt) {
  GenerationRequest g =
      Parse({{"messages",
              {{{"role", "user"}, {"content", "Weather?"}},
               {{"role", "assistant"},
                {"content", "Let me look."},
                {"tool_calls",
                 {{{"id", "a"},
                   {"type", "function"},
                   {"function", {{"name", "get_weather"}, {"arguments", "{\"city\": \"X\"}"}}}},
                  {{"id", "b"}, {"type", "function"}, {"function", {{"name", "get_time"}, {"arguments", "{}"}}}}}}},
               {{"role", "tool"}, {"tool_call_id", "a"}, {"content", "sunny"}},
               {{"role", "tool"}, {"tool_call_id", "b"}, {"content", "noon"}}}},
             {"tools", {Weather(), Time()}}});
  const auto turns = RenderTurns(g, {"Weather?", "Let me look.", "sunny", "noon"});
  ASSERT_EQ(turns.size(), 4u);  // system (tools), user, assistant, one user turn of both results
  EXPECT_EQ(turns[0].first, "system");
  EXPECT_NE(turns[0].second.find("\"name\":\"get_weather\""), std::string::npos) << turns[0].second;
  EXPECT_EQ(turns[2].second,
            "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"X\"}}\n</tool_call>\n"
            "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>");
  EXPECT_EQ(turns[3],
            (std::pair<std::string, std::string>{
                "user", "<tool_response>\nsunny\n</tool_response>\n<tool_response>\nnoon\n</tool_response>"}));
  g.tool_choice = ToolChoice::kNone;  // tools not offered: no system turn, the history still renders
  EXPECT_EQ(RenderTurns(g, {"Weather?", "Let me look.", "sunny", "noon"}).size(), 3u);
}

TEST(Tools, ConstraintFollowsToolChoice) {
  using K = OutputConstraint::Kind;
  const json msgs = {{{"role", "user"}, {"content", "x"}}};
  auto format = [](const OutputConstraint& c) { return json::parse(c.text)["format"]; };
  const OutputConstraint autoc = ConstraintFor(Parse({{"messages", msgs}, {"tools", {Weather(), Time()}}}));
  ASSERT_EQ(autoc.kind, K::kStructuralTag);
  EXPECT_EQ(format(autoc)["type"], "triggered_tags");
  EXPECT_EQ(format(autoc)["tags"].size(), 2u);
  const OutputConstraint req = ConstraintFor(Parse({{"messages", msgs},
                                                    {"tools", {Weather(), Time()}},
                                                    {"tool_choice", "required"},
                                                    {"parallel_tool_calls", false}}));
  EXPECT_EQ(format(req)["type"], "tags_with_separator");
  EXPECT_EQ(format(req)["stop_after_first"], true);
  const OutputConstraint named =
      ConstraintFor(Parse({{"messages", msgs},
                           {"tools", {Weather(), Time()}},
                           {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_time"}}}}}}));
  ASSERT_EQ(format(named)["tags"].size(), 1u);
  EXPECT_EQ(format(named)["tags"][0]["begin"], "<tool_call>\n{\"name\": \"get_time\", \"arguments\": ");
  const json schema = {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}};
  const OutputConstraint js = ConstraintFor(
      Parse({{"messages", msgs},
             {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "n"}, {"schema", schema}}}}}}));
  EXPECT_EQ(js.kind, K::kJsonSchema);
  EXPECT_EQ(json::parse(js.text), schema);
  EXPECT_EQ(ConstraintFor(Parse({{"messages", msgs}, {"response_format", {{"type", "json_object"}}}})).kind,
            K::kJsonObject);
  EXPECT_EQ(ConstraintFor(Parse({{"messages", msgs}})).kind, K::kNone);
  EXPECT_EQ(ConstraintFor(Parse({{"messages", msgs}, {"tools", {Weather()}}, {"tool_choice", "none"}})).kind, K::kNone);
}

TEST(Tools, ParserGivesTheSameCallsWholeAndByteByByte) {
  const std::string text =
      "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris <b>\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
  ToolCallParser whole;
  whole.Feed(text, true);
  EXPECT_EQ(whole.content(), "Checking.\n");
  ASSERT_EQ(whole.calls().size(), 2u);
  EXPECT_EQ(whole.calls()[0].name, "get_weather");
  EXPECT_EQ(whole.calls()[0].arguments, "{\"city\": \"Paris <b>\"}");
  EXPECT_EQ(whole.calls()[1].name, "get_time");
  EXPECT_EQ(whole.calls()[1].arguments, "{}");
  EXPECT_EQ(whole.calls()[0].id.rfind("call_", 0), 0u);
  EXPECT_NE(whole.calls()[0].id, whole.calls()[1].id);
  ToolCallParser bytes;
  std::string content, args[2];
  size_t starts = 0;
  for (size_t n = 1; n <= text.size(); ++n)
    for (const auto& e : bytes.Feed(std::string_view(text).substr(0, n), n == text.size())) {
      using K = ToolCallParser::Event::Kind;
      if (e.kind == K::kText) content += e.text;
      if (e.kind == K::kCallStart) EXPECT_EQ(e.index, starts++);
      if (e.kind == K::kArguments) args[e.index] += e.text;
      if (e.kind == K::kText) EXPECT_EQ(e.text.find('<'), std::string::npos) << e.text;  // no call text leaks
    }
  EXPECT_EQ(content, "Checking.\n");
  EXPECT_EQ(starts, 2u);
  EXPECT_EQ(args[0], whole.calls()[0].arguments);
  EXPECT_EQ(args[1], whole.calls()[1].arguments);
  ToolCallParser plain;  // no call: all content, a trailing partial trigger released at the end
  plain.Feed("a <tool", false);
  EXPECT_EQ(plain.content(), "a ");
  plain.Feed("a <tool", true);
  EXPECT_EQ(plain.content(), "a <tool");
}

}  // namespace
}  // namespace chorus::server
