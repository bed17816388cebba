// `chorus eval polykv`: the PolyKV paper's protocol on the engine — a document cut from a text, 70 %
// of it in a shared compressed pool, the perplexity of the remaining 30 % given the pool, and N
// agents answering greedily after it; measured KV bytes against fp16 copies per agent, answers
// against the f16 run's (token F1, identical).
// Invariant: a report holds one document per size, each with one row per config and agent count.
#pragma once
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/status.h"

namespace chorus::eval {

struct PolykvConfig {
  std::string model_path, text_path;
  std::vector<size_t> doc_tokens{600, 1900, 5000};
  std::vector<size_t> agents{1, 3, 5, 10, 15};
  // Shared K/V formats; "polykv-paper/tq3" also gives the agents the paper's own formats and no sink.
  std::vector<std::string> configs{"polykv-paper/tq3", "q8/tq3", "tq4/tq3", "tq4/tq2"};
  std::string private_kv = "q8/q8";  // the agents' own K/V formats
  std::string window;                // EngineOptions::kv_window; empty = the engine's default
  int max_tokens = 32, threads = 1;
  std::FILE* log = nullptr;  // non-null: a line as each run starts
};

struct PolykvAgents {
  size_t n = 0;
  double mean_answer_tokens = 0;
  size_t kv_bytes = 0, fp16_copies_bytes = 0;  // peak total KV; fp16 copies of everything per agent
  double reduction_pct = 0, answer_f1 = 0;
  size_t answers_identical = 0;
};
struct PolykvRow {
  std::string config;
  double ppl = 0, ppl_delta_pct = 0;
  size_t shared_bytes = 0;
  std::vector<PolykvAgents> agents;
};
struct PolykvDocument {
  size_t doc_tokens = 0, pool_tokens = 0;
  double base_ppl = 0;
  std::vector<PolykvRow> configs;
};
struct PolykvReport {
  int max_tokens = 0, threads = 0;
  std::string private_kv, window;
  std::vector<PolykvDocument> documents;
};

Result<PolykvReport> RunPolykv(const PolykvConfig& config);
nlohmann::json ToJson(const PolykvReport& report);  // kind "polykv"
void PrintTable(const PolykvReport& report, std::FILE* out);

// Token-level F1 between two answers (bags of token ids).
double TokenF1(const std::vector<int32_t>& a, const std::vector<int32_t>& b);

}  // namespace chorus::eval
