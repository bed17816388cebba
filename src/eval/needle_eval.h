// Long-context retrieval (`chorus eval needle`; Cocktail's benchmark, docs/results/cocktail.md and
// allocator.md). Generates needle cases (eval/needle_gen.h) or reads them (JSONL), then for each KV
// config prefills every document as a shared context (uniform formats; the paper's Cocktail or
// chorus's — the allocator with the question's relevance — with the question as the query; CoMix's
// allocator without it), asks the question as an agent (greedy), and scores: exact answer (the code
// appears in the output), agreement with the f16 run's output, the context's measured KV bytes
// against the f16 run's, and the gold answer's teacher-forced likelihood: answer NLL =
// NLL(prompt + answer) − NLL(prompt), both scored as the continuation of the context, with the
// prompt tokenized exactly as the agent's (special tokens parsed) and the answer as " " + the code.
// Invariant: a report holds one NeedleConfigResult per config, each with one NeedleCaseResult per case.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chorus/kv_policy.h"
#include "eval/needle_gen.h"  // NeedleCase, NeedleOptions
#include "util/status.h"

namespace chorus::eval {

struct NeedleConfig {
  std::string model_path;
  // The cases: generated from a corpus file (WikiText-2 test) with `gen`, or read from a JSONL file
  // (one object per line: document, question, answer, lead, optional depth and kind). Exactly one.
  std::string corpus_path, cases_path;
  NeedleOptions gen;
  std::string dump_path;  // non-empty: the cases are written there as JSONL
  struct Run {
    std::string name;  // the spec as given (+ "@shared" with shared_questions)
    KvPolicy policy;   // an allocator's :m rank has its sensitivity table path set
  };
  std::vector<Run> runs;
  std::string encoder;             // the Cocktails' sentence encoder ("" = the engine's default)
  std::string kv_window = "auto";  // EngineOptions::kv_window
  int threads = 1;
  int answer_tokens = 8;    // tokens generated per answer
  bool ignore_eog = false;  // keep decoding past end-of-generation (decode speed runs)
  // Consecutive cases with the same document share one context made for all their questions.
  bool shared_questions = false;
  std::FILE* log = nullptr;  // non-null: one line per case scored (progress during long runs)
};

struct NeedleCaseResult {
  size_t tokens = 0;
  double depth = 0;
  std::string answer, kind, output, map;
  std::string k_bits_mid, v_bits_mid;  // the allocator: bits per block of the middle layer
  size_t context_questions = 1;        // questions the context was made for / read by
  bool correct = false;
  size_t bytes = 0;
  double search_seconds = 0, prefill_seconds = 0, decode_tokens_per_s = 0;
  double answer_nll = 0;  // nats, summed over the answer's tokens
  size_t answer_tokens = 0;
  bool greedy_starts_with_answer_tokens = false;
  size_t fp16_bytes = 0;  // Engine::Fp16Bytes of the tokens (the baseline when no f16 run is there)
};

struct NeedleConfigResult {
  std::string config;
  size_t correct = 0, cases = 0;
  double accuracy = 0, agreement_with_f16 = -1;  // -1: no f16 run
  size_t bytes = 0, tokens = 0;
  double bytes_vs_f16 = 0, bits_per_element = 0;
  double search_seconds_per_1k = 0, prefill_seconds_per_1k = 0, decode_tokens_per_s = 0;
  double mean_answer_nll = 0, mean_p_answer = 0;
  std::vector<NeedleCaseResult> per_case;
};

struct NeedleReport {
  std::vector<NeedleConfigResult> configs;
  int threads = 0;
  uint64_t seed = 0;
};

Result<NeedleReport> RunNeedle(const NeedleConfig& config);

// {"schema", "kind": "needle", "configs": [...], "threads", "seed"}.
nlohmann::json ToJson(const NeedleReport& report);
// One row per config: accuracy, agreement, bytes against f16, answer NLL, speeds.
void PrintTable(const NeedleReport& report, std::FILE* out);

// Cases from a JSONL file (errors name the file and line).
Result<std::vector<NeedleCase>> LoadNeedleCases(const std::string& path);
// Exact answer: an all-digit answer must be the first run of digits of the output (spaces allowed
// between digits); any other answer must begin the output (leading spaces skipped), followed by
// the end or a character that is not a letter or digit.
bool ExactAnswer(const std::string& output, const std::string& answer);

}  // namespace chorus::eval
