// HttpServer's handlers, one per route (see http_server.h): the dashboard's state, models,
// contexts, and generation — parse → admit (tokens, checks) → enqueue → one JSON answer or SSE.
#include "http_server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <limits>
#include <random>
#include <set>

#include "admission.h"    // HttpServer::Admission
#include "dashboard.h"    // StateJson, StateFor
#include "sse_writer.h"   // SseWriter
#include "text_stream.h"  // TextStream
#include "tools.h"        // RenderTurns, ConstraintFor, ToolCallParser

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

// The embedding model's id: its name without the directory ("all-MiniLM-L6-v2").
std::string EmbedderId(const Embedder& e) {
  const std::string n = e.name();
  return n.substr(0, n.find(" ("));
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
  json data = json::array({{{"id", options_.model_id},
                            {"object", "model"},
                            {"created", UnixNow()},
                            {"owned_by", "chorus"},
                            {"context_length", engine_.context_size()},
                            {"kv", json::parse(engine_.KvSettings())}}});
  if (embedder_)
    data.push_back({{"id", EmbedderId(*embedder_)},
                    {"object", "model"},
                    {"created", UnixNow()},
                    {"owned_by", "chorus"},
                    {"dimensions", embedder_->dim()},
                    {"context_length", embedder_->max_tokens()}});
  ReplyJson(res, {{"object", "list"}, {"data", data}});
}

// POST /v1/embeddings: {"input": text or [texts], "encoding_format": "float" | "base64"}.
void HttpServer::HandleEmbeddings(const Request& req, Response& res) {
  if (!Authorized(req, res)) return;
  auto bad = [&](int status, const std::string& param, const std::string& msg,
                 const std::string& code = "invalid_value") {
    Reply(res, {.status = status, .message = msg, .param = param, .code = code});
    metrics_.CountRequest(req.path, status);
  };
  if (!embedder_)
    return bad(404, "",
               "no embedding model is loaded: start chorus serve with --embedding-model DIR "
               "(scripts/fetch_encoder.sh installs all-MiniLM-L6-v2)",
               "model_not_found");
  const json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object())
    return bad(400, "", "the request body must be a JSON object", "invalid_json");
  std::vector<std::string> texts;
  const auto in = body.find("input");
  if (in == body.end() || in->is_null()) return bad(400, "input", "'input' is required", "missing_field");
  if (in->is_string())
    texts.push_back(in->get<std::string>());
  else if (in->is_array() && !in->empty() &&
           std::all_of(in->begin(), in->end(), [](const json& x) { return x.is_string(); }))
    for (const json& x : *in) texts.push_back(x.get<std::string>());
  else
    return bad(400, "input",
               "'input' must be a string or a non-empty array of strings (token ids are not accepted: "
               "the embedding model has its own tokenizer)",
               "invalid_type");
  if (texts.size() > 2048) return bad(400, "input", fmt::format("at most 2048 inputs, got {}", texts.size()));
  for (size_t i = 0; i < texts.size(); ++i)
    if (texts[i].empty() || !IsValidUtf8(texts[i]))
      return bad(400, fmt::format("input[{}]", i), "every input must be a non-empty UTF-8 string");
  const json* ef = Field(body, "encoding_format");  // json::value would throw on a non-string
  const std::string format = !ef ? "float" : ef->is_string() ? ef->get<std::string>() : ef->dump();
  if (format != "float" && format != "base64")
    return bad(400, "encoding_format", "'encoding_format' must be float or base64, got '" + format + "'");
  if (const auto d = body.find("dimensions"); d != body.end() && !d->is_null() && *d != embedder_->dim())
    return bad(400, "dimensions", fmt::format("this model gives {} dimensions only", embedder_->dim()));
  Result<Embedder::Batch> batch = Status::Error("not run");
  {
    std::lock_guard lock(embedder_mu_);
    batch = embedder_->Embed(texts);
  }
  if (!batch.ok()) return bad(500, "", batch.status().message(), "embedding_failed");
  json data = json::array();
  for (size_t i = 0; i < batch->vectors.size(); ++i) {
    const std::vector<float>& v = batch->vectors[i];
    json e = {{"object", "embedding"}, {"index", i}};
    if (format == "float") {
      e["embedding"] = v;
    } else {  // little-endian float32 bytes, base64 (as OpenAI sends them)
      static constexpr char k64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
      const auto* b = reinterpret_cast<const unsigned char*>(v.data());
      const size_t n = v.size() * sizeof(float);
      std::string out;
      for (size_t k = 0; k < n; k += 3) {
        const uint32_t x = b[k] << 16 | (k + 1 < n ? b[k + 1] << 8 : 0) | (k + 2 < n ? b[k + 2] : 0);
        out += k64[x >> 18 & 63];
        out += k64[x >> 12 & 63];
        out += k + 1 < n ? k64[x >> 6 & 63] : '=';
        out += k + 2 < n ? k64[x & 63] : '=';
      }
      e["embedding"] = out;
    }
    data.push_back(std::move(e));
  }
  ReplyJson(res, {{"object", "list"},
                  {"data", data},
                  {"model", EmbedderId(*embedder_)},
                  {"usage", {{"prompt_tokens", batch->tokens}, {"total_tokens", batch->tokens}}}});
  metrics_.CountRequest(req.path, 200);
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

