// `chorus eval comix`: does CoMix pay? Several agents, each reading its own excerpt of a text, join
// one KV store at staggered steps and decode together (eval/comix_bench.h); every configuration
// (uniform K/V formats, CoMix at an average-bits target) is compared with full fp16 KV on the same
// positions: PPL delta, mean/p99 KLD, top-1 agreement, greedy-answer agreement, measured peak KV
// bytes and decode speed.
// Invariant: a report holds one row per configuration, in the order given.
#pragma once
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/comix_bench.h"  // ComixBenchConfig
#include "util/status.h"

namespace chorus::eval {

struct ComixEvalConfig {
  std::string model_path;
  std::string text;       // what the agents read excerpts of
  std::string text_name;  // the file's name (reports, errors)
  // Agent i reads 2/3, 1, 4/3 of `tokens` in turn (they finish at different times), starting at
  // the i-th of `agents` evenly spaced offsets of the text.
  size_t agents = 6, tokens = 480, prefill = 128, join_every = 32, answer = 16, sink = 1;
  std::vector<ComixBenchConfig> configs;  // ParseComixBenchConfig; :m ones with their table set
  int threads = 1;
  std::string window = "q8";  // window rows of the compressed configs (the f16 base: f16)
  // Non-null: the text table, a row as each configuration finishes (`table`), and each CoMix run's
  // allocation and reallocations (`log`).
  std::FILE* table = nullptr;
  std::FILE* log = nullptr;
};

struct ComixEvalRow {
  std::string config;
  size_t budget_bytes = 0;
  double ppl = 0, ppl_delta_pct = 0, kld_mean = 0, kld_p99 = 0, top1 = 0;
  size_t answers_identical = 0;
  double answer_token_agreement = 0;
  size_t peak_bytes = 0;
  double peak_pct_of_fp16 = 0, bits_per_element_at_peak = 0, decode_tok_s = 0, decode_speed_vs_full = 0;
  size_t reallocs = 0, queued = 0;
  double realloc_mean_us = 0, realloc_max_us = 0;
  std::string heat_map;
  std::vector<std::string> events;
};

struct ComixEvalReport {
  size_t agents = 0, tokens = 0, prefill = 0, join_every = 0, answer_tokens = 0;
  int threads = 0;
  std::string file;
  size_t scored = 0, base_peak_bytes = 0;
  double base_ppl = 0, base_decode_tok_s = 0, seconds = 0;
  std::vector<ComixEvalRow> configs;
};

Result<ComixEvalReport> RunComixEval(const ComixEvalConfig& config);
nlohmann::json ToJson(const ComixEvalReport& report);  // kind "comix"

}  // namespace chorus::eval
