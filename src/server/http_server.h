// HttpServer: the OpenAI-compatible HTTP endpoints of `chorus serve` over cpp-httplib. Each request
// is parsed and validated on its HTTP thread (protocol.h), tokenized, handed to the EngineLoop, and
// answered from its Channel — as one JSON object or as server-sent events. Uses include/chorus only.
// Endpoints: POST /v1/chat/completions, POST /v1/completions, POST /v1/responses, GET|DELETE
// /v1/responses/{id}, POST /v1/embeddings, GET /v1/models, POST|GET /v1/contexts,
// GET|DELETE /v1/contexts/{id}, GET /health, GET /metrics (Prometheus text), GET /v1/state (the
// dashboard's JSON, under the API key), GET /dashboard (+ /dashboard/app.js, /dashboard/style.css:
// the page, embedded in the binary). Every /v1/* request runs as its key's tenant (tenants.h): a
// tenant sees, reads and deletes its own requests and contexts (public contexts it may read), an
// admin everyone's; another tenant's context id is answered as if it did not exist (404). One handler per route (routes.cc); the generation handlers
// parse the body into native types first (protocol.h), then tokenize, check and enqueue.
// Threading rules: handlers run on cpp-httplib's pool, one request per thread; they never touch the
// Engine but through EngineLoop (RunOnLoop, TakeState) and the Engine's thread-safe calls
// (Tokenize, RenderChat, EstimateBytes, the model's getters). A generation reads its Channel's
// deltas on its own thread: a streaming one from the chunked-content provider, one call per publish
// or keep-alive. state_json_ is under state_mu_, contexts_ under contexts_mu_; the rest is immutable
// after the constructor or atomic.
#pragma once
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <variant>

#include "chorus/embedder.h"
#include "chorus/engine.h"
#include "engine_loop.h"  // EngineLoop
#include "metrics.h"      // ServerMetrics
#include "protocol.h"     // ApiError, Endpoint, GenerationRequest
#include "responses.h"    // ResponseStore, StoredResponse
#include "tenants.h"      // Tenants, Tenant

namespace httplib {
class Server;
struct Request;
struct Response;
}

namespace chorus::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;            // 0 = any free port (printed)
  std::string api_key;        // non-empty: /v1/* needs "Authorization: Bearer <key>" (one tenant)
  std::optional<Tenants> tenants;  // --api-keys: one key per tenant (replaces api_key)
  size_t max_queue = 64;      // requests waiting for admission before 503
  size_t max_body_bytes = 8 << 20;
  size_t default_max_tokens = 1024;  // when a request gives none (capped by the context)
  std::string model_id;       // what /v1/models lists and responses carry
  int http_threads = 0;       // 0 = max_queue + engine max_running + 16 (streams hold a thread each)
  double retry_after_s = 1;   // Retry-After on 503
  size_t max_running = 0;     // the engine's (shown by the dashboard)
};

class HttpServer {
 public:
  HttpServer(Engine& engine, const HttpOptions& options);
  ~HttpServer();
  // Binds the socket: an error naming the address when it is in use or invalid.
  Status Bind();
  int port() const { return port_; }
  // Serves until Shutdown (blocking).
  void Serve();
  // Every stream in flight gets a final error event, then the listener stops. Thread-safe.
  void Shutdown(const std::string& reason = "the server is shutting down");
  ServerMetrics& metrics() { return metrics_; }
  // POST /v1/embeddings answers with it (before Serve; without one that route is a 404).
  void SetEmbedder(std::unique_ptr<Embedder> e) { embedder_ = std::move(e); }

 private:
  using Request = httplib::Request;
  using Response = httplib::Response;
  // A generation request checked, tokenized and ready to enqueue (routes.cc).
  struct Admission;