void HttpServer::HandleGenerate(const Request& req, Response& res, Endpoint ep) {
  const Tenant* t = Authorized(req, res);
  if (!t) return;
  auto count = [&](int status) { metrics_.CountRequest(req.path, status); };
  const ProtocolLimits limits{.max_tokens = engine_.context_size(), .n_vocab = engine_.vocab_size()};
  ParsedRequest parsed =
      ep == Endpoint::kChat ? ParseChatCompletion(req.body, limits) : ParseCompletion(req.body, limits);
  if (auto* e = std::get_if<ApiError>(&parsed)) return Reply(res, *e), count(e->status);
  const GenerationRequest& g = std::get<GenerationRequest>(parsed);
  auto admitted = Admit(g, ep, *t);
  if (auto* e = std::get_if<ApiError>(&admitted)) return Reply(res, *e), count(e->status);
  const Admission& a = std::get<Admission>(admitted);
  if (a.prompt_only) return ReplyWhole(req, res, g, a);  // max_tokens 0: the echoed prompt, nothing to run
  bool queued = loop_.Enqueue(a.ch);
  for (size_t i = 0; queued && i < a.more.size(); ++i) queued = loop_.Enqueue(a.more[i]);
  if (!queued) {
    a.ch->cancel = true;  // the choices already queued end at their next step
    for (const auto& c : a.more) c->cancel = true;
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
                                                                const Tenant& tenant, const StoredResponse* prev) {
  const size_t n_ctx = engine_.context_size();
  const char* prompt_param = ep == Endpoint::kChat ? "messages" : "prompt";
  Admission a{.ch = std::make_shared<Channel>()};
  Channel& ch = *a.ch;
  if (ep == Endpoint::kChat) {
    std::vector<std::string> contents;
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
      contents.push_back(std::move(content));
    }
    std::vector<Engine::ChatTurn> turns;
    for (auto& [role, content] : RenderTurns(g, contents)) turns.push_back({role, std::move(content)});
    auto text = engine_.RenderChat(turns);
    if (!text.ok()) return ApiError{.message = text.status().message(), .param = "messages"};
    a.prompt_text = *text;
    if (prev && !prev->tokens.empty() && text->starts_with(prev->text)) {  // the stored KV's tokens, then the rest
      ch.prompt = prev->tokens;
      const auto rest = engine_.Tokenize(std::string_view(*text).substr(prev->text.size()), false, true);
      ch.prompt.insert(ch.prompt.end(), rest.begin(), rest.end());
    } else {
      ch.prompt = engine_.Tokenize(*text, /*add_special=*/true, /*parse_special=*/true);
    }
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
  a.prompt_only = max_tokens == 0;  // the parser allows it with echo only
  if (g.echo) {
    if (g.prompt_tokens.empty()) {
      a.echo = g.prompt;
      a.echo_unshown = engine_.Tokenize("", /*add_special=*/true, false).size();  // a BOS, or nothing
    } else {
      for (int32_t t : g.prompt_tokens) a.echo += engine_.TokenPiece(t);
    }
    if (g.top_logprobs >= 0) {
      // The prompt's log-probabilities, scored on the loop thread between steps (the engine is
      // single-threaded); the first token has none.
      a.prompt_logprobs.push_back({.token = ch.prompt[0], .logprob = std::numeric_limits<float>::quiet_NaN()});
      if (n_prompt >= 2) {
        Result<Engine::ScoreResult> scored = Status::Error("the server is shutting down");
        loop_.RunOnLoop([&](Engine& e) { scored = e.Score(0, ch.prompt, g.top_logprobs); });
        if (!scored.ok())
          return ApiError{
              .status = 503,
              .message = "scoring the prompt for 'echo' with 'logprobs' failed: " + scored.status().message(),
              .type = "server_error",
              .code = "prompt_scoring_failed"};
        for (TokenLogprob& lp : scored->logprobs) a.prompt_logprobs.push_back(std::move(lp));
      }
    }
  }
  const OutputConstraint constraint = ConstraintFor(g);
  if (Status s = engine_.CheckConstraint(constraint); !s.ok())
    return ApiError{
        .message = s.message(), .param = ToolsActive(g) ? "tools" : "response_format", .code = "unsupported_schema"};
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
                            .constraint = constraint,
                            .logit_bias = g.logit_bias,
                            .presence_penalty = g.presence_penalty,
                            .frequency_penalty = g.frequency_penalty,
                            .top_logprobs = g.top_logprobs,
                            .scope = RequestScope(tenant, g.cache_salt),
                            .kv_quota_bytes = tenant.kv_quota};
  if (g.stream) ch.doorbell = std::make_shared<Doorbell>();  // ReplyStream waits on every choice at once
  for (int i = 1; i < g.n; ++i) {  // the prefix cache shares the prompt's blocks between them
    auto c = std::make_shared<Channel>();
    c->prompt = ch.prompt;
    c->options = ch.options;
    c->doorbell = ch.doorbell;
    c->options.seed = ch.options.seed + static_cast<uint64_t>(i);
    a.more.push_back(std::move(c));
  }
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

// A request the engine ended with an error: its status (429 over a quota, with Retry-After).
void HttpServer::ReplyFailed(Response& res, const ChannelUpdate& u) const {
  if (u.error_status == 429)
    res.set_header("Retry-After", fmt::format("{}", std::max(1, int(options_.retry_after_s + 0.5))));
  Reply(res, {.status = u.error_status,
              .message = u.error,
              .type = u.error_status >= 500 ? "server_error" : "invalid_request_error",
              .code = u.error_status == 429 ? "kv_quota_exceeded" : ""});
}

// Waits for the end of every choice, or for a stop string (then the engine is told to stop); one
// JSON answer with a choice per channel.
void HttpServer::ReplyWhole(const Request& req, Response& res, const GenerationRequest& g, const Admission& a) {
  const bool chat = g.endpoint == Endpoint::kChat;
  std::vector<Channel*> chs{a.ch.get()};
  for (const auto& c : a.more) chs.push_back(c.get());
  json choices = json::array();
  Usage usage{.prompt_tokens = a.n_prompt};
  const auto piece = [this](int32_t t) { return engine_.TokenPiece(t); };
  const std::string& echo = a.echo;  // completions with echo: the prompt's text first
  for (size_t i = 0; i < chs.size(); ++i) {
    Channel& ch = *chs[i];
    TextStream ts(g.stop);
    std::string text;  // the deltas appended: the whole answer so far
    std::vector<TokenLogprob> lps;
    ChannelUpdate u;
    if (a.prompt_only) u = {.done = true, .stop = StopReason::kMaxTokens};  // nothing was enqueued
    for (; !a.prompt_only;) {
      ch.Take(&u);
      text += u.delta;
      lps.insert(lps.end(), std::make_move_iterator(u.logprobs.begin()), std::make_move_iterator(u.logprobs.end()));
      ts.Feed(text, u.done);
      if (ts.stopped() || u.done) break;
    }
    const char* finish = OpenAiFinishReason(u.stop, ts.stopped());
    if (!finish) {
      for (Channel* c : chs) c->cancel = true;
      ReplyFailed(res, u);
      return metrics_.CountRequest(req.path, u.error_status);
    }
    if (ts.stopped()) ch.cancel = true;
    usage.completion_tokens += u.completion_tokens;
    if (i == 0) usage.cached_tokens = u.cached_tokens, usage.reused_tokens = u.reused_tokens;
    // Logprobs of the tokens whose text starts inside what the client sees (a stop string cuts).
    for (size_t k = 0, at = 0; k < lps.size(); at += piece(lps[k].token).size(), ++k)
      if (at >= ts.emitted().size() && ts.stopped()) {
        lps.resize(k);
        break;
      }
    json one;
    if (chat && ToolsActive(g)) {
      ToolCallParser calls;
      calls.Feed(ts.emitted(), /*done=*/true);
      const bool called = !calls.calls().empty() && std::string_view(finish) == "stop";
      one = ChatResponse(a.ids, calls.content(), calls.calls(), called ? "tool_calls" : finish, usage);
    } else {
      one = chat ? ChatResponse(a.ids, ts.emitted(), finish, usage)
                 : CompletionResponse(a.ids, echo + ts.emitted(), finish, usage);
    }
    json& c = one["choices"][0];
    c["index"] = i;
    if (g.top_logprobs >= 0)
      c["logprobs"] = g.echo ? EchoLogprobsJson(a.prompt_logprobs, a.echo_unshown, echo.size(), lps, piece)
                             : LogprobsJson(g.endpoint, lps, piece);
    choices.push_back(std::move(c));
    if (i + 1 == chs.size()) {
      one["choices"] = std::move(choices);
      one["usage"] = UsageJson(usage);
      ReplyJson(res, one);
    }
  }
  metrics_.CountRequest(req.path, 200);
}

// Server-sent events: one provider call per round of news from any choice (or a keep-alive
// comment every few seconds, which also finds clients that went away). The provider runs on this
// request's HTTP thread. With n > 1 the choices' chunks interleave as their tokens come, each with
// its index and its own finish_reason; the usage chunk, last, counts every choice once.
void HttpServer::ReplyStream(Response& res, const GenerationRequest& g, const Admission& a) {
  struct Choice {
    std::shared_ptr<Channel> ch;
    TextStream ts;
    std::string text;  // the deltas appended
    ToolCallParser calls;
    std::vector<TokenLogprob> lps;  // received, not yet sent (they ride on the next text chunk)
    size_t offset = 0;              // completions: bytes of text sent (text_offset)
    bool done = false;
    size_t completion_tokens = 0;
  };
  struct Stream {
    std::vector<Choice> choices;
    std::shared_ptr<Doorbell> bell;  // rung by every choice's channel (Admit set it)
    uint64_t rung = 0;
    ResponseIds ids;
    bool chat;
    bool include_usage;
    bool tools = false;  // the answers are parsed for tool calls
    int top_logprobs = -1;
    bool started = false;
    json first;  // completions with echo: each choice's first chunk, the prompt's text
    Usage usage;
  };
  auto st = std::make_shared<Stream>(Stream{.bell = a.ch->doorbell,
                                            .ids = a.ids,
                                            .chat = g.endpoint == Endpoint::kChat,
                                            .include_usage = g.include_usage,
                                            .tools = g.endpoint == Endpoint::kChat && ToolsActive(g),
                                            .top_logprobs = g.top_logprobs,
                                            .usage = {.prompt_tokens = a.n_prompt}});
  st->choices.push_back({.ch = a.ch, .ts = TextStream(g.stop), .offset = a.echo.size()});
  for (const auto& c : a.more) st->choices.push_back({.ch = c, .ts = TextStream(g.stop), .offset = a.echo.size()});
  if (g.echo) {
    st->first = CompletionChunk(a.ids, a.echo, "");
    if (g.top_logprobs >= 0)
      st->first["choices"][0]["logprobs"] = LogprobsJson(
          Endpoint::kCompletion, a.prompt_logprobs, [this](int32_t t) { return engine_.TokenPiece(t); }, 0,
          a.echo_unshown);
  }
  res.set_header("Cache-Control", "no-cache");
  const Engine* engine = &engine_;
  res.set_chunked_content_provider("text/event-stream", [st, engine](size_t, httplib::DataSink& sink) {
    auto cancel_all = [&] {
      for (Choice& c : st->choices) c.ch->cancel = true;
    };
    SseWriter sse([&](std::string_view bytes) {
      if (sink.write(bytes.data(), bytes.size())) return true;
      cancel_all();  // the client went away: the engine drops the requests at its next step
      return false;
    });
    // One chunk of choice i (OpenAI's builders write index 0).
    auto send = [&](size_t i, json j) {
      j["choices"][0]["index"] = i;
      return sse.Data(j);
    };
    if (!st->started) {
      st->started = true;
      for (size_t i = 0; i < st->choices.size(); ++i) {
        if (st->chat && !send(i, ChatChunk(st->ids, "", true, ""))) return false;
        if (!st->first.is_null() && !send(i, st->first)) return false;
      }
    }
    // Every choice's news since the last call; wait for a ring when there is none.
    std::vector<std::pair<size_t, ChannelUpdate>> news;
    auto collect = [&] {
      for (size_t i = 0; i < st->choices.size(); ++i)
        if (ChannelUpdate u; !st->choices[i].done && st->choices[i].ch->TakeFor(&u, std::chrono::milliseconds(0)))
          news.emplace_back(i, std::move(u));
    };
    collect();
    if (news.empty() && st->bell->WaitFor(&st->rung, std::chrono::seconds(5))) collect();
    if (news.empty()) return sse.KeepAlive();
    for (auto& [i, u] : news) {
      Choice& c = st->choices[i];
      c.text += u.delta;
      c.lps.insert(c.lps.end(), std::make_move_iterator(u.logprobs.begin()), std::make_move_iterator(u.logprobs.end()));
      const TextStream::Delta d = c.ts.Feed(c.text, u.done);
      // A text chunk carries the logprobs received so far (the tokens behind it, or about to be).
      auto text_chunk = [&](const std::string& text) {
        json j = st->chat ? ChatChunk(st->ids, text, false, "") : CompletionChunk(st->ids, text, "");
        if (st->top_logprobs >= 0 && !c.lps.empty()) {
          j["choices"][0]["logprobs"] = LogprobsJson(
              st->chat ? Endpoint::kChat : Endpoint::kCompletion, c.lps,
              [engine](int32_t t) { return engine->TokenPiece(t); }, c.offset);
          c.lps.clear();
        }
        c.offset += text.size();
        return j;
      };
      if (st->tools) {
        for (const ToolCallParser::Event& e : c.calls.Feed(c.ts.emitted(), u.done || d.stopped)) {
          using K = ToolCallParser::Event::Kind;
          const bool ok = e.kind == K::kText        ? send(i, text_chunk(e.text))
                          : e.kind == K::kCallStart ? send(i, ToolCallChunk(st->ids, e.index, e.id, e.name, ""))
                                                    : send(i, ToolCallChunk(st->ids, e.index, "", "", e.text));
          if (!ok) return false;
        }
      } else if (!d.text.empty() && !send(i, text_chunk(d.text))) {
        return false;
      }
      if (!u.done && !d.stopped) continue;
      c.done = true;
      if (d.stopped) c.ch->cancel = true;
      const char* finish = OpenAiFinishReason(u.stop, d.stopped);
      if (!finish) {  // one choice failed: the answer is that error
        cancel_all();
        sse.Error({.status = u.error_status,
                   .message = u.error,
                   .type = u.error_status >= 500 ? "server_error" : "invalid_request_error",
                   .code = u.error_status == 429 ? "kv_quota_exceeded" : ""});
        sink.done();
        return true;
      }
      if (st->tools && !c.calls.calls().empty() && std::string_view(finish) == "stop") finish = "tool_calls";
      if (st->top_logprobs >= 0 && !c.lps.empty() && !d.stopped && !send(i, text_chunk(""))) return false;
      if (!send(i, st->chat ? ChatChunk(st->ids, "", false, finish) : CompletionChunk(st->ids, "", finish)))
        return false;
      st->usage.completion_tokens += u.completion_tokens;
      if (i == 0) st->usage.cached_tokens = u.cached_tokens, st->usage.reused_tokens = u.reused_tokens;
    }
    if (!std::all_of(st->choices.begin(), st->choices.end(), [](const Choice& c) { return c.done; })) return true;
    if (st->include_usage &&
        !sse.Data(UsageChunk(st->ids, st->chat ? Endpoint::kChat : Endpoint::kCompletion, st->usage)))
      return false;
    sse.Done();
    sink.done();
    return true;
  });
}

}  // namespace chorus::server
