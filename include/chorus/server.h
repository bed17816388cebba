// Server: the OpenAI-compatible HTTP server of `chorus serve` over one Engine — POST
// /v1/chat/completions, /v1/completions, /v1/responses, /v1/embeddings, /v1/contexts, GET /v1/models,
// /health, /metrics and the dashboard (docs/SERVING.md). The engine's own scheduling knobs are
// EngineOptions::serve; these are the HTTP side's.
//
//   auto server = chorus::Server::Create({.port = 8080}).value();  // reads the keys file, if any
//   if (auto s = server->Bind(*engine); !s.ok()) ...                // the engine outlives the server
//   server->Serve();                                                // until Shutdown
//
// Invariants: Create checks the options and reads api_keys_file before any model is loaded, so a
// bad file is reported at once; Bind starts the engine loop, which from then on is the only thread
// that drives the Engine. Threading rules: Create, SetEmbedder and Bind on one thread, in that
// order; Serve blocks that thread; Shutdown may be called from any thread, once Bind has returned.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "chorus/embedder.h"  // Embedder
#include "chorus/engine.h"    // Engine
#include "chorus/status.h"    // Status, Result

namespace chorus {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;      // 0 = any free port (port() after Bind)
  std::string api_key;  // non-empty: /v1/* needs "Authorization: Bearer KEY" (one tenant)
  // Tenants: a file of lines `key tenant [group] [kv_quota]` (docs/SECURITY.md); not with api_key.
  std::string api_keys_file;
  size_t max_queue = 64;  // requests waiting for admission before 503
  size_t max_body_bytes = 8 << 20;
  size_t default_max_tokens = 1024;  // when a request gives none (capped by the context)
  std::string model_id;              // what /v1/models lists; "" = the model's name
  int http_threads = 0;              // 0 = enough for max_queue waiting requests and every running stream
  double retry_after_s = 1;          // Retry-After on 503
  size_t max_running = 0;            // the engine's (shown by the dashboard)
};

class Server {
 public:
  // Errors name the keys file's line, or the options that conflict.
  static Result<std::unique_ptr<Server>> Create(const ServerOptions& options);
  ~Server();
  // The tenants of api_keys_file (0 without one).
  size_t tenants() const;
  // POST /v1/embeddings answers with it (before Bind; without one that route is a 404).
  void SetEmbedder(std::unique_ptr<Embedder> embedder);
  // Serves `engine`: binds the socket (an error naming the address when it is in use or invalid)
  // and starts the engine loop. Once per Server. `engine` must outlive the Server (destroy the
  // Server first); after a failed Bind the Server refers to nothing of it.
  Status Bind(Engine& engine);
  int port() const;  // after Bind
  // Serves until Shutdown (blocking); returns at once without a Bind.
  void Serve();
  // Every stream in flight gets a final error event, then the listener stops. Thread-safe.
  void Shutdown(const std::string& reason = "the server is shutting down");

 private:
  struct Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// `chorus serve` in one call: creates the Server (reading api_keys_file) and then opens the engine,
// checks that one short request fits the budget, attaches the embedding model, binds, prints where it
// listens on stdout and its progress on stderr ("chorus serve: ..."), and serves until SIGINT or
// SIGTERM (blocked in the calling thread and every thread it starts: call it before starting any
// other). An error (the first failing step) is returned before serving; Ok once stopped.
struct ServeConfig {
  EngineOptions engine;         // but serve (from the fields below) and kv_store_log (stderr)
  ServerOptions http;           // but model_id (the model's file name) and max_running (below)
  std::string embedding_model;  // POST /v1/embeddings; "" = all-MiniLM-L6-v2 beside the model, if installed
  std::string budget_text;      // engine.kv_budget_bytes as the user wrote it (messages, the banner)
  size_t prefill_chunk = 256;   // ServeOptions::prefill_chunk: a positive multiple of 32
  size_t max_running = 64;      // requests decoding at once (engine and dashboard)
};
Status Serve(ServeConfig config);

}  // namespace chorus
