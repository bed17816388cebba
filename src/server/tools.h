// Tool calling and structured output on the chat protocol: `tools`, `tool_choice`,
// `parallel_tool_calls` and `response_format` parsed into native types; the prompt a chat template
// without tool support gets (the documented fallback: Hermes / Qwen 2.5's <tool_call> format,
// docs/GRAMMAR.md); the grammar that makes every call's arguments valid for its schema; and
// the parser that turns the generated text back into tool_calls, whole or streamed.
// Invariants: pure (no engine, no I/O); with tools active the answer's text is `content` followed by
// calls written as kCallBegin NAME kCallArgs ARGS kCallEnd, because the grammar allows nothing else.
#pragma once
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chorus/engine.h"  // OutputConstraint
#include "protocol.h"

namespace chorus::server {

// How a call is written (the grammar forces it): <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>
inline constexpr std::string_view kCallTrigger = "<tool_call>";
inline constexpr std::string_view kCallBegin = "<tool_call>\n{\"name\": \"";
inline constexpr std::string_view kCallArgs = "\", \"arguments\": ";
inline constexpr std::string_view kCallEnd = "}\n</tool_call>";

// A fresh id: prefix + 24 random letters and digits ("call_…", "msg_…", "fc_…").
std::string RandomId(std::string_view prefix);

// tools, tool_choice, parallel_tool_calls and response_format of a request body into r (chat; a
// completion has response_format only). An error names the field.
std::optional<ApiError> ParseToolFields(const nlohmann::json& body, GenerationRequest* r);
// messages[i].tool_calls (assistant) and tool_call_id (tool) into turn.
std::optional<ApiError> ParseMessageTools(const nlohmann::json& message, const std::string& at, ChatTurn* turn);

// The (role, content) turns a template without tools renders, contents[i] being messages[i]'s text
// with its contexts in: the tools described at the end of the system turn (one is added first when
// there is none), an assistant's calls as <tool_call> blocks after its text, and each run of tool
// results as one user turn of <tool_response> blocks. Without tools (or tool_choice none) the
// tool turns are rendered the same way, so a conversation can go on after its tools are gone.
std::vector<std::pair<std::string, std::string>> RenderTurns(const GenerationRequest& g,
                                                             const std::vector<std::string>& contents);

// What the request's answer is constrained to: tools (unless none) → an xgrammar structural tag
// (auto: free text with triggered calls; required / named: calls only; parallel_tool_calls false:
// one call), else response_format json_object / json_schema, else nothing.
OutputConstraint ConstraintFor(const GenerationRequest& g);
// Whether the request's answer is parsed for tool calls.
inline bool ToolsActive(const GenerationRequest& g) { return !g.tools.empty() && g.tool_choice != ToolChoice::kNone; }

// Parses generated text into content and calls as it grows; Feed returns what became known.
class ToolCallParser {
 public:
  struct Event {
    enum class Kind { kText, kCallStart, kArguments } kind;
    size_t index = 0;      // the call's (kCallStart, kArguments)
    std::string text;      // kText: content; kArguments: a piece of the arguments
    std::string id, name;  // kCallStart
  };
  // `text`: everything visible so far (it only grows); `done`: nothing more will come.
  std::vector<Event> Feed(std::string_view text, bool done);
  const std::string& content() const { return content_; }
  const std::vector<ToolCall>& calls() const { return calls_; }

 private:
  enum class State { kText, kHeader, kArguments } state_ = State::kText;
  size_t pos_ = 0;       // bytes of the text consumed
  std::string content_;  // the content emitted
  std::string held_ws_;  // whitespace after a call, emitted only if text follows it
  std::vector<ToolCall> calls_;
};

}  // namespace chorus::server
