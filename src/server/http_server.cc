// HttpServer: the listener, its lifetime, authentication, and the table of routes (handlers: routes.cc).
#include "http_server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <chrono>

#include "server/dashboard_assets.h"  // kEmbeddedFiles (generated from assets/)

namespace chorus::server {
using json = nlohmann::json;

void HttpServer::Reply(Response& res, const ApiError& e) {
  res.status = e.status;
  // Messages may quote the client's bytes (a parse error's "last read"): never throw on them.
  res.set_content(ErrorJson(e).dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void HttpServer::ReplyJson(Response& res, const json& j, int status) {
  res.status = status;
  res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

HttpServer::HttpServer(Engine& engine, const HttpOptions& options)
    : engine_(engine),
      options_(options),
      tenants_(options.tenants           ? *options.tenants
               : options.api_key.empty() ? Tenants()
                                         : Tenants::OneKey(options.api_key)),
      loop_(engine, metrics_, options.max_queue),
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
    if (port_ <= 0) return Status::Error(fmt::format("cannot listen on {} (any port)", options_.host));
  } else {
    if (!http_->bind_to_port(options_.host, options_.port))
      return Status::Error(fmt::format("cannot listen on {}:{} (address in use, or not an address of this machine)",
                                       options_.host, options_.port));
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

// Auth for /v1/*: the tenant of a Bearer key, every key compared in full (Tenants::Authenticate).
const Tenant* HttpServer::Authorized(const Request& req, Response& res) {
  const std::string h = req.get_header_value("Authorization");
  if (const Tenant* t = tenants_.Authenticate(h)) return t;
  Reply(res, {.status = 401,
              .message = h.empty() ? "no API key provided: send \"Authorization: Bearer <key>\""
                                   : "incorrect API key provided",
              .code = "invalid_api_key"});
  // The route, not the path: a context id (or anything a client puts in a path) is no label.
  metrics_.CountRequest(req.path.rfind("/v1/contexts/", 0) == 0 ? "/v1/contexts/{id}" : req.path, 401);
  return nullptr;
}

void HttpServer::Routes() {
  httplib::Server& s = *http_;
  s.set_error_handler([this](const Request& req, Response& res) {
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
  s.set_exception_handler([](const Request&, Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    Reply(res, {.status = 500, .message = what, .type = "server_error"});
  });

  s.Get("/health", [](const Request&, Response& res) { ReplyJson(res, {{"status", "ok"}}); });
  s.Get("/metrics", [this](const Request&, Response& res) {
    res.set_content(metrics_.Render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  // The dashboard (docs/SERVING.md "The dashboard"): its state and its files.
  s.Get("/v1/state", [this](const Request& req, Response& res) { HandleState(req, res); });
  for (const EmbeddedFile& f : kEmbeddedFiles) {
    const std::string path = f.path, mime = std::string(f.mime) + "; charset=utf-8";
    const std::string body(reinterpret_cast<const char*>(f.data), f.size);
    std::string pattern;  // cpp-httplib routes are regular expressions: match the path literally
    for (char c : path) pattern += c == '.' ? std::string("\\.") : std::string(1, c);
    s.Get(pattern, [mime, body](const Request&, Response& res) {
      // The page takes no user text from the server: everything it shows comes from /v1/state
      // and goes into the document as text (textContent). No script from anywhere else.
      res.set_header("Content-Security-Policy",
                     "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:");
      res.set_header("X-Content-Type-Options", "nosniff");
      res.set_header("Cache-Control", "no-cache");
      res.set_content(body, mime);
    });
  }
  s.Get("/v1/models", [this](const Request& req, Response& res) { HandleModels(req, res); });
  s.Post("/v1/contexts", [this](const Request& req, Response& res) { HandleCreateContext(req, res); });
  s.Get("/v1/contexts", [this](const Request& req, Response& res) { HandleListContexts(req, res); });
  s.Get(R"(/v1/contexts/([^/]+))", [this](const Request& req, Response& res) { HandleGetContext(req, res); });
  s.Delete(R"(/v1/contexts/([^/]+))", [this](const Request& req, Response& res) { HandleDeleteContext(req, res); });
  s.Post("/v1/chat/completions",
         [this](const Request& req, Response& res) { HandleGenerate(req, res, Endpoint::kChat); });
  s.Post("/v1/completions",
         [this](const Request& req, Response& res) { HandleGenerate(req, res, Endpoint::kCompletion); });
  s.Post("/v1/embeddings", [this](const Request& req, Response& res) { HandleEmbeddings(req, res); });
  s.Post("/v1/responses", [this](const Request& req, Response& res) { HandleCreateResponse(req, res); });
  s.Get(R"(/v1/responses/([^/]+))", [this](const Request& req, Response& res) { HandleGetResponse(req, res); });
  s.Delete(R"(/v1/responses/([^/]+))", [this](const Request& req, Response& res) { HandleDeleteResponse(req, res); });
}

}  // namespace chorus::server
