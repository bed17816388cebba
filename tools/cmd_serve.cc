// `chorus serve`: the OpenAI-compatible server (src/server). Flags, start-up checks and signals only.
#include <fmt/format.h>
#include <pthread.h>
#include <signal.h>
#include <filesystem>

#include <fstream>
#include <iterator>
#include <thread>

#include "chorus/embedder.h"     // Embedder
#include "chorus/server.h"       // Server
#include "tools/common.h"
#include "tools/policy_flags.h"  // PolicyFlags

namespace chorus::cli {
namespace {

struct ServeArgs {
  std::string model, host = "127.0.0.1", api_key, api_keys;
  PolicyFlags pol;  // --policy, --kv-budget, --comix-sensitivity
  int port = 8080, threads = DefaultThreads(), ctx = 0;
  std::string private_k = "q8", private_v = "q8", window;
  size_t sink = 1;
  std::string kv_store, kv_store_queue = "64M", kv_store_secret_file;
  std::string kv_store_ca, kv_store_cert, kv_store_key, kv_store_sni;  // rediss://
  int kv_store_timeout_ms = 200;
  std::string reuse;  // "" = the engine's default
  std::string embedding_model;  // "" = all-MiniLM-L6-v2 next to the model, if installed
  double repair = SegmentOptions{}.repair;
  size_t max_queue = 64, max_running = 64, prefill_chunk = 256, max_tokens = 1024, max_body = 8 << 20;
};

int RunServe(const ServeArgs& a) {
  // Signals go to one waiting thread (blocked in every thread, which inherit the mask).
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that went away is a failed write, not a dead server

  if (a.pol.policy.needs_questions())
    return Fail(
        Status::Error("--policy {} is not served yet: its chunk precision needs the questions when a "
                      "document is sealed (use `chorus agents --policy {}` or `chorus generate --policy "
                      "{} --doc FILE -p QUESTION`)",
                      a.pol.spec, a.pol.spec, a.pol.spec));
  const size_t budget = a.pol.budget_bytes;
  EngineOptions eo{.model_path = a.model,
                   .threads = a.threads,
                   .n_ctx = static_cast<size_t>(a.ctx),
                   .policy = a.pol.policy,
                   .private_k = a.private_k,
                   .private_v = a.private_v,
                   .sink_blocks = a.sink,
                   .kv_budget_bytes = budget};
  if (!a.reuse.empty()) eo.segments.reuse = a.reuse == "segments" ? Reuse::kSegments : Reuse::kExact;
  eo.segments.repair = a.repair;
  eo.serve = {.prefill_chunk = a.prefill_chunk, .max_prefill = std::max<size_t>(512, a.prefill_chunk),
              .max_running = a.max_running};
  auto queue = ParseBytes(a.kv_store_queue);
  if (!queue.ok()) return Fail(queue.status().Context("--kv-store-queue"));
  eo.kv_store_url = a.kv_store;
  eo.kv_store_timeout_ms = a.kv_store_timeout_ms;
  eo.kv_store_queue_bytes = *queue;
  eo.kv_store_ca = a.kv_store_ca;
  eo.kv_store_cert = a.kv_store_cert;
  eo.kv_store_key = a.kv_store_key;
  eo.kv_store_sni = a.kv_store_sni;
  if (!a.kv_store_secret_file.empty()) {
    std::ifstream f(a.kv_store_secret_file, std::ios::binary);
    std::string secret((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
    if (!f || secret.size() < 16)
      return Fail(
          Status::Error("--kv-store-secret-file {}: the file must hold a secret of at least 16 bytes, it has {}",
                        a.kv_store_secret_file, secret.size()));
    eo.kv_store_secret = std::move(secret);
  }
  eo.kv_store_log = [](const std::string& msg) { std::fprintf(stderr, "chorus serve: %s\n", msg.c_str()); };
  if (!a.window.empty()) {
    if (Status s = CheckEngineWindowFlag(a.window); !s.ok()) return Fail(s);
    eo.kv_window = a.window;
  }
  if (a.prefill_chunk % 32 || a.prefill_chunk == 0)
    return Fail(Status::Error("--prefill-chunk must be a positive multiple of 32, got {}", a.prefill_chunk));

  // The keys before the model: a bad file is reported at once.
  std::string id = a.model.substr(a.model.find_last_of('/') + 1);  // the file name is what users call it
  if (id.size() > 5 && id.ends_with(".gguf")) id.resize(id.size() - 5);
  auto server = Server::Create({.host = a.host,
                                .port = a.port,
                                .api_key = a.api_key,
                                .api_keys_file = a.api_keys,
                                .max_queue = a.max_queue,
                                .max_body_bytes = a.max_body,
                                .default_max_tokens = a.max_tokens,
                                .model_id = id,
                                .max_running = a.max_running});
  if (!server.ok()) return Fail(server.status());
  Server& http = **server;
  std::fprintf(stderr, "chorus serve: loading %s\n", a.model.c_str());
  auto engine_r = Engine::Open(eo);
  if (!engine_r.ok()) return Fail(engine_r.status());
  Engine& engine = *engine_r.value();
  std::fprintf(stderr, "chorus serve: KV %s\n", engine.KvSettings().c_str());  // the policy, its table or fallback
  const bool store_up = engine.Stats().remote.up;  // before the engine loop starts (Bind)
  const size_t need = engine.EstimateBytes(32, a.max_tokens);
  if (budget != 0 && need > budget)
    return Fail(
        Status::Error("--kv-budget {} is too small for one request: a 32-token prompt with the default {} "
                      "answer tokens needs about {} bytes (raise --kv-budget or lower --max-tokens)",
                      a.pol.budget, a.max_tokens, need));
  // POST /v1/embeddings: the flag's encoder, else the one scripts/fetch_encoder.sh put next to the model.
  std::string emb_dir = a.embedding_model;
  if (emb_dir.empty()) {
    const std::string beside = std::filesystem::path(a.model).parent_path() / "all-MiniLM-L6-v2";
    if (std::filesystem::exists(std::filesystem::path(beside) / "config.json")) emb_dir = beside;
  }
  if (!emb_dir.empty()) {
    auto emb = Embedder::Open(emb_dir, 1);
    if (!emb.ok()) return Fail(emb.status().Context("--embedding-model"));
    std::fprintf(stderr, "chorus serve: /v1/embeddings with %s (%zu dims)\n", (*emb)->name().c_str(), (*emb)->dim());
    http.SetEmbedder(std::move(emb).value());
  } else {
    std::fprintf(stderr,
                 "chorus serve: no embedding model (scripts/fetch_encoder.sh, or --embedding-model DIR): "
                 "/v1/embeddings answers 404\n");
  }
  if (Status s = http.Bind(engine); !s.ok()) return Fail(s);
  std::printf("chorus serve: http://%s:%d/v1  (model %s, context %zu, KV budget %s, policy %s, %d threads%s%s%s)\n",
              a.host.c_str(), http.port(), id.c_str(), engine.context_size(), a.pol.budget.c_str(),
              FormatSpec(a.pol.policy).c_str(), a.threads,
              http.tenants()      ? fmt::format(", {} tenants", http.tenants()).c_str()
              : a.api_key.empty() ? ""
                                  : ", API key required",
              a.kv_store.empty() ? "" : ", kv-store ", a.kv_store.empty() ? "" : (store_up ? "up" : "DOWN"));
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
  server.value().reset();  // before the engine it serves
  std::fprintf(stderr, "chorus serve: stopped\n");
  return 0;
}

}  // namespace

RunFn AddServe(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "OpenAI-compatible HTTP server (POST /v1/chat/completions, /v1/completions, /v1/responses, /v1/embeddings, GET "
      "/v1/models, /health, /metrics; "
      "chorus extension: /v1/contexts). A live dashboard of the KV cache is at GET /dashboard (KV budget, requests, "
      "shared blocks, precision maps, throughput and TTFT; served from the binary, polls once a second; with "
      "--api-key open /dashboard#key=KEY); its data is GET /v1/state (JSON, under the API key, sampled at most once "
      "a second: docs/ARCHITECTURE.md, 'Serving: the dashboard'). Every prompt is cut into 32-token blocks keyed by "
      "content: a request whose "
      "leading blocks another request (running or finished) or a pinned context already holds reuses them, compressed, "
      "and prefills only the rest. Example: chorus serve -m model.gguf --port 8080, then "
      "OpenAI(base_url=\"http://127.0.0.1:8080/v1\", api_key=\"-\").");
  cmd->add_option("-m,--model", a->model, "GGUF model file")->required();
  cmd->add_option("--host", a->host, "address to listen on (loopback by default)")->capture_default_str();
  cmd->add_option("--port", a->port, "TCP port (0 = any free port, printed at start)")
      ->check(CLI::Range(0, 65535))->capture_default_str();
  cmd->add_option("--api-key", a->api_key,
                  "require \"Authorization: Bearer KEY\" on /v1/* (one tenant, who sees "
                  "everything and shares every cached block)");
  cmd->add_option("--api-keys", a->api_keys,
                  "tenants: a file of lines `key tenant [group] [kv_quota]` (# comments; - for no group; a key is 16+ "
                  "printable characters). A request runs as its key's tenant: it sees, reads and deletes only its own "
                  "requests and contexts (another's context id is a 404), and its prompts share cached KV only with "
                  "its group (or itself when it has none); a request's cache_salt narrows that further; a context made "
                  "with \"scope\": \"public\" is reused by all. The tenant named admin sees everything. kv_quota "
                  "(bytes, K/M/G) bounds what its scope holds (cached blocks + running requests): over it, its own "
                  "idle cached blocks are evicted, then it gets HTTP 429 with the bytes. docs/SECURITY.md")
      ->excludes("--api-key")
      ->check(CLI::ExistingFile);
  cmd->add_option("--embedding-model", a->embedding_model,
                  "sentence-transformers directory for POST /v1/embeddings (default: all-MiniLM-L6-v2 next to the "
                  "model, from scripts/fetch_encoder.sh)");
  AddPolicyFlags(cmd, a->pol,
                 {.default_spec = "chorus",
                  .budget_any_policy = true,
                  .default_budget = "2G",
                  .where = "for prompt blocks (any may be shared); comix: bits per request x layer x K/V under the "
                           "budget; the two cocktails need their questions before a document is sealed and are not "
                           "served"});
  cmd->add_option("--reuse", a->reuse,
                  std::string("which cached KV a prompt may reuse: exact (only a prefix identical up to the block) or "
                              "segments (also a span cached after other text, e.g. the same document after another "
                              "agent's system prompt: its blocks read at their new offset, the span's head recomputed "
                              "(--repair); reported as usage.prompt_tokens_details.reused_tokens). A request can "
                              "choose with \"chorus\": {\"reuse\": ...}. Default: ") +
                      (SegmentOptions{}.reuse == Reuse::kSegments ? "segments" : "exact"))
      ->check(CLI::IsMember({"exact", "segments"}));
  cmd->add_option("--repair", a->repair,
                  "segments: fraction of each reused span recomputed at its head "
                  "(at least 16 tokens; docs/results/segments.md has the curve)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--kv-private-k", a->private_k, "K format of generated-token blocks")->capture_default_str();
  cmd->add_option("--kv-private-v", a->private_v, "V format of generated-token blocks")->capture_default_str();
  cmd->add_option("--kv-sink", a->sink, "leading 32-token blocks kept f16")->capture_default_str();
  cmd->add_option("--kv-window", a->window,
                  "rows of the newest <32 tokens: f16, q8 or auto (default " + EngineOptions{}.kv_window + ")");
  cmd->add_option(
      "--kv-store", a->kv_store,
      "share sealed prompt blocks with other replicas through Redis: "
      "redis[s]://[[USER]:PASSWORD@]HOST[:PORT][/DB] (USER: a Redis ACL user; rediss:// = TLS; docs/SCALE_OUT.md); "
      "unreachable = serve locally and retry");
  cmd->add_option("--kv-store-ca", a->kv_store_ca,
                  "rediss://: PEM CA bundle that must sign the server's certificate (default: the system's "
                  "trust store)");
  cmd->add_option("--kv-store-cert", a->kv_store_cert,
                  "rediss://: PEM client certificate, for a Redis with tls-auth-clients (with --kv-store-key)");
  cmd->add_option("--kv-store-key", a->kv_store_key, "rediss://: PEM private key of --kv-store-cert");
  cmd->add_option("--kv-store-sni", a->kv_store_sni,
                  "rediss://: the name the server's certificate must carry, also sent as SNI (default: the "
                  "URL's host)");
  cmd->add_option("--kv-store-timeout-ms", a->kv_store_timeout_ms, "deadline of one remote fetch; past it the "
                                                                   "prompt is prefilled here")
      ->check(CLI::Range(1, 60000))->capture_default_str();
  cmd->add_option("--kv-store-secret-file", a->kv_store_secret_file,
                  "a file holding a secret (16+ bytes) every replica shares: each value in Redis carries an "
                  "HMAC-SHA256 under it and a value whose MAC fails is refused and computed here, so a writer "
                  "without the secret cannot forge a block (docs/SECURITY.md)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--kv-store-queue", a->kv_store_queue, "bytes of blocks waiting to be published (beyond: dropped "
                                                         "and counted)")->capture_default_str();
  cmd->add_option("--max-queue", a->max_queue, "requests waiting for KV space before new ones get 503 + Retry-After")
      ->check(CLI::Range(1, 1 << 16))->capture_default_str();
  cmd->add_option("--max-running", a->max_running, "requests decoding at once (one batch per step)")
      ->check(CLI::Range(1, 4096))->capture_default_str();
  cmd->add_option("--prefill-chunk", a->prefill_chunk, "prompt tokens prefilled per step beside running decodes "
                                                       "(multiple of 32; smaller = steadier streams)")->capture_default_str();
  cmd->add_option("--max-tokens", a->max_tokens, "answer length when a request gives no max_tokens (capped by the context)")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  cmd->add_option("--max-body", a->max_body, "largest request body in bytes")->capture_default_str();
  cmd->add_option("-c,--ctx", a->ctx, "positions per request (prompt + answer; default: min(training, 8192))")
      ->check(CLI::Range(1, 1 << 24));
  cmd->add_option("-t,--threads", a->threads, "threads")->check(CLI::Range(1, 256))->capture_default_str();
  return [a, cmd] {
    if (Status s = CheckPolicyFlags(cmd, a->pol, /*need_query=*/false); !s.ok()) return Fail(s);
    return RunServe(*a);
  };
}

}  // namespace chorus::cli
