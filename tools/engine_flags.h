// The flags of a command that opens an Engine (agents, serve): the model, threads, context, the KV
// policy (PolicyFlags), the private formats, the sink and window, segment reuse, and (serve) the
// remote block store, turned into one EngineOptions by ToEngineOptions. Each command registers
// them where its --help lists them and words the help of those whose meaning is its own.
// Invariant: a field left at its default gives EngineOptions' default ("" window and reuse: the
// engine's choice; the store fields: no store).
#pragma once
#include <CLI/CLI.hpp>

#include <string>

#include "chorus/engine.h"       // EngineOptions
#include "tools/common.h"        // DefaultThreads
#include "tools/policy_flags.h"  // PolicyFlags

namespace chorus::cli {

struct EngineFlags {
  std::string model;  // -m
  int threads = DefaultThreads(), ctx = 0;
  PolicyFlags pol;  // --policy, --kv-budget, --comix-sensitivity, --encoder
  std::string private_k = "q8", private_v = "q8";
  size_t sink = 1;
  std::string window;  // --kv-window; "" = the engine's default
  std::string reuse;   // --reuse exact|segments; "" = the engine's default
  double repair = SegmentOptions{}.repair;
  // --kv-store and its companions (AddKvStoreFlags).
  std::string kv_store, kv_store_queue = "64M", kv_store_secret_file;
  std::string kv_store_ca, kv_store_cert, kv_store_key, kv_store_sni;  // rediss://
  int kv_store_timeout_ms = 200;
};

// --kv-private-k, --kv-private-v ("K format of <whose>"), --kv-sink and --kv-window, with their help.
struct EngineKvHelp {
  const char* whose;  // the private blocks: "each agent's own blocks"
  const char* sink;
  std::string window;
};
void AddEngineKvFlags(CLI::App* cmd, EngineFlags& f, const EngineKvHelp& help);

// --kv-store, --kv-store-ca/-cert/-key/-sni, --kv-store-timeout-ms, --kv-store-secret-file and
// --kv-store-queue (serve: share sealed prompt blocks with other replicas through Redis).
void AddKvStoreFlags(CLI::App* cmd, EngineFlags& f);

// The EngineOptions of parsed flags (after CheckPolicyFlags). Errors, in this order: --kv-store-queue
// not a byte size, a --kv-store-secret-file shorter than 16 bytes, an unknown --kv-window.
Result<EngineOptions> ToEngineOptions(const EngineFlags& f);

}  // namespace chorus::cli
