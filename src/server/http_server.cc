// HttpServer: routes, authentication, validation → tokens → EngineLoop, JSON and SSE answers.
#include "server/http_server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <chrono>
#include <ctime>
#include <random>

#include "server/dashboard.h"    // StateJson
#include "server/protocol.h"     // Parse*, *Json, SseData
#include "server/dashboard_assets.h"  // kEmbeddedFiles (generated from assets/)
#include "server/text_stream.h"  // TextStream

namespace chorus::server {
namespace {

using json = nlohmann::json;

void Reply(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  // Messages may quote the client's bytes (a parse error's "last read"): never throw on them.
  res.set_content(ErrorJson(e).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
}

void ReplyJson(httplib::Response& res, const json& j, int status = 200) {
  res.status = status;
  res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

int64_t UnixNow() { return static_cast<int64_t>(std::time(nullptr)); }

// The first `max` bytes of `text`, cut at a UTF-8 character boundary, "…" when cut.
std::string Preview(const std::string& text, size_t max = 160) {
  if (text.size() <= max) return text;
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  return text.substr(0, n) + "\u2026";
}

// What a finished (or stop-string-ended) request reports.
struct Outcome {
  std::string text, finish;
  Usage usage;
};

}  // namespace

HttpServer::HttpServer(Engine& engine, const HttpOptions& options)
    : engine_(engine), options_(options), loop_(engine, metrics_, options.max_queue),
      http_(std::make_unique<httplib::Server>()) {
  if (options_.model_id.empty()) options_.model_id = engine.model_name().empty() ? "chorus" : engine.model_name();
  const size_t threads = options_.http_threads > 0 ? size_t(options_.http_threads) : options_.max_queue + 144;
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_payload_max_length(options_.max_body_bytes);
  http_->set_keep_alive_max_count(100);
  Routes();
}

HttpServer::~HttpServer() { Shutdown(); }

Status HttpServer::Bind() {
  if (options_.port == 0) {
    port_ = http_->bind_to_any_port(options_.host);
    if (port_ <= 0) return Status::Error("cannot listen on {} (any port)", options_.host);
  } else {
    if (!http_->bind_to_port(options_.host, options_.port))
      return Status::Error("cannot listen on {}:{} (address in use, or not an address of this machine)", options_.host,
                           options_.port);
    port_ = options_.port;
  }
  loop_.Start();
  return Status::Ok();
}

void HttpServer::Serve() { http_->listen_after_bind(); }

void HttpServer::Shutdown(const std::string& reason) {
  if (shutting_down_.exchange(true)) return;
  loop_.Stop(reason);  // every stream gets its final error event; the providers end them
  // Give the HTTP threads a moment to write those events before the listener closes.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  http_->stop();
}

void HttpServer::Routes() {
  httplib::Server& s = *http_;
  // Auth for /v1/*: a Bearer key, compared in full.
  auto authorized = [this](const httplib::Request& req, httplib::Response& res) {
    if (options_.api_key.empty()) return true;
    const std::string h = req.get_header_value("Authorization");
    const std::string want = "Bearer " + options_.api_key;
    unsigned diff = h.size() != want.size();
    for (size_t i = 0; i < std::min(h.size(), want.size()); ++i) diff |= unsigned(h[i] ^ want[i]);
    if (diff == 0) return true;
    Reply(res, {.status = 401,
                .message = h.empty() ? "no API key provided: send \"Authorization: Bearer <key>\""
                                     : "incorrect API key provided",
                .code = "invalid_api_key"});
    metrics_.CountRequest(req.path, 401);
    return false;
  };

  s.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404)
      Reply(res, {.status = 404, .message = fmt::format("no route {} {}", req.method, req.path), .code = "not_found"});
    else if (res.status == 413)
      Reply(res, {.status = 413, .message = fmt::format("the request body is larger than the {}-byte limit",
                                                        options_.max_body_bytes),
                  .code = "body_too_large"});
    else
      Reply(res, {.status = res.status, .message = fmt::format("HTTP {}", res.status)});
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    Reply(res, {.status = 500, .message = what, .type = "server_error"});
  });

