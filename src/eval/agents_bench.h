// Multi-agent decode benchmark (`chorus bench --agents 1,4,8,15`): N agents over one shared
// document, tg new tokens each, decoded in one batch per step; aggregate tokens/s beside llama.cpp's
// shared-sequence batched decode with f16 / q8_0 / q4_0 KV, in one run, each cell against its
// roofline (eval/roofline.h).
#pragma once
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model.h"
#include "ops/machine_probe.h"  // MachineLimits
#include "util/status.h"

namespace chorus::eval {

struct AgentsBenchConfig {
  std::string model, python = "python3";  // model: the path the engine and the peer open
  std::string doc;                        // the shared document's text (already cut to doc_tokens)
  std::vector<size_t> agents;             // agent counts, one round each
  size_t doc_tokens = 4096;
  std::vector<std::string> kv{"q8/tq3", "f16/f16"};         // uniform K/V format pairs
  std::vector<std::string> peer_kv{"f16", "q8_0", "q4_0"};  // llama.cpp's KV types (empty: no peer)
  int threads = 2, tg = 128, reps = 3;  // reps: rounds per chorus config (a fresh engine and prefill each)
                                        // and llama-batched-bench runs per peer variant
  std::string window;                   // EngineOptions::kv_window; empty = the engine's default
  std::FILE* table = stdout;            // the text tables, written when the run is done
  std::FILE* log = stderr;              // a line per round and peer run as it finishes
};

struct AgentsBenchReport {
  size_t doc_tokens = 0;
  int tg = 0, threads = 0;
  double load_average_before = 0, load_average_after = 0;
  MachineLimits machine;
  // Per K/V: {"prefill_seconds", "prefill_spread": [min, max], "rounds", "shared_bytes"}.
  nlohmann::json chorus = nlohmann::json::object();
  // Per agent count: {"chorus": {K/V: {decode_tokens_per_s, spread, peak_kv_bytes, mean_kv_bytes,
  // roofline}}, "llama_cpp": {column: decode_tokens_per_s}}.
  nlohmann::json rows = nlohmann::json::object();
  nlohmann::json llama_cpp_raw = nlohmann::json::object();    // per peer column: its script's JSON
  nlohmann::json llama_cpp_error = nlohmann::json::object();  // per KV type: why its run failed
  std::string llama_cpp_note;  // non-empty: the best-variant search was unavailable, and why
};

// `model`: the opened model (for the roofline's weight bytes and shapes; the engine opens its own).
Result<AgentsBenchReport> RunAgentsBench(const Model& model, const AgentsBenchConfig& config);
nlohmann::json ToJson(const AgentsBenchReport& report);  // kind "agents"

}  // namespace chorus::eval
