// The flags of a command that opens an Engine (see engine_flags.h).
#include "tools/engine_flags.h"

#include <fstream>
#include <iterator>

namespace chorus::cli {

void AddEngineKvFlags(CLI::App* cmd, EngineFlags& f, const EngineKvHelp& help) {
  cmd->add_option("--kv-private-k", f.private_k, std::string("K format of ") + help.whose)->capture_default_str();
  cmd->add_option("--kv-private-v", f.private_v, std::string("V format of ") + help.whose)->capture_default_str();
  cmd->add_option("--kv-sink", f.sink, help.sink)->capture_default_str();
  cmd->add_option("--kv-window", f.window, help.window);
}

void AddKvStoreFlags(CLI::App* cmd, EngineFlags& f) {
  cmd->add_option(
      "--kv-store", f.kv_store,
      "share sealed prompt blocks with other replicas through Redis: "
      "redis[s]://[[USER]:PASSWORD@]HOST[:PORT][/DB] (USER: a Redis ACL user; rediss:// = TLS; docs/SCALE_OUT.md); "
      "unreachable = serve locally and retry");
  cmd->add_option("--kv-store-ca", f.kv_store_ca,
                  "rediss://: PEM CA bundle that must sign the server's certificate (default: the system's "
                  "trust store)");
  cmd->add_option("--kv-store-cert", f.kv_store_cert,
                  "rediss://: PEM client certificate, for a Redis with tls-auth-clients (with --kv-store-key)");
  cmd->add_option("--kv-store-key", f.kv_store_key, "rediss://: PEM private key of --kv-store-cert");
  cmd->add_option("--kv-store-sni", f.kv_store_sni,
                  "rediss://: the name the server's certificate must carry, also sent as SNI (default: the "
                  "URL's host)");
  cmd->add_option("--kv-store-timeout-ms", f.kv_store_timeout_ms,
                  "deadline of one remote fetch; past it the prompt is prefilled here")
      ->check(CLI::Range(1, 60000))
      ->capture_default_str();
  cmd->add_option("--kv-store-secret-file", f.kv_store_secret_file,
                  "a file holding a secret (16+ bytes) every replica shares: each value in Redis carries an "
                  "HMAC-SHA256 under it and a value whose MAC fails is refused and computed here, so a writer "
                  "without the secret cannot forge a block (docs/SECURITY.md)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--kv-store-queue", f.kv_store_queue,
                  "bytes of blocks waiting to be published (beyond: dropped and counted)")
      ->capture_default_str();
}

Result<EngineOptions> ToEngineOptions(const EngineFlags& f) {
  EngineOptions eo{.model_path = f.model,
                   .threads = f.threads,
                   .n_ctx = static_cast<size_t>(f.ctx),
                   .policy = f.pol.policy,
                   .private_k = f.private_k,
                   .private_v = f.private_v,
                   .sink_blocks = f.sink,
                   .kv_budget_bytes = f.pol.budget_bytes,
                   .encoder_path = f.pol.encoder};
  if (!f.reuse.empty()) eo.segments.reuse = f.reuse == "segments" ? Reuse::kSegments : Reuse::kExact;
  eo.segments.repair = f.repair;
  auto queue = ParseBytes(f.kv_store_queue);
  if (!queue.ok()) return queue.status().Context("--kv-store-queue");
  eo.kv_store_url = f.kv_store;
  eo.kv_store_timeout_ms = f.kv_store_timeout_ms;
  eo.kv_store_queue_bytes = *queue;
  eo.kv_store_ca = f.kv_store_ca;
  eo.kv_store_cert = f.kv_store_cert;
  eo.kv_store_key = f.kv_store_key;
  eo.kv_store_sni = f.kv_store_sni;
  if (!f.kv_store_secret_file.empty()) {
    std::ifstream in(f.kv_store_secret_file, std::ios::binary);
    std::string secret((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
    if (!in || secret.size() < 16)
      return Status::Error("--kv-store-secret-file {}: the file must hold a secret of at least 16 bytes, it has {}",
                           f.kv_store_secret_file, secret.size());
    eo.kv_store_secret = std::move(secret);
  }
  if (!f.window.empty()) {
    CHORUS_RETURN_IF_ERROR(CheckEngineWindowFlag(f.window));
    eo.kv_window = f.window;
  }
  return eo;
}

}  // namespace chorus::cli