  void Routes();  // binds each route to its handler (http_server.cc)
  // An error as {"error": ...} with its status; any JSON with `status`.
  static void Reply(Response& res, const ApiError& e);
  static void ReplyJson(Response& res, const nlohmann::json& j, int status = 200);
  // The request's tenant (its API key's), or null with the 401 answered (and counted).
  const Tenant* Authorized(const Request& req, Response& res);
  // Handlers (routes.cc), one per route.
  void HandleState(const Request& req, Response& res);
  void HandleModels(const Request& req, Response& res);
  void HandleCreateContext(const Request& req, Response& res);
  void HandleListContexts(const Request& req, Response& res);
  void HandleGetContext(const Request& req, Response& res);
  void HandleDeleteContext(const Request& req, Response& res);
  void HandleGenerate(const Request& req, Response& res, Endpoint ep);
  // The steps of HandleGenerate: the prompt's tokens and the checks against the context and the
  // KV budget (an ApiError when they fail); then one answer or a stream of events.
  // prev: the stored response a Responses request continues (its tokens are reused when the new
  // prompt's text extends its text).
  std::variant<Admission, ApiError> Admit(const GenerationRequest& g, Endpoint ep, const Tenant& tenant,
                                          const StoredResponse* prev = nullptr);
  // The Responses API (routes_responses.cc).
  void HandleCreateResponse(const Request& req, Response& res);
  void HandleGetResponse(const Request& req, Response& res);
  void HandleDeleteResponse(const Request& req, Response& res);
  void HandleEmbeddings(const Request& req, Response& res);
  void ReplyWhole(const Request& req, Response& res, const GenerationRequest& g, const Admission& a);
  void ReplyStream(Response& res, const GenerationRequest& g, const Admission& a);
  void ReplyFailed(Response& res, const ChannelUpdate& u) const;
  Engine& engine_;
  HttpOptions options_;
  Tenants tenants_;
  ServerMetrics metrics_;
  EngineLoop loop_;
  std::unique_ptr<httplib::Server> http_;
  int port_ = 0;
  std::atomic<bool> shutting_down_{false};
  std::atomic<uint64_t> next_id_{1};
  // Pinned contexts made over HTTP: their text (for chorus_context content parts), whether public,
  // and each tenant's Share calls (its references, released when it deletes the context).
  struct ContextEntry {
    std::string text;
    bool is_public = false;
    std::map<std::string, size_t> refs;  // tenant → references
  };
  // Whether `t` may list, read and use the context (its own, a public one, or an admin).
  static bool Visible(const Tenant& t, const ContextEntry& c) { return t.admin || c.is_public || c.refs.count(t.name); }
  // The visible context named `name` ("ctx-N"), or 0. Under contexts_mu_.
  ContextId FindContext(const Tenant& t, const std::string& name);
  std::mutex contexts_mu_;
  std::map<ContextId, ContextEntry> contexts_;
  std::mutex embedder_mu_;  // one embedding call at a time
  std::unique_ptr<Embedder> embedder_;
  ResponseStore responses_{4096};  // stored responses (previous_response_id), thread-safe
  // GET /v1/state: one snapshot a second at most, whoever asks (the whole state is cached and cut
  // to each tenant's share per answer).
  std::mutex state_mu_;
  nlohmann::json state_json_;
  std::chrono::steady_clock::time_point state_at_;
};

// `chorus serve` in one call (serve.cc): loads the tenants (api_keys_file) and then the model, checks
// that one short request fits the budget, binds, attaches the embedding model, prints where it
// listens on stdout and its progress on stderr ("chorus serve: ..."), and serves until SIGINT or
// SIGTERM (blocked in the calling thread and every thread it starts: call it before starting any
// other). An error (the first failing step) is returned before serving; Ok once stopped.
struct ServeConfig {
  EngineOptions engine;         // but serve (from the fields below) and kv_store_log (stderr)
  HttpOptions http;             // but tenants, model_id (the model's file name) and max_running (below)
  std::string api_keys_file;    // tenants, one key per line (Tenants::Load); "" = http.api_key or open
  std::string embedding_model;  // POST /v1/embeddings; "" = all-MiniLM-L6-v2 beside the model, if installed
  std::string budget_text;      // engine.kv_budget_bytes as the user wrote it (messages, the banner)
  size_t prefill_chunk = 256;   // chorus::ServeOptions::prefill_chunk: a positive multiple of 32
  size_t max_running = 64;      // requests decoding at once (engine and dashboard)
};
Status Serve(ServeConfig config);

}  // namespace chorus::server
