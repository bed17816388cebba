// request_fuzz: the OpenAI request parsers on arbitrary bytes (as an HTTP body arrives): chat,
// completions, contexts and the Responses API. Every input must parse into an in-range request or
// one ApiError naming a field — never crash, hang or throw — and what parses must render back into
// valid JSON responses (a Responses request also through its object and its stream's events).
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "server/protocol.h"
#include "server/responses.h"
#include "server/text_stream.h"
#include "server/tools.h"

using namespace chorus::server;

static void Check(bool ok) {
  if (!ok) std::abort();
}

static void Exercise(const ParsedRequest& p) {
  if (const auto* e = std::get_if<ApiError>(&p)) {
    Check(e->status >= 400 && e->status < 600 && !e->message.empty());
    (void)ErrorJson(*e).dump();
    return;
  }
  const GenerationRequest& r = std::get<GenerationRequest>(p);
  Check(r.temperature >= 0 && r.temperature <= 2);
  Check(r.top_p > 0 && r.top_p <= 1);
  Check(!r.max_tokens || *r.max_tokens >= (r.echo ? 0 : 1));  // 0: echo alone (completions)
  Check(!r.echo || r.endpoint == Endpoint::kCompletion);
  Check(r.stop.size() <= 4);
  for (const auto& s : r.stop) Check(!s.empty());
  Check(r.endpoint != Endpoint::kChat || !r.messages.empty());
  ResponseIds ids{.id = "x", .created = 1, .model = r.model, .fingerprint = "f"};
  std::string text;
  for (const auto& m : r.messages) text += m.content;
  text += r.prompt;
  // Stream the user's text as if the model had said it, through the stop strings.
  TextStream ts(r.stop);
  for (size_t i = 1; i <= text.size() && i < 4096; i += 7) (void)ts.Feed(std::string_view(text).substr(0, i), false);
  (void)ts.Feed(text, true);
  (void)SseData(ChatChunk(ids, ts.emitted(), true, ""));
  (void)ChatResponse(ids, text, "stop", {}).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  (void)CompletionResponse(ids, text, "length", {}).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  // Tools: the fallback prompt, the constraint, and the user's text parsed as if it were an answer.
  Check(r.n >= 1 && r.n <= 16 && r.top_logprobs <= 20 && r.logit_bias.size() <= 300);
  Check(r.tool_choice != ToolChoice::kNamed || !r.tool_name.empty());
  std::vector<std::string> contents;
  for (const auto& m : r.messages) contents.push_back(m.content);
  (void)RenderTurns(r, contents);
  const chorus::OutputConstraint c = ConstraintFor(r);
  Check(c.kind == chorus::OutputConstraint::Kind::kNone || c.kind == chorus::OutputConstraint::Kind::kJsonObject ||
        !c.text.empty());
  ToolCallParser whole, parts;
  whole.Feed(text, true);
  for (size_t i = 1; i <= text.size() && i < 4096; i += 5) (void)parts.Feed(std::string_view(text).substr(0, i), false);
  (void)parts.Feed(text, true);
  Check(whole.calls().size() == parts.calls().size());
  (void)ChatResponse(ids, whole.content(), whole.calls(), "tool_calls", {})
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// POST /v1/responses: the chat request it stands for goes through the checks above, then the
// response object and the stream's events are built from the user's text as if it were the answer.
static void ExerciseResponses(std::string_view body) {
  auto p = ParseResponsesRequest(body, {});
  if (const auto* e = std::get_if<ApiError>(&p)) {
    Check(e->status >= 400 && e->status < 600 && !e->message.empty());
    (void)ErrorJson(*e).dump();
    return;
  }
  const ResponsesRequest& r = std::get<ResponsesRequest>(p);
  Check(r.chat.endpoint == Endpoint::kChat && r.echo.is_object());
  Exercise(ParsedRequest(r.chat));
  std::string text;
  for (const auto& m : r.chat.messages) text += m.content;
  ToolCallParser calls;
  calls.Feed(text, true);
  const nlohmann::json object =
      ResponseObject("resp_x", 1, "m", r, calls.content(), calls.calls(), "stop", {.prompt_tokens = 3});
  (void)object.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  ResponseEvents events(ToolsActive(r.chat), object);
  size_t n = events.Start().size();
  for (size_t i = 1; i <= text.size() && i < 4096; i += 9)
    n += events.Feed(std::string_view(text).substr(0, i), false).size();
  n += events.Feed(text, true).size();
  for (const nlohmann::json& e : events.Finish(object))
    (void)e.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), ++n;
  Check(n >= 2);  // at least response.created and response.completed
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  Exercise(ParseChatCompletion(body));
  Exercise(ParseCompletion(body));
  ExerciseResponses(body);
  auto c = ParseContextRequest(body);
  if (auto* e = std::get_if<ApiError>(&c)) Check(!e->message.empty());
  (void)IsValidUtf8(body);
  return 0;
}
