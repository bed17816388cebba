// The Responses API's handlers (http_server.h): create (one answer, stored for
// previous_response_id unless store is false), get and delete. A stored response keeps the
// conversation's turns and the tokens its KV held; the answer's blocks stay in the prefix cache
// (AgentOptions::cache_answer), so the next turn prefills only what is new. A response is its
// tenant's: another tenant's id answers exactly as an unknown one (404).
#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <ctime>

#include "admission.h"  // HttpServer::Admission
#include "http_server.h"
#include "sse_writer.h"   // SseWriter
#include "tools.h"        // ToolsActive, ToolCallParser

namespace chorus::server {

using json = nlohmann::json;

void HttpServer::HandleCreateResponse(const Request& req, Response& res) {
  const Tenant* t = Authorized(req, res);
  if (!t) return;
  auto count = [&](int status) { metrics_.CountRequest(req.path, status); };
  const ProtocolLimits limits{.max_tokens = engine_.context_size(), .n_vocab = engine_.vocab_size()};
  auto parsed = ParseResponsesRequest(req.body, limits);
  if (auto* e = std::get_if<ApiError>(&parsed)) return Reply(res, *e), count(e->status);
  ResponsesRequest& r = std::get<ResponsesRequest>(parsed);
  std::optional<StoredResponse> prev;
  if (!r.previous_response_id.empty()) {
    prev = responses_.Get(r.previous_response_id);
    if (prev && prev->tenant != t->name && !t->admin) prev.reset();  // another tenant's: as unknown
    if (!prev) {
      const bool evicted = responses_.WasEvicted(r.previous_response_id);
      Reply(res, {.status = 404,
                  .message = fmt::format("no stored response '{}'{}", r.previous_response_id,
                                         evicted ? ": it was evicted (the server keeps the newest 4096)"
                                                 : " (unknown, deleted, or created with store false)"),
                  .param = "previous_response_id",
                  .code = "response_not_found"});
      return count(404);
    }
    std::vector<ChatTurn> turns = prev->turns;  // the conversation so far, then this request's turns
    turns.insert(turns.end(), r.chat.messages.begin(), r.chat.messages.end());
    r.chat.messages = std::move(turns);
  }
  auto admitted = Admit(r.chat, Endpoint::kChat, *t, prev ? &*prev : nullptr);
  if (auto* e = std::get_if<ApiError>(&admitted)) return Reply(res, *e), count(e->status);
  Admission& a = std::get<Admission>(admitted);
  a.ch->options.cache_answer = r.store;
  a.ids.id = fmt::format("resp_{:016x}{}", static_cast<uint64_t>(std::time(nullptr)), next_id_++);
  if (!loop_.Enqueue(a.ch)) {
    res.set_header("Retry-After", fmt::format("{}", std::max(1, int(options_.retry_after_s + 0.5))));
    Reply(res, {.status = 503,
                .message = shutting_down_ ? "the server is shutting down" : "the queue is full: try again later",
                .type = "server_error",
                .code = "queue_full"});
    return count(503);
  }
  // The finished answer → the response object; stored (for previous_response_id) unless store is false.
  auto finish = [this, r, ids = a.ids, n_prompt = a.n_prompt, prompt_text = a.prompt_text, prompt = a.ch->prompt,
                 tenant = t->name](const std::string& text, const std::vector<int32_t>& tokens, const ChannelUpdate& u,
                                   const char* reason, ResponseEvents* events) {
    ToolCallParser calls;
    if (ToolsActive(r.chat)) calls.Feed(text, /*done=*/true);
    const std::string content = ToolsActive(r.chat) ? calls.content() : text;
    const Usage usage{
        .prompt_tokens = n_prompt, .completion_tokens = u.completion_tokens, .cached_tokens = u.cached_tokens};
    json object = ResponseObject(ids.id, ids.created, options_.model_id, r, content, calls.calls(), reason, usage);
    std::vector<json> closing;
    if (events) closing = events->Finish(object), object = closing.back()["response"];  // the streamed items' ids
    if (r.store) {
      StoredResponse s{
          .object = object, .turns = r.chat.messages, .text = prompt_text + text, .tokens = prompt, .tenant = tenant};
      s.turns.push_back({.role = "assistant", .content = content, .tool_calls = calls.calls()});
      s.tokens.insert(s.tokens.end(), tokens.begin(), tokens.end());
      responses_.Put(ids.id, std::move(s));
    }
    return events ? json(closing) : object;
  };
  if (r.stream) {
    struct Stream {
      std::shared_ptr<Channel> ch;
      ResponseEvents events;
      std::string text;
      std::vector<int32_t> tokens;
      bool started = false;
    };
    const json created = ResponseObject(a.ids.id, a.ids.created, options_.model_id, r, "", {}, "", {});
    auto st = std::make_shared<Stream>(Stream{.ch = a.ch, .events = ResponseEvents(ToolsActive(r.chat), created)});
    res.set_header("Cache-Control", "no-cache");
    count(200);
    res.set_chunked_content_provider("text/event-stream", [st, finish](size_t, httplib::DataSink& sink) {
      Channel& c = *st->ch;
      SseWriter sse([&](std::string_view bytes) {
        if (sink.write(bytes.data(), bytes.size())) return true;
        c.cancel = true;  // the client went away
        return false;
      });
      auto send = [&](const std::vector<json>& events) {
        for (const json& e : events)
          if (!sse.Event(e)) return false;
        return true;
      };
      if (!st->started && !(st->started = true, send(st->events.Start()))) return false;
      ChannelUpdate u;
      if (!c.TakeFor(&u, std::chrono::seconds(5))) return sse.KeepAlive();
      st->text += u.delta;
      st->tokens.insert(st->tokens.end(), u.tokens.begin(), u.tokens.end());
      if (!send(st->events.Feed(st->text, u.done))) return false;
      if (!u.done) return true;
      const char* reason = OpenAiFinishReason(u.stop, false);
      if (!reason) {
        sse.Event({{"type", "error"},
                   {"code", u.error_status == 429 ? "kv_quota_exceeded" : "server_error"},
                   {"message", u.error},
                   {"param", nullptr}});
      } else {
        const json closing = finish(st->text, st->tokens, u, reason, &st->events);
        if (!send(closing.get<std::vector<json>>())) return false;
      }
      sink.done();
      return true;
    });
    return;
  }
  std::string text;
  std::vector<int32_t> tokens;
  ChannelUpdate u;
  do {
    a.ch->Take(&u);
    text += u.delta;
    tokens.insert(tokens.end(), u.tokens.begin(), u.tokens.end());
  } while (!u.done);
  const char* reason = OpenAiFinishReason(u.stop, false);
  if (!reason) return ReplyFailed(res, u), count(u.error_status);
  ReplyJson(res, finish(text, tokens, u, reason, nullptr));
  count(200);
}

void HttpServer::HandleGetResponse(const Request& req, Response& res) {
  const Tenant* t = Authorized(req, res);
  if (!t) return;
  const std::string id = req.matches[1];
  if (auto s = responses_.Get(id); s && (s->tenant == t->name || t->admin)) return ReplyJson(res, s->object);
  Reply(res,
        {.status = 404, .message = fmt::format("no stored response '{}'", id), .param = "id", .code = "not_found"});
}

void HttpServer::HandleDeleteResponse(const Request& req, Response& res) {
  const Tenant* t = Authorized(req, res);
  if (!t) return;
  const std::string id = req.matches[1];
  auto s = responses_.Get(id);
  if (s && (s->tenant == t->name || t->admin) && responses_.Delete(id))
    return ReplyJson(res, {{"id", id}, {"object", "response"}, {"deleted", true}});
  Reply(res,
        {.status = 404, .message = fmt::format("no stored response '{}'", id), .param = "id", .code = "not_found"});
}

}  // namespace chorus::server
