// The OpenAI wire protocol as pure functions: request body → validated GenerationRequest (or an
// ApiError naming the field), results → response JSON, SSE framing. No I/O, no engine: fuzzed.
// Invariant: every input either parses into a request whose fields are all in range, or gives
// one ApiError with an HTTP status, an OpenAI error type, the offending field and a message.
#pragma once
#include <nlohmann/json.hpp>

#include "chorus/engine.h"  // TokenLogprob

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace chorus::server {

// {"error": {"message", "type", "param", "code"}} with the HTTP status it is sent with.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field, "" when none
  std::string code;   // machine-readable, "" when none
};

// A function call an assistant made: arguments is the JSON text of the arguments object.
struct ToolCall {
  std::string id, name, arguments;
};

struct ChatTurn {
  std::string role;     // system, developer (→ system), user, assistant, tool
  std::string content;  // text parts joined
  std::vector<ToolCall> tool_calls;  // assistant: the calls it made
  std::string tool_call_id;          // tool: the call this is the result of
  // chorus_context parts: a pinned context's text goes at byte `at` of content (in order).
  struct ContextRef {
    size_t at = 0;
    std::string id;  // "ctx-N"
  };
  std::vector<ContextRef> contexts;
};

enum class Endpoint { kChat, kCompletion };

// tools[i] of type function: name, description and the JSON Schema of its arguments.
struct ToolSpec {
  std::string name, description;
  nlohmann::json parameters;  // {"type": "object", "properties": {}} when not given
};
// tool_choice: none (tools not offered), auto (the model decides: text or calls), required (one
// call or more), a named function (exactly that one).
enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

// response_format: text, any JSON object, or a JSON Schema.
struct ResponseFormat {
  enum class Kind { kText, kJsonObject, kJsonSchema } kind = Kind::kText;
  std::string name;       // json_schema.name
  nlohmann::json schema;  // json_schema.schema
};

// Limits the parser enforces (the server fills them from its flags and the model).
struct ProtocolLimits {
  size_t max_tokens = 1 << 20;  // the most a request may ask for (≤ the context)
  size_t max_stop = 4;          // stop strings (OpenAI: up to 4)
  size_t max_stop_bytes = 256;  // bytes per stop string
  size_t max_messages = 4096;
  size_t max_n = 16;   // choices per request
  size_t n_vocab = 0;  // logit_bias ids must be below it (0: unchecked)
};

// One generation request, validated. Defaults are OpenAI's (temperature 1, top_p 1).
struct GenerationRequest {
  Endpoint endpoint = Endpoint::kChat;
  std::string model;
  std::vector<ChatTurn> messages;     // chat
  std::string prompt;                 // completion given as text
  std::vector<int32_t> prompt_tokens; // completion given as token ids (then prompt is empty)
  std::optional<int> max_tokens;      // none: the server's default; 0 only with echo
  float temperature = 1.0f;           // [0, 2]; 0 = greedy
  float top_p = 1.0f;                 // (0, 1]
  int top_k = 0;                      // chorus/llama.cpp extension; 0 = off
  std::optional<uint64_t> seed;       // none: the server draws one
  std::vector<std::string> stop;      // up to max_stop non-empty strings
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  bool ignore_eos = false;            // extension: generate past end-of-generation tokens
  int n = 1;                          // choices, each its own sample of the same prompt
  float presence_penalty = 0.0f;      // [-2, 2]
  float frequency_penalty = 0.0f;     // [-2, 2]
  std::vector<std::pair<int32_t, float>> logit_bias;  // token id → [-100, 100]
  int top_logprobs = -1;                              // -1: no logprobs; else logprobs with this many alternatives
  // Completions: the prompt's text before the answer; with logprobs also the prompt tokens' (the
  // first null), as evaluation harnesses score prompts. max_tokens 0 is allowed with it (not streamed).
  bool echo = false;
  // Extension "chorus": {"reuse": "exact" | "segments"}: whether spans of the prompt cached after
  // other text may be reused at their new offset (repaired), or only exact prefixes; "" = the server's.
  std::string reuse;
  // Chat only (tools.h).
  std::vector<ToolSpec> tools;
  ToolChoice tool_choice = ToolChoice::kAuto;  // kNone when there are no tools
  std::string tool_name;                       // kNamed: the function
  bool parallel_tool_calls = true;             // false: at most one call per answer
  ResponseFormat response_format;
  // vLLM's cache_salt: prompts with different salts never share cached KV (folded into the scope).
  std::string cache_salt;
};