  s.Get("/health", [](const httplib::Request&, httplib::Response& res) { ReplyJson(res, {{"status", "ok"}}); });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.Render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  // ---- the dashboard (docs/ARCHITECTURE.md "Serving: the dashboard") ----
  s.Get("/v1/state", [this, authorized](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res)) return;
    std::lock_guard lock(state_mu_);
    const auto now = std::chrono::steady_clock::now();
    if (state_body_.empty() || now - state_at_ >= std::chrono::milliseconds(900)) {
      EngineSnapshot snap;
      std::map<AgentId, RequestInfo> infos;
      if (shutting_down_ || !loop_.TakeState(&snap, &infos))
        return Reply(res, {.status = 503, .message = "the server is shutting down", .type = "server_error"});
      const StateInfo info{.model_id = options_.model_id, .fingerprint = engine_.fingerprint(),
                           .uptime_s = loop_.Seconds(),
                           .sampled_at_unix = std::chrono::duration<double>(
                                                  std::chrono::system_clock::now().time_since_epoch()).count(),
                           .max_running = options_.max_running};
      state_body_ = StateJson(snap, infos, loop_.series().Json(loop_.Seconds()), info)
                        .dump(-1, ' ', false, json::error_handler_t::replace);
      state_at_ = now;
    }
    res.set_header("Cache-Control", "no-store");
    res.set_content(state_body_, "application/json");
  });
  for (const EmbeddedFile& f : kEmbeddedFiles) {
    const std::string path = f.path, mime = std::string(f.mime) + "; charset=utf-8";
    const std::string body(reinterpret_cast<const char*>(f.data), f.size);
    std::string pattern;  // cpp-httplib routes are regular expressions: match the path literally
    for (char c : path) pattern += c == '.' ? std::string("\\.") : std::string(1, c);
    s.Get(pattern, [mime, body](const httplib::Request&, httplib::Response& res) {
      // The page takes no user text from the server: everything it shows comes from /v1/state
      // and goes into the document as text (textContent). No script from anywhere else.
      res.set_header("Content-Security-Policy",
                     "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:");
      res.set_header("X-Content-Type-Options", "nosniff");
      res.set_header("Cache-Control", "no-cache");
      res.set_content(body, mime);
    });
  }

  s.Get("/v1/models", [this, authorized](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res)) return;
    ReplyJson(res, {{"object", "list"},
                    {"data", json::array({{{"id", options_.model_id},
                                           {"object", "model"},
                                           {"created", UnixNow()},
                                           {"owned_by", "chorus"},
                                           {"context_length", engine_.context_size()}}})}});
  });

  // ---- contexts (chorus extension): pinned documents ----
  auto context_json = [this](ContextId id, size_t tokens, size_t bytes) {
    return json{{"id", fmt::format("ctx-{}", id)}, {"object", "context"}, {"tokens", tokens}, {"bytes", bytes},
                {"formats", "pinned prompt blocks in the shared formats (" + engine_.fingerprint() + ")"}};
  };
  s.Post("/v1/contexts", [this, authorized, context_json](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res)) return;
    auto parsed = ParseContextRequest(req.body);
    if (auto* e = std::get_if<ApiError>(&parsed)) return Reply(res, *e), metrics_.CountRequest(req.path, e->status);
    const std::string& text = std::get<std::string>(parsed);
    Result<ContextId> id = Status::Error("the server is shutting down");
    size_t tokens = 0, bytes = 0;
    loop_.RunOnLoop([&](Engine& e) {
      id = e.Share(text);
      if (id.ok()) tokens = e.ContextTokens(*id), bytes = e.ContextBytes(*id);
    });
    if (!id.ok()) {
      Reply(res, {.status = 400, .message = id.status().message(), .param = "text"});
      metrics_.CountRequest(req.path, 400);
      return;
    }
    ReplyJson(res, context_json(*id, tokens, bytes));
    metrics_.CountRequest(req.path, 200);
  });
  s.Get("/v1/contexts", [this, authorized, context_json](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res)) return;
    json data = json::array();
    loop_.RunOnLoop([&](Engine& e) {
      for (ContextId id : e.Contexts()) data.push_back(context_json(id, e.ContextTokens(id), e.ContextBytes(id)));
    });
    ReplyJson(res, {{"object", "list"}, {"data", data}});
  });
  s.Delete(R"(/v1/contexts/([^/]+))", [this, authorized](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res)) return;
    const std::string name = req.matches[1];
    ContextId id = 0;
    if (name.rfind("ctx-", 0) == 0) id = std::strtoull(name.c_str() + 4, nullptr, 10);
    bool found = false;
    if (id != 0)
      loop_.RunOnLoop([&](Engine& e) {
        const auto ids = e.Contexts();
        found = std::find(ids.begin(), ids.end(), id) != ids.end();
        if (found) e.Release(id);
      });
    if (!found)
      return Reply(res, {.status = 404, .message = fmt::format("no context '{}'", name), .param = "id",
                         .code = "not_found"});
    ReplyJson(res, {{"id", name}, {"object", "context"}, {"deleted", true}});
  });

  // ---- generation ----
  auto generate = [this, authorized](const httplib::Request& req, httplib::Response& res, Endpoint ep) {
    if (!authorized(req, res)) return;
    auto count = [&](int status) { metrics_.CountRequest(req.path, status); };
    const size_t n_ctx = engine_.context_size();
    ProtocolLimits limits{.max_tokens = n_ctx};
    ParsedRequest parsed = ep == Endpoint::kChat ? ParseChatCompletion(req.body, limits) : ParseCompletion(req.body, limits);
    if (auto* e = std::get_if<ApiError>(&parsed)) return Reply(res, *e), count(e->status);
    GenerationRequest& g = std::get<GenerationRequest>(parsed);
    auto ch = std::make_shared<Channel>();
    if (ep == Endpoint::kChat) {
      std::vector<Engine::ChatTurn> turns;
      for (const ChatTurn& t : g.messages) turns.push_back({t.role, t.content});
      auto text = engine_.RenderChat(turns);
      if (!text.ok()) return Reply(res, {.message = text.status().message(), .param = "messages"}), count(400);
      ch->prompt = engine_.Tokenize(*text, /*add_special=*/true, /*parse_special=*/true);
    } else if (!g.prompt_tokens.empty()) {
      for (int32_t t : g.prompt_tokens)
        if (static_cast<size_t>(t) >= engine_.vocab_size())
          return Reply(res, {.message = fmt::format("prompt token id {} is outside the vocabulary [0, {})", t,
                                                    engine_.vocab_size()),
                             .param = "prompt"}),
                 count(400);
      ch->prompt = g.prompt_tokens;
    } else {
      ch->prompt = engine_.Tokenize(g.prompt, /*add_special=*/true, /*parse_special=*/false);
    }
    const size_t n_prompt = ch->prompt.size();
    if (n_prompt == 0) return Reply(res, {.message = "the prompt is empty", .param = ep == Endpoint::kChat ? "messages" : "prompt"}), count(400);
    if (n_prompt >= n_ctx)
      return Reply(res, {.message = fmt::format("the prompt has {} tokens but the context holds {} (prompt + answer)",
                                                n_prompt, n_ctx),
                         .param = ep == Endpoint::kChat ? "messages" : "prompt", .code = "context_length_exceeded"}),
             count(400);
    size_t max_tokens = g.max_tokens ? size_t(*g.max_tokens) : std::min(options_.default_max_tokens, n_ctx - n_prompt);
    if (n_prompt + max_tokens > n_ctx)
      return Reply(res, {.message = fmt::format("the prompt ({} tokens) + max_tokens ({}) = {} exceed the context of {}",
                                                n_prompt, max_tokens, n_prompt + max_tokens, n_ctx),
                         .param = "max_tokens", .code = "context_length_exceeded"}),
             count(400);
    const EngineGauges gauge = metrics_.gauges();
    const size_t need = engine_.EstimateBytes(n_prompt, max_tokens);
    if (gauge.kv_budget != 0 && need > gauge.kv_budget)
      return Reply(res, {.message = fmt::format("the request's KV needs about {} bytes ({} prompt + {} answer tokens), "
                                                "more than the whole {}-byte --kv-budget",
                                                need, n_prompt, max_tokens, gauge.kv_budget),
                         .param = "max_tokens", .code = "kv_budget_exceeded"}),
             count(400);
    std::random_device rd;
    ch->options = AgentOptions{.temperature = g.temperature, .top_k = g.top_k, .top_p = g.top_p,
                               .seed = g.seed ? *g.seed : (uint64_t(rd()) << 32 | rd()),
                               .max_tokens = static_cast<int>(max_tokens), .ignore_eog = g.ignore_eos};
    const uint64_t serial = next_id_++;
    ch->request_id = fmt::format("{}-{}", ep == Endpoint::kChat ? "chatcmpl" : "cmpl", serial);
    if (ep == Endpoint::kChat) ch->preview = Preview(g.messages.empty() ? "" : g.messages.back().content);
    else ch->preview = g.prompt_tokens.empty() ? Preview(g.prompt) : fmt::format("[{} token ids]", g.prompt_tokens.size());
    if (!loop_.Enqueue(ch)) {
      res.set_header("Retry-After", fmt::format("{}", std::max(1, int(options_.retry_after_s + 0.5))));
      Reply(res, {.status = 503,
                  .message = shutting_down_ ? "the server is shutting down"
                                            : fmt::format("the queue is full ({} requests wait for KV space): this request "
                                                          "needs about {} bytes, {} of the {}-byte budget are free",
                                                          options_.max_queue, need, gauge.kv_free, gauge.kv_budget),
                  .type = "server_error", .code = "queue_full"});
      return count(503);
    }
    ResponseIds ids{.id = ch->request_id,
                    .created = UnixNow(), .model = options_.model_id, .fingerprint = "fp_" + engine_.fingerprint()};
    if (!g.stream) {
      // Wait for the end, or for a stop string (then the engine is told to stop).
      TextStream ts(g.stop);
      Outcome out;
      std::unique_lock lock(ch->mu);
      for (;;) {
        ch->cv.wait(lock, [&] { return ch->version > 0; });
        ts.Feed(ch->text, ch->done);
        if (ts.stopped() || ch->done) break;
        const uint64_t v = ch->version;
        ch->cv.wait(lock, [&] { return ch->version != v; });
      }
      if (!ts.stopped() && ch->done && ch->finish == "error") {
        const int status = ch->error_status;
        const std::string err = ch->error;
        lock.unlock();
        Reply(res, {.status = status, .message = err, .type = status >= 500 ? "server_error" : "invalid_request_error"});
        return count(status);
      }
      if (ts.stopped()) ch->cancel = true;
      out.text = ts.emitted();
      out.finish = ts.stopped() || ch->finish == "stop" ? "stop" : "length";
      out.usage = {.prompt_tokens = n_prompt, .completion_tokens = ch->completion_tokens, .cached_tokens = ch->cached_tokens};
      lock.unlock();
      ReplyJson(res, ep == Endpoint::kChat ? ChatResponse(ids, out.text, out.finish, out.usage)
                                           : CompletionResponse(ids, out.text, out.finish, out.usage));
      return count(200);
    }
    // Streaming: one provider call per published step (or a keep-alive comment every few seconds,
    // which also finds clients that went away).
    struct Stream {
      std::shared_ptr<Channel> ch;
      TextStream ts;
      ResponseIds ids;
      Endpoint ep;
      bool include_usage;
      size_t n_prompt;
      bool started = false;
      uint64_t seen = 0;
    };
    auto st = std::make_shared<Stream>(Stream{ch, TextStream(g.stop), ids, ep, g.include_usage, n_prompt});
    count(200);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", [st](size_t, httplib::DataSink& sink) {
      Channel& c = *st->ch;
      auto write = [&](const std::string& s) {
        if (!sink.write(s.data(), s.size())) {
          c.cancel = true;  // the client went away: the engine drops the request at its next step
          return false;
        }
        return true;
      };
      if (!st->started) {
        st->started = true;
        if (st->ep == Endpoint::kChat && !write(SseData(ChatChunk(st->ids, "", true, "")))) return false;
      }
      std::unique_lock lock(c.mu);
      if (!c.cv.wait_for(lock, std::chrono::seconds(5), [&] { return c.version != st->seen; })) {
        lock.unlock();
        return write(": keep-alive\n\n");
      }
      st->seen = c.version;
      const std::string text = c.text;
      const bool done = c.done;
      const std::string finish = c.finish, error = c.error;
      const size_t completion = c.completion_tokens, cached = c.cached_tokens;
      lock.unlock();
      const TextStream::Delta d = st->ts.Feed(text, done);
      if (!d.text.empty()) {
        const json chunk = st->ep == Endpoint::kChat ? ChatChunk(st->ids, d.text, false, "")
                                                     : CompletionChunk(st->ids, d.text, "");
        if (!write(SseData(chunk))) return false;
      }
      if (!done && !d.stopped) return true;
      if (d.stopped) c.cancel = true;
      if (!d.stopped && finish == "error") {
        write(SseData(ErrorJson({.status = 500, .message = error, .type = "server_error"})));
        sink.done();
        return true;
      }
      const std::string reason = d.stopped || finish == "stop" ? "stop" : "length";
      const json last = st->ep == Endpoint::kChat ? ChatChunk(st->ids, "", false, reason)
                                                  : CompletionChunk(st->ids, "", reason);
      if (!write(SseData(last))) return false;
      if (st->include_usage &&
          !write(SseData(UsageChunk(st->ids, st->ep,
                                    {.prompt_tokens = st->n_prompt, .completion_tokens = completion, .cached_tokens = cached}))))
        return false;
      write(std::string(kSseDone));
      sink.done();
      return true;
    });
  };
  s.Post("/v1/chat/completions", [generate](const httplib::Request& req, httplib::Response& res) {
    generate(req, res, Endpoint::kChat);
  });
  s.Post("/v1/completions", [generate](const httplib::Request& req, httplib::Response& res) {
    generate(req, res, Endpoint::kCompletion);
  });
}

}  // namespace chorus::server
