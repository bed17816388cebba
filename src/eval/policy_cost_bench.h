// `chorus bench --policy-cost`: what a KV policy costs (issue 19 item 4). One shared document of
// --doc-tokens tokens and one question, per config: the relevance search (cocktail: the chunks' and
// the question's embeddings and their cosines) per 1K document tokens, the allocator's
// reallocations, the sealing of the document's blocks (formats chosen + encoded), the document's
// prefill, and one agent decoding after it (depth = document + question) in tok/s. Every config's
// engine stays open and the decode reps run interleaved across configs (A/B under the same load).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include <cstddef>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "util/status.h"

namespace chorus::eval {

struct PolicyCostConfig {
  std::string model;
  std::string doc;                            // the document's text (already cut to about doc_tokens)
  std::string question;                       // the agent's question (cocktail: the query)
  std::pair<std::string, std::string> frame;  // ChatFrame: document + question form one user turn
  // "f16", "kivi4" (= kivi4/kivi4), "K/V", "comix-FAMILY:AVG[:tTIERS][:kB]",
  // "cocktail-FAMILY:AVG[:tTIERS][:kB]" (the engine's policies; eval comix's :bound/:cal/:joint/
  // :budget are refused: the engine has no such options)
  std::vector<std::string> configs;
  std::string encoder;  // cocktail: EngineOptions::encoder_path ("" = installed MiniLM, else the fallback)
  int threads = 2, tg = 64, reps = 3;
  size_t n_ctx = 8192;       // positions per agent (EngineOptions::n_ctx)
  std::FILE* log = nullptr;  // non-null: a line as each document and decode rep starts
};

struct PolicyCostRow {
  std::string config, policy, encoder;
  size_t doc_tokens = 0, decode_depth = 0, doc_bytes = 0;
  double doc_bytes_over_f16 = 0, share_seconds = 0, search_seconds = 0, search_seconds_per_1k = 0;
  double prefill_seconds = 0, prefill_seconds_per_1k = 0;
  size_t doc_sealed_blocks = 0;
  double doc_seal_seconds = 0, doc_seal_seconds_per_1k = 0;
  size_t doc_reallocations = 0;
  double doc_alloc_seconds = 0, doc_alloc_max_us = 0;
  size_t reallocations = 0;
  double alloc_seconds = 0, alloc_mean_us = 0, alloc_max_us = 0;
  size_t decode_sealed_blocks = 0;
  double decode_seal_seconds = 0, decode_tokens_per_s = 0;  // the median of the reps
  std::vector<double> decode_tokens_per_s_reps;
};

struct PolicyCostReport {
  std::string model, question;
  int threads = 0, tg = 0, reps = 0;
  double load_average_before = 0, load_average_after = 0;  // getloadavg's 1-minute figure, -1 unknown
  std::vector<PolicyCostRow> configs;
};

Result<PolicyCostReport> RunPolicyCost(const PolicyCostConfig& config);
nlohmann::json ToJson(const PolicyCostReport& report);  // kind "policy_cost"
void PrintTable(const PolicyCostReport& report, std::FILE* out);

}  // namespace chorus::eval