using ParsedRequest = std::variant<GenerationRequest, ApiError>;

// The request parsers' shared pieces (protocol.cc, tools.cc, responses.cc): a 400 naming the
// field, and a field that is present and not null (OpenAI clients send null for "not given").
ApiError Bad(std::string param, std::string message, std::string code = "invalid_value");
const nlohmann::json* Field(const nlohmann::json& obj, const char* name);

// POST /v1/chat/completions and POST /v1/completions bodies.
ParsedRequest ParseChatCompletion(std::string_view body, const ProtocolLimits& limits = {});
ParsedRequest ParseCompletion(std::string_view body, const ProtocolLimits& limits = {});

// POST /v1/contexts {"text": "...", "scope": "private" | "public"} (chorus extension). A public
// context's blocks are reused by every tenant; a private one's (the default) by the creator's scope.
struct ContextRequest {
  std::string text;
  bool is_public = false;
};
std::variant<ContextRequest, ApiError> ParseContextRequest(std::string_view body);

struct Usage {
  size_t prompt_tokens = 0;
  size_t completion_tokens = 0;
  size_t cached_tokens = 0;  // prompt tokens whose KV came from the prefix cache (exact prefix)
  size_t reused_tokens = 0;  // prompt tokens whose KV came from a segment at another offset (repaired)
};

// What every response object of one request carries.
struct ResponseIds {
  std::string id;       // "chatcmpl-…" / "cmpl-…"
  int64_t created = 0;  // unix seconds
  std::string model;
  std::string fingerprint;  // system_fingerprint
};

nlohmann::json UsageJson(const Usage& u);
// Non-streaming responses. finish_reason: "stop" or "length".
nlohmann::json ChatResponse(const ResponseIds& ids, const std::string& text, const std::string& finish_reason,
                            const Usage& usage);
// With tool calls: content null when empty, finish_reason "tool_calls" set by the caller.
nlohmann::json ChatResponse(const ResponseIds& ids, const std::string& text, const std::vector<ToolCall>& calls,
                            const std::string& finish_reason, const Usage& usage);
nlohmann::json CompletionResponse(const ResponseIds& ids, const std::string& text, const std::string& finish_reason,
                                  const Usage& usage);
// Streaming chunks: the first chat chunk carries the role; the last one the finish_reason (empty
// text then). A usage chunk has no choices.
nlohmann::json ChatChunk(const ResponseIds& ids, const std::string& delta, bool first,
                         const std::string& finish_reason);
// A streamed tool call: the first chunk of call `index` carries its id, type and name (arguments
// ""), later ones pieces of its arguments (id and name empty).
nlohmann::json ToolCallChunk(const ResponseIds& ids, size_t index, const std::string& id, const std::string& name,
                             const std::string& arguments);
nlohmann::json CompletionChunk(const ResponseIds& ids, const std::string& text, const std::string& finish_reason);
nlohmann::json UsageChunk(const ResponseIds& ids, Endpoint endpoint, const Usage& usage);

// The logprobs object of one choice: chat {"content": [{token, logprob, bytes, top_logprobs}]},
// completions {tokens, token_logprobs, top_logprobs, text_offset}; `piece` gives a token's text.
// Completions with echo: lps starts with the prompt's tokens, the first with a NaN logprob (null
// token_logprobs and top_logprobs entries: nothing predicts it); the first `unshown` tokens are
// ones the echoed text does not show (a BOS the tokenizer added) and advance text_offset by nothing.
nlohmann::json LogprobsJson(Endpoint ep, const std::vector<TokenLogprob>& lps,
                            const std::function<std::string(int32_t)>& piece, size_t text_offset = 0,
                            size_t unshown = 0);

// Completions with echo and logprobs: the prompt's tokens (LogprobsJson's NaN first entry and
// `unshown`), then the answer's, whose text_offset starts after the echoed text (echo_bytes).
nlohmann::json EchoLogprobsJson(const std::vector<TokenLogprob>& prompt, size_t unshown, size_t echo_bytes,
                                const std::vector<TokenLogprob>& answer,
                                const std::function<std::string(int32_t)>& piece);

nlohmann::json ErrorJson(const ApiError& e);
// Server-sent events: "data: <json>\n\n" and the terminator "data: [DONE]\n\n".
std::string SseData(const nlohmann::json& j);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// Whether `s` is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool IsValidUtf8(std::string_view s);

}  // namespace chorus::server
