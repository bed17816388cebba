// HttpServer: the OpenAI-compatible HTTP endpoints of `chorus serve` over cpp-httplib. Each request
// is parsed and validated on its HTTP thread (protocol.h), tokenized, handed to the EngineLoop, and
// answered from its Channel — as one JSON object or as server-sent events. Uses include/chorus only.
// Endpoints: POST /v1/chat/completions, POST /v1/completions, POST /v1/responses, GET|DELETE
// /v1/responses/{id}, GET /v1/models, POST|GET /v1/contexts,
// DELETE /v1/contexts/{id}, GET /health, GET /metrics (Prometheus text), GET /v1/state (the
// dashboard's JSON, under the API key), GET /dashboard (+ /dashboard/app.js, /dashboard/style.css:
// the page, embedded in the binary). One handler per route (routes.cc); the generation handlers
// parse the body into native types first (protocol.h), then tokenize, check and enqueue.
// Threading rules: handlers run on cpp-httplib's pool, one request per thread; they never touch the
// Engine but through EngineLoop (RunOnLoop, TakeState) and the Engine's thread-safe calls
// (Tokenize, RenderChat, EstimateBytes, the model's getters). A generation reads its Channel's
// deltas on its own thread: a streaming one from the chunked-content provider, one call per publish
// or keep-alive. state_body_ is under state_mu_, context_text_ under contexts_mu_; the rest is immutable after the constructor or
// atomic.
#pragma once
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <variant>

#include "chorus/embedder.h"
#include "chorus/engine.h"
#include "engine_loop.h"  // EngineLoop
#include "metrics.h"      // ServerMetrics
#include "protocol.h"     // ApiError, Endpoint, GenerationRequest
#include "responses.h"    // ResponseStore, StoredResponse

namespace httplib {
class Server;
struct Request;
struct Response;
}

namespace chorus::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;            // 0 = any free port (printed)
  std::string api_key;        // non-empty: /v1/* needs "Authorization: Bearer <key>"
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
  // Under the API key: true, or the 401 answered (and counted).
  bool Authorized(const Request& req, Response& res);
  // Handlers (routes.cc), one per route.
  void HandleState(const Request& req, Response& res);
  void HandleModels(const Request& req, Response& res);
  void HandleCreateContext(const Request& req, Response& res);
  void HandleListContexts(const Request& req, Response& res);
  void HandleDeleteContext(const Request& req, Response& res);
  void HandleGenerate(const Request& req, Response& res, Endpoint ep);
  // The steps of HandleGenerate: the prompt's tokens and the checks against the context and the
  // KV budget (an ApiError when they fail); then one answer or a stream of events.
  // prev: the stored response a Responses request continues (its tokens are reused when the new
  // prompt's text extends its text).
  std::variant<Admission, ApiError> Admit(const GenerationRequest& g, Endpoint ep,
                                          const StoredResponse* prev = nullptr);
  // The Responses API (routes_responses.cc).
  void HandleCreateResponse(const Request& req, Response& res);
  void HandleGetResponse(const Request& req, Response& res);
  void HandleDeleteResponse(const Request& req, Response& res);
  void HandleEmbeddings(const Request& req, Response& res);
  void ReplyWhole(const Request& req, Response& res, const GenerationRequest& g, const Admission& a);
  void ReplyStream(Response& res, const GenerationRequest& g, const Admission& a);
  Engine& engine_;
  HttpOptions options_;
  ServerMetrics metrics_;
  EngineLoop loop_;
  std::unique_ptr<httplib::Server> http_;
  int port_ = 0;
  std::atomic<bool> shutting_down_{false};
  std::atomic<uint64_t> next_id_{1};
  // Pinned contexts' texts by id, for chorus_context content parts; under contexts_mu_.
  std::mutex contexts_mu_;
  std::map<ContextId, std::string> context_text_;
  std::mutex embedder_mu_;  // one embedding call at a time
  std::unique_ptr<Embedder> embedder_;
  ResponseStore responses_{4096};  // stored responses (previous_response_id), thread-safe
  // GET /v1/state: one snapshot a second at most, whoever asks (the answer is cached).
  std::mutex state_mu_;
  std::string state_body_;
  std::chrono::steady_clock::time_point state_at_;
};

}  // namespace chorus::server
