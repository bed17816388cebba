// `chorus serve`: the OpenAI-compatible server (src/server). Flags, then chorus::Serve.
#include "chorus/server.h"  // Serve, ServeConfig
#include "tools/common.h"
#include "tools/engine_flags.h"  // EngineFlags

namespace chorus::cli {

RunFn AddServe(CLI::App& app) {
  auto engine = std::make_shared<EngineFlags>();
  auto serve = std::make_shared<ServeConfig>();  // all but engine and budget_text (from *engine)
  EngineFlags& e = *engine;
  ServeConfig& s = *serve;
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "OpenAI-compatible HTTP server (POST /v1/chat/completions, /v1/completions, /v1/responses, /v1/embeddings, GET "
      "/v1/models, /health, /metrics; chorus extension: /v1/contexts). A live dashboard of the KV cache is at GET "
      "/dashboard (KV budget, requests, shared blocks, precision maps, throughput and TTFT; served from the binary, "
      "polls once a second; with --api-key open /dashboard#key=KEY); its data is GET /v1/state (JSON, under the API "
      "key, sampled at most once a second: docs/ARCHITECTURE.md, 'Serving: the dashboard'). Every prompt is cut into "
      "32-token blocks keyed by content: a request whose leading blocks another request (running or finished) or a "
      "pinned context already holds reuses them, compressed, and prefills only the rest. Example: chorus serve -m "
      "model.gguf --port 8080, then OpenAI(base_url=\"http://127.0.0.1:8080/v1\", api_key=\"-\").");
  cmd->add_option("-m,--model", e.model, "GGUF model file")->required();
  cmd->add_option("--host", s.http.host, "address to listen on (loopback by default)")->capture_default_str();
  cmd->add_option("--port", s.http.port, "TCP port (0 = any free port, printed at start)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--api-key", s.http.api_key,
                  "require \"Authorization: Bearer KEY\" on /v1/* (one tenant, who sees "
                  "everything and shares every cached block)");
  cmd->add_option("--api-keys", s.http.api_keys_file,
                  "tenants: a file of lines `key tenant [group] [kv_quota]` (# comments; - for no group; a key is 16+ "
                  "printable characters). A request runs as its key's tenant: it sees, reads and deletes only its own "
                  "requests and contexts (another's context id is a 404), and its prompts share cached KV only with "
                  "its group (or itself when it has none); a request's cache_salt narrows that further; a context made "
                  "with \"scope\": \"public\" is reused by all. The tenant named admin sees everything. kv_quota "
                  "(bytes, K/M/G) bounds what its scope holds (cached blocks + running requests): over it, its own "
                  "idle cached blocks are evicted, then it gets HTTP 429 with the bytes. docs/SECURITY.md")
      ->excludes("--api-key")
      ->check(CLI::ExistingFile);
  cmd->add_option("--embedding-model", s.embedding_model,
                  "sentence-transformers directory for POST /v1/embeddings (default: all-MiniLM-L6-v2 next to the "
                  "model, from scripts/fetch_encoder.sh)");
  AddPolicyFlags(cmd, e.pol,
                 {.default_spec = "chorus",
                  .budget_any_policy = true,
                  .default_budget = "2G",
                  .where = "for prompt blocks (any may be shared); comix: bits per request x layer x K/V under the "
                           "budget; the two cocktails need their questions before a document is sealed and are not "
                           "served"});
  cmd->add_option("--reuse", e.reuse,
                  std::string("which cached KV a prompt may reuse: exact (only a prefix identical up to the block) or "
                              "segments (also a span cached after other text, e.g. the same document after another "
                              "agent's system prompt: its blocks read at their new offset, the span's head recomputed "
                              "(--repair); reported as usage.prompt_tokens_details.reused_tokens). A request can "
                              "choose with \"chorus\": {\"reuse\": ...}. Default: ") +
                      (SegmentOptions{}.reuse == Reuse::kSegments ? "segments" : "exact"))
      ->check(CLI::IsMember({"exact", "segments"}));
  cmd->add_option("--repair", e.repair,
                  "segments: fraction of each reused span recomputed at its head "
                  "(at least 16 tokens; docs/results/segments.md has the curve)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  AddEngineKvFlags(
      cmd, e,
      {.whose = "generated-token blocks",
       .sink = "leading 32-token blocks kept f16",
       .window = "rows of the newest <32 tokens: f16, q8 or auto (default " + EngineOptions{}.kv_window + ")"});
  AddKvStoreFlags(cmd, e);
  cmd->add_option("--max-queue", s.http.max_queue,
                  "requests waiting for KV space before new ones get 503 + Retry-After")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  cmd->add_option("--max-running", s.max_running, "requests decoding at once (one batch per step)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--prefill-chunk", s.prefill_chunk,
                  "prompt tokens prefilled per step beside running decodes "
                  "(multiple of 32; smaller = steadier streams)")
      ->capture_default_str();
  cmd->add_option("--max-tokens", s.http.default_max_tokens,
                  "answer length when a request gives no max_tokens (capped by the context)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--max-body", s.http.max_body_bytes, "largest request body in bytes")->capture_default_str();
  cmd->add_option("-c,--ctx", e.ctx, "positions per request (prompt + answer; default: min(training, 8192))")
      ->check(CLI::Range(1, 1 << 24));
  AddThreadsFlag(cmd, e.threads);
  return [engine, serve, cmd] {
    const std::string& spec = engine->pol.spec;
    if (Status st = CheckPolicyFlags(cmd, engine->pol, /*need_query=*/false); !st.ok()) return Fail(st);
    if (engine->pol.policy.needs_questions())
      return Fail(
          Status::Error("--policy {} is not served yet: its chunk precision needs the questions when a "
                        "document is sealed (use `chorus agents --policy {}` or `chorus generate --policy "
                        "{} --doc FILE -p QUESTION`)",
                        spec, spec, spec));
    auto eo = ToEngineOptions(*engine);
    if (!eo.ok()) return Fail(eo.status());
    serve->engine = *eo;
    serve->budget_text = engine->pol.budget;
    const Status served = Serve(*serve);
    return served.ok() ? 0 : Fail(served);
  };
}

}  // namespace chorus::cli
