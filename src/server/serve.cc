// `chorus serve` in one call: Serve (include/chorus/server.h), over the public Server.
#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "chorus/server.h"

namespace chorus {

Status Serve(ServeConfig c) {
  // Signals go to one waiting thread (blocked in every thread, which inherit the mask).
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that went away is a failed write, not a dead server

  if (c.prefill_chunk % 32 || c.prefill_chunk == 0)
    return Status::Error(fmt::format("--prefill-chunk must be a positive multiple of 32, got {}", c.prefill_chunk));
  EngineOptions& eo = c.engine;
  eo.serve = {.prefill_chunk = c.prefill_chunk,
              .max_prefill = std::max<size_t>(512, c.prefill_chunk),
              .max_running = c.max_running};
  eo.kv_store_log = [](const std::string& msg) { std::fprintf(stderr, "chorus serve: %s\n", msg.c_str()); };
  std::string id = eo.model_path.substr(eo.model_path.find_last_of('/') + 1);  // the file name is what users call it
  if (id.size() > 5 && id.ends_with(".gguf")) id.resize(id.size() - 5);
  c.http.model_id = id;
  c.http.max_running = c.max_running;
  // Declared before the server, so destroyed after it: the engine outlives the server.
  std::unique_ptr<Engine> engine;
  // The keys before the model: a bad file is reported at once.
  auto server_r = Server::Create(c.http);
  if (!server_r.ok()) return server_r.status();
  Server& http = **server_r;
  std::fprintf(stderr, "chorus serve: loading %s\n", eo.model_path.c_str());
  auto engine_r = Engine::Open(eo);
  if (!engine_r.ok()) return engine_r.status();
  engine = std::move(engine_r).value();
  std::fprintf(stderr, "chorus serve: KV %s\n", engine->KvSettings().c_str());  // the policy, its table or fallback
  const bool store_up = engine->Stats().remote.up;                              // before the engine loop starts (Bind)
  const size_t budget = eo.kv_budget_bytes;
  const size_t need = engine->EstimateBytes(32, c.http.default_max_tokens);
  if (budget != 0 && need > budget)
    return Status::Error(
        fmt::format("--kv-budget {} is too small for one request: a 32-token prompt with the default {} "
                    "answer tokens needs about {} bytes (raise --kv-budget or lower --max-tokens)",
                    c.budget_text, c.http.default_max_tokens, need));
  // POST /v1/embeddings: the flag's encoder, else the one scripts/fetch_encoder.sh put next to the model.
  std::string emb_dir = c.embedding_model;
  if (emb_dir.empty()) {
    const std::string beside = std::filesystem::path(eo.model_path).parent_path() / "all-MiniLM-L6-v2";
    if (std::filesystem::exists(std::filesystem::path(beside) / "config.json")) emb_dir = beside;
  }
  if (!emb_dir.empty()) {
    auto emb = Embedder::Open(emb_dir, 1);
    if (!emb.ok()) return emb.status().Context("--embedding-model");
    std::fprintf(stderr, "chorus serve: /v1/embeddings with %s (%zu dims)\n", (*emb)->name().c_str(), (*emb)->dim());
    http.SetEmbedder(std::move(emb).value());
  } else {
    std::fprintf(stderr,
                 "chorus serve: no embedding model (scripts/fetch_encoder.sh, or --embedding-model DIR): "
                 "/v1/embeddings answers 404\n");
  }
  if (Status s = http.Bind(*engine); !s.ok()) return s;
  const std::string& store = eo.kv_store_url;
  std::printf("chorus serve: http://%s:%d/v1  (model %s, context %zu, KV budget %s, policy %s, %d threads%s%s%s)\n",
              c.http.host.c_str(), http.port(), id.c_str(), engine->context_size(), c.budget_text.c_str(),
              FormatSpec(eo.policy).c_str(), eo.threads,
              http.tenants()           ? fmt::format(", {} tenants", http.tenants()).c_str()
              : c.http.api_key.empty() ? ""
                                       : ", API key required",
              store.empty() ? "" : ", kv-store ", store.empty() ? "" : (store_up ? "up" : "DOWN"));
  std::fflush(stdout);
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    std::fprintf(stderr, "chorus serve: %s, stopping\n", sig == SIGINT ? "interrupted" : "terminated");
    http.Shutdown();
  });
  http.Serve();
  http.Shutdown();  // Serve returned on its own (listener error): stop the rest too
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  std::fprintf(stderr, "chorus serve: stopped\n");
  return Status::Ok();
}

}  // namespace chorus
