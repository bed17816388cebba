// The Responses API (POST /v1/responses, GET / DELETE /v1/responses/{id}) as pure functions and a
// store: a body parsed into the chat request it stands for (input items → turns, instructions → a
// system turn, tools / tool_choice / text.format → their chat forms), the response object built
// from an answer, and ResponseStore, which keeps what a later `previous_response_id` continues.
// Invariants: an unknown or evicted id is never a fresh start (the caller answers 404); a stored
// response's tokens are exactly the KV its request held (prompt + answer), so a continuation whose
// rendered text extends the stored text reuses them token for token (AgentOptions::cache_answer
// keeps the answer's blocks in the prefix cache: routes_responses.cc).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "protocol.h"
#include "tools.h"  // ToolCallParser

namespace chorus::server {

struct ResponsesRequest {
  GenerationRequest chat;            // the turns after previous_response_id's, tools, sampling
  std::string previous_response_id;  // "" = none
  bool store = true;
  bool stream = false;  // server-sent events, as the Responses API names them
  std::string instructions;
  nlohmann::json echo;  // fields the response object repeats (tools, tool_choice, text, ...)
};

std::variant<ResponsesRequest, ApiError> ParseResponsesRequest(std::string_view body, const ProtocolLimits& limits);

// What a later turn continues: the conversation's turns (the answer's included) and the text and
// tokens of its prompt + answer as the engine held them.
struct StoredResponse {
  nlohmann::json object;        // what GET returns
  std::vector<ChatTurn> turns;  // every turn so far, the answer last
  std::string text;             // the rendered prompt + the answer's raw text
  std::vector<int32_t> tokens;  // the prompt's tokens + the answer's
  std::string tenant;           // whose it is: no other tenant (but admin) reads, continues or deletes it
};

// Bounded, least recently stored dropped first; thread-safe.
class ResponseStore {
 public:
  explicit ResponseStore(size_t capacity) : capacity_(capacity) {}
  void Put(const std::string& id, StoredResponse r);
  std::optional<StoredResponse> Get(const std::string& id) const;
  bool Delete(const std::string& id);
  // Whether `id` was stored once and dropped for room (a 404 that says "evicted").
  bool WasEvicted(const std::string& id) const;

 private:
  size_t capacity_;
  mutable std::mutex mu_;
  std::map<std::string, StoredResponse> by_id_;
  std::list<std::string> order_;         // oldest first
  std::map<std::string, bool> evicted_;  // ids dropped for room (bounded by 4 x capacity)
};

// The response object of a finished answer: a message item for its text (if any) and a
// function_call item per call; status "completed" or "incomplete" (max_output_tokens).
nlohmann::json ResponseObject(const std::string& id, int64_t created, const std::string& model,
                              const ResponsesRequest& r, const std::string& content, const std::vector<ToolCall>& calls,
                              const std::string& finish_reason, const Usage& usage);

// Streams one answer as the Responses API's events (response.created, output_item.added,
// output_text.delta, function_call_arguments.delta, ..., response.completed): Feed the visible
// text as it grows; each call returns the events it makes known, numbered in order.
class ResponseEvents {
 public:
  ResponseEvents(bool tools, nlohmann::json created) : tools_(tools), created_(std::move(created)) {}
  std::vector<nlohmann::json> Start();
  std::vector<nlohmann::json> Feed(std::string_view text, bool done);
  // The closing events, given the finished object (its output replaced by the streamed items).
  std::vector<nlohmann::json> Finish(nlohmann::json object);

 private:
  nlohmann::json Numbered(nlohmann::json e) {
    e["sequence_number"] = seq_++;
    return e;
  }
  void CloseItem(std::vector<nlohmann::json>& out);
  bool tools_;
  nlohmann::json created_;
  ToolCallParser calls_;
  size_t plain_sent_ = 0;                           // without tools: bytes of text sent
  nlohmann::json items_ = nlohmann::json::array();  // every item so far, the open one last
  bool open_ = false;                               // the last item still takes deltas
  size_t seq_ = 0;
};

}  // namespace chorus::server
