// HttpServer's handlers, one per route (see http_server.h): the dashboard's state, models,
// contexts, and generation — parse → admit (tokens, checks) → enqueue → one JSON answer or SSE.
#include "http_server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <random>
#include <set>

#include "dashboard.h"    // StateJson, StateFor
#include "sse_writer.h"   // SseWriter
#include "text_stream.h"  // TextStream

namespace chorus::server {
namespace {

using json = nlohmann::json;

int64_t UnixNow() { return static_cast<int64_t>(std::time(nullptr)); }

// The first `max` bytes of `text`, cut at a UTF-8 character boundary, "…" when cut.
std::string Preview(const std::string& text, size_t max = 160) {
  if (text.size() <= max) return text;
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  return text.substr(0, n) + "\u2026";
}

json ContextJson(ContextId id, size_t tokens, size_t bytes, const std::string& fingerprint, bool is_public) {
  return json{{"id", fmt::format("ctx-{}", id)},
              {"object", "context"},
              {"tokens", tokens},
              {"bytes", bytes},
              {"scope", is_public ? "public" : "private"},
              {"formats", "pinned prompt blocks in the shared formats (" + fingerprint + ")"}};
}

ApiError NoContext(const std::string& name) {
  return {.status = 404, .message = fmt::format("no context '{}'", name), .param = "id", .code = "not_found"};
}

// The request's sharing scope: its tenant's, with vLLM's cache_salt folded in (length-prefixed,
// so no tenant name and salt can spell another pair).
std::string RequestScope(const Tenant& t, const std::string& cache_salt) {
  if (cache_salt.empty()) return t.scope;
  return fmt::format("{}|cache_salt:{}:{}", t.scope, cache_salt.size(), cache_salt);
}

}  // namespace

// ---- the dashboard (docs/SERVING.md "The dashboard") ----

void HttpServer::HandleState(const Request& req, Response& res) {
  const Tenant* t = Authorized(req, res);
  if (!t) return;
  std::lock_guard lock(state_mu_);
  const auto now = std::chrono::steady_clock::now();
  if (state_json_.is_null() || now - state_at_ >= std::chrono::milliseconds(900)) {
    EngineSnapshot snap;
    std::map<AgentId, RequestInfo> infos;
    if (shutting_down_ || !loop_.TakeState(&snap, &infos))
      return Reply(res, {.status = 503, .message = "the server is shutting down", .type = "server_error"});
    const StateInfo info{
        .model_id = options_.model_id,
        .fingerprint = engine_.fingerprint(),
        .uptime_s = loop_.Seconds(),
        .sampled_at_unix = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(),
        .max_running = options_.max_running};
    state_json_ = StateJson(snap, infos, loop_.series().Json(loop_.Seconds()), info);
    state_at_ = now;
  }
  std::set<std::string> visible;  // the contexts this tenant may see
  if (!t->admin) {
    std::lock_guard clock(contexts_mu_);
    for (const auto& [id, c] : contexts_)
      if (Visible(*t, c)) visible.insert(fmt::format("ctx-{}", id));
  }
  res.set_header("Cache-Control", "no-store");
  res.set_content((t->admin ? state_json_ : StateFor(state_json_, t->name, visible))
                      .dump(-1, ' ', false, json::error_handler_t::replace),
                  "application/json");
}

void HttpServer::HandleModels(const Request& req, Response& res) {
  if (!Authorized(req, res)) return;
  ReplyJson(res, {{"object", "list"},
                  {"data", json::array({{{"id", options_.model_id},
                                         {"object", "model"},
                                         {"created", UnixNow()},
                                         {"owned_by", "chorus"},
                                         {"context_length", engine_.context_size()}}})}});
}

// ---- contexts (chorus extension): pinned documents ----

ContextId HttpServer::FindContext(const Tenant& t, const std::string& name) {
  ContextId id = 0;
  if (name.rfind("ctx-", 0) == 0 && name.size() > 4 && name.size() < 24 &&
      name.find_first_not_of("0123456789", 4) == std::string::npos)
    id = std::strtoull(name.c_str() + 4, nullptr, 10);
  auto it = contexts_.find(id);
  return it != contexts_.end() && Visible(t, it->second) ? id : 0;
}

void HttpServer::HandleCreateContext(const Request& req, Response& res) {
  const Tenant* t = Authorized(req, res);
  if (!t) return;
  auto parsed = ParseContextRequest(req.body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return Reply(res, *e), metrics_.CountRequest(req.path, e->status);
  const ContextRequest& cr = std::get<ContextRequest>(parsed);
  const std::string& text = cr.text;
  const ShareOptions so{.scope = cr.is_public ? std::string(kPublicScope) : t->scope};
  Result<ContextId> id = Status::Error("the server is shutting down");
  size_t tokens = 0, bytes = 0;
  loop_.RunOnLoop([&](Engine& e) {
    id = e.Share(text, so);
    if (id.ok()) tokens = e.ContextTokens(*id), bytes = e.ContextBytes(*id);
  });
  if (!id.ok()) {
    Reply(res, {.status = 400, .message = id.status().message(), .param = "text"});
    metrics_.CountRequest(req.path, 400);
    return;
  }
  {
    std::lock_guard lock(contexts_mu_);
    ContextEntry& c = contexts_[*id];  // the same text in the same scope: the same context, one more reference
    c.text = text;
    c.is_public = cr.is_public;
    c.refs[t->name]++;
  }
  ReplyJson(res, ContextJson(*id, tokens, bytes, engine_.fingerprint(), cr.is_public));
  metrics_.CountRequest(req.path, 200);
}

void HttpServer::HandleListContexts(const Request& req, Response& res) {
  const Tenant* t = Authorized(req, res);
  if (!t) return;
  std::map<ContextId, bool> mine;  // visible id → public
  {
    std::lock_guard lock(contexts_mu_);
    for (const auto& [id, c] : contexts_)
      if (Visible(*t, c)) mine[id] = c.is_public;
  }
  json data = json::array();
  loop_.RunOnLoop([&](Engine& e) {
    for (ContextId id : e.Contexts())
      if (auto it = mine.find(id); it != mine.end())
        data.push_back(ContextJson(id, e.ContextTokens(id), e.ContextBytes(id), engine_.fingerprint(), it->second));
  });
  ReplyJson(res, {{"object", "list"}, {"data", data}});
}

void HttpServer::HandleGetContext(const Request& req, Response& res) {
  const Tenant* t = Authorized(req, res);
  if (!t) return;
  const std::string name = req.matches[1];
  ContextId id = 0;
  bool is_public = false;
  {
    std::lock_guard lock(contexts_mu_);
    if ((id = FindContext(*t, name))) is_public = contexts_[id].is_public;
  }
  size_t tokens = 0, bytes = 0;
  if (id != 0)
    loop_.RunOnLoop([&](Engine& e) {
      const auto ids = e.Contexts();
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) return void(id = 0);
      tokens = e.ContextTokens(id), bytes = e.ContextBytes(id);
    });
  if (id == 0) return Reply(res, NoContext(name));
  ReplyJson(res, ContextJson(id, tokens, bytes, engine_.fingerprint(), is_public));
}

// A tenant deletes its own references to a context (an admin every reference): the engine frees it
// when no reference and no running request is left. Another tenant's context is a 404 like an
// unknown one; a public context that is not its own a 403 (its id is no secret).
void HttpServer::HandleDeleteContext(const Request& req, Response& res) {
  const Tenant* t = Authorized(req, res);
  if (!t) return;
  const std::string name = req.matches[1];
  size_t refs = 0;
  ContextId id = 0;
  {
    std::lock_guard lock(contexts_mu_);
    if ((id = FindContext(*t, name))) {
      ContextEntry& c = contexts_[id];
      if (!t->admin && !c.refs.count(t->name))
        return Reply(res, {.status = 403,
                           .message = fmt::format("context '{}' is public but not yours: only the tenants that "
                                                  "created it (or admin) delete it",
                                                  name),
                           .param = "id",
                           .code = "permission_denied"});
      if (t->admin) {
        for (const auto& [who, n] : c.refs) refs += n;
        c.refs.clear();
      } else {
        refs = c.refs[t->name];
        c.refs.erase(t->name);
      }
      if (c.refs.empty()) contexts_.erase(id);
    }
  }
  if (id == 0) return Reply(res, NoContext(name));
  loop_.RunOnLoop([&](Engine& e) {
    for (size_t i = 0; i < refs; ++i) e.Release(id);
  });
  ReplyJson(res, {{"id", name}, {"object", "context"}, {"deleted", true}});
}

// ---- generation ----

struct HttpServer::Admission {
  std::shared_ptr<Channel> ch;  // prompt, options, ids set; not yet enqueued
  size_t n_prompt = 0;
  size_t need = 0;     // the KV bytes EstimateBytes projects
  EngineGauges gauge;  // when it was admitted (the 503 message quotes it)
  ResponseIds ids;
};

void HttpServer::HandleGenerate(const Request& req, Response& res, Endpoint ep) {
  const Tenant* t = Authorized(req, res);
  if (!t) return;
  auto count = [&](int status) { metrics_.CountRequest(req.path, status); };
  const ProtocolLimits limits{.max_tokens = engine_.context_size()};
  ParsedRequest parsed =
      ep == Endpoint::kChat ? ParseChatCompletion(req.body, limits) : ParseCompletion(req.body, limits);
  if (auto* e = std::get_if<ApiError>(&parsed)) return Reply(res, *e), count(e->status);
  const GenerationRequest& g = std::get<GenerationRequest>(parsed);
  auto admitted = Admit(g, ep, *t);
  if (auto* e = std::get_if<ApiError>(&admitted)) return Reply(res, *e), count(e->status);
  const Admission& a = std::get<Admission>(admitted);
  if (!loop_.Enqueue(a.ch)) {
    res.set_header("Retry-After", fmt::format("{}", std::max(1, int(options_.retry_after_s + 0.5))));
    Reply(res,
          {.status = 503,
           .message = shutting_down_ ? "the server is shutting down"
                                     : fmt::format("the queue is full ({} requests wait for KV space): this request "
                                                   "needs about {} bytes, {} of the {}-byte budget are free",
                                                   options_.max_queue, a.need, a.gauge.kv_free, a.gauge.kv_budget),
           .type = "server_error",
           .code = "queue_full"});
    return count(503);
  }
  if (!g.stream) return ReplyWhole(req, res, g, a);
  count(200);
  ReplyStream(res, g, a);
}

std::variant<HttpServer::Admission, ApiError> HttpServer::Admit(const GenerationRequest& g, Endpoint ep,
                                                                const Tenant& tenant) {
  const size_t n_ctx = engine_.context_size();
  const char* prompt_param = ep == Endpoint::kChat ? "messages" : "prompt";
  Admission a{.ch = std::make_shared<Channel>()};
  Channel& ch = *a.ch;
  if (ep == Endpoint::kChat) {
    std::vector<Engine::ChatTurn> turns;
    for (size_t i = 0; i < g.messages.size(); ++i) {
      const ChatTurn& t = g.messages[i];
      std::string content = t.content;
      for (size_t j = t.contexts.size(); j-- > 0;) {  // from the back: earlier offsets stay valid
        const ChatTurn::ContextRef& c = t.contexts[j];
        std::lock_guard lock(contexts_mu_);
        const ContextId cid = FindContext(tenant, c.id);  // another tenant's: as if there were none
        if (cid == 0)
          return ApiError{.message = fmt::format("no context '{}' (POST /v1/contexts makes one)", c.id),
                          .param = fmt::format("messages[{}].content", i),
                          .code = "context_not_found"};
        content.insert(c.at, contexts_[cid].text);
      }
      turns.push_back({t.role, std::move(content)});
    }
    auto text = engine_.RenderChat(turns);
    if (!text.ok()) return ApiError{.message = text.status().message(), .param = "messages"};
    ch.prompt = engine_.Tokenize(*text, /*add_special=*/true, /*parse_special=*/true);
  } else if (!g.prompt_tokens.empty()) {
    for (int32_t t : g.prompt_tokens)
      if (static_cast<size_t>(t) >= engine_.vocab_size())
        return ApiError{
            .message = fmt::format("prompt token id {} is outside the vocabulary [0, {})", t, engine_.vocab_size()),
            .param = "prompt"};
    ch.prompt = g.prompt_tokens;
  } else {
    ch.prompt = engine_.Tokenize(g.prompt, /*add_special=*/true, /*parse_special=*/false);
  }
  const size_t n_prompt = a.n_prompt = ch.prompt.size();
  if (n_prompt == 0) return ApiError{.message = "the prompt is empty", .param = prompt_param};
  if (n_prompt >= n_ctx)
    return ApiError{
        .message = fmt::format("the prompt has {} tokens but the context holds {} (prompt + answer)", n_prompt, n_ctx),
        .param = prompt_param,
        .code = "context_length_exceeded"};
  const size_t max_tokens =
      g.max_tokens ? size_t(*g.max_tokens) : std::min(options_.default_max_tokens, n_ctx - n_prompt);
  if (n_prompt + max_tokens > n_ctx)
    return ApiError{.message = fmt::format("the prompt ({} tokens) + max_tokens ({}) = {} exceed the context of {}",
                                           n_prompt, max_tokens, n_prompt + max_tokens, n_ctx),
                    .param = "max_tokens",
                    .code = "context_length_exceeded"};
  a.gauge = metrics_.gauges();
  a.need = engine_.EstimateBytes(n_prompt, max_tokens);
  if (a.gauge.kv_budget != 0 && a.need > a.gauge.kv_budget)
    return ApiError{.message = fmt::format("the request's KV needs about {} bytes ({} prompt + {} answer tokens), "
                                           "more than the whole {}-byte --kv-budget",
                                           a.need, n_prompt, max_tokens, a.gauge.kv_budget),
                    .param = "max_tokens",
                    .code = "kv_budget_exceeded"};
  std::random_device rd;
  ch.options = AgentOptions{.temperature = g.temperature,
                            .top_k = g.top_k,
                            .top_p = g.top_p,
                            .seed = g.seed ? *g.seed : (uint64_t(rd()) << 32 | rd()),
                            .max_tokens = static_cast<int>(max_tokens),
                            .ignore_eog = g.ignore_eos,
                            .reuse = g.reuse == "exact"      ? Reuse::kExact
                                     : g.reuse == "segments" ? Reuse::kSegments
                                                             : Reuse::kDefault,
                            .scope = RequestScope(tenant, g.cache_salt),
                            .kv_quota_bytes = tenant.kv_quota};
  const uint64_t serial = next_id_++;
  ch.request_id = fmt::format("{}-{}", ep == Endpoint::kChat ? "chatcmpl" : "cmpl", serial);
  ch.tenant = tenant.name;
  if (ep == Endpoint::kChat)
    ch.preview = Preview(g.messages.empty() ? "" : g.messages.back().content);
  else
    ch.preview = g.prompt_tokens.empty() ? Preview(g.prompt) : fmt::format("[{} token ids]", g.prompt_tokens.size());
  a.ids = {.id = ch.request_id,
           .created = UnixNow(),
           .model = options_.model_id,
           .fingerprint = "fp_" + engine_.fingerprint()};
  return a;
}

// Waits for the end, or for a stop string (then the engine is told to stop); one JSON answer.
void HttpServer::ReplyWhole(const Request& req, Response& res, const GenerationRequest& g, const Admission& a) {
  Channel& ch = *a.ch;
  TextStream ts(g.stop);
  std::string text;  // the deltas appended: the whole answer so far
  ChannelUpdate u;
  for (;;) {
    ch.Take(&u);
    text += u.delta;
    ts.Feed(text, u.done);
    if (ts.stopped() || u.done) break;
  }
  const char* finish = OpenAiFinishReason(u.stop, ts.stopped());
  if (!finish) {
    if (u.error_status == 429)
      res.set_header("Retry-After", fmt::format("{}", std::max(1, int(options_.retry_after_s + 0.5))));
    Reply(res, {.status = u.error_status,
                .message = u.error,
                .type = u.error_status >= 500 ? "server_error" : "invalid_request_error",
                .code = u.error_status == 429 ? "kv_quota_exceeded" : ""});
    return metrics_.CountRequest(req.path, u.error_status);
  }
  if (ts.stopped()) ch.cancel = true;
  const Usage usage{.prompt_tokens = a.n_prompt,
                    .completion_tokens = u.completion_tokens,
                    .cached_tokens = u.cached_tokens,
                    .reused_tokens = u.reused_tokens};
  const bool chat = g.endpoint == Endpoint::kChat;
  ReplyJson(res, chat ? ChatResponse(a.ids, ts.emitted(), finish, usage)
                      : CompletionResponse(a.ids, ts.emitted(), finish, usage));
  metrics_.CountRequest(req.path, 200);
}

// Server-sent events: one provider call per publish (or a keep-alive comment every few seconds,
// which also finds clients that went away). The provider runs on this request's HTTP thread.
void HttpServer::ReplyStream(Response& res, const GenerationRequest& g, const Admission& a) {
  struct Stream {
    std::shared_ptr<Channel> ch;
    TextStream ts;
    std::string text;  // the deltas appended
    ResponseIds ids;
    bool chat;
    bool include_usage;
    size_t n_prompt;
    bool started = false;
  };
  auto st = std::make_shared<Stream>(Stream{.ch = a.ch,
                                            .ts = TextStream(g.stop),
                                            .ids = a.ids,
                                            .chat = g.endpoint == Endpoint::kChat,
                                            .include_usage = g.include_usage,
                                            .n_prompt = a.n_prompt});
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider("text/event-stream", [st](size_t, httplib::DataSink& sink) {
    Channel& c = *st->ch;
    SseWriter sse([&](std::string_view bytes) {
      if (sink.write(bytes.data(), bytes.size())) return true;
      c.cancel = true;  // the client went away: the engine drops the request at its next step
      return false;
    });
    if (!st->started) {
      st->started = true;
      if (st->chat && !sse.Data(ChatChunk(st->ids, "", true, ""))) return false;
    }
    ChannelUpdate u;
    if (!c.TakeFor(&u, std::chrono::seconds(5))) return sse.KeepAlive();
    st->text += u.delta;
    const TextStream::Delta d = st->ts.Feed(st->text, u.done);
    if (!d.text.empty() &&
        !sse.Data(st->chat ? ChatChunk(st->ids, d.text, false, "") : CompletionChunk(st->ids, d.text, "")))
      return false;
    if (!u.done && !d.stopped) return true;
    if (d.stopped) c.cancel = true;
    const char* finish = OpenAiFinishReason(u.stop, d.stopped);
    if (!finish) {
      sse.Error({.status = u.error_status,
                 .message = u.error,
                 .type = u.error_status >= 500 ? "server_error" : "invalid_request_error",
                 .code = u.error_status == 429 ? "kv_quota_exceeded" : ""});
      sink.done();
      return true;
    }
    if (!sse.Data(st->chat ? ChatChunk(st->ids, "", false, finish) : CompletionChunk(st->ids, "", finish)))
      return false;
    const Usage usage{.prompt_tokens = st->n_prompt,
                      .completion_tokens = u.completion_tokens,
                      .cached_tokens = u.cached_tokens,
                      .reused_tokens = u.reused_tokens};
    if (st->include_usage && !sse.Data(UsageChunk(st->ids, st->chat ? Endpoint::kChat : Endpoint::kCompletion, usage)))
      return false;
    sse.Done();
    sink.done();
    return true;
  });
}

}  // namespace chorus::server
