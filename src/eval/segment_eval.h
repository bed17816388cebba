// Segment reuse against a full prefill (METHODS.md §5b): for each repair fraction, how far a
// reader's answer moves when its document comes from another role's prompt at another offset —
// mean KLD of the answer tokens (teacher-forced on the full prefill's greedy answer), greedy
// answers identical, needle answers exact — and its time to first token. Uses the public API only.
// Invariant: every number is measured on the same engine settings, the reference with reuse off.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "chorus/engine.h"  // EngineOptions
#include "chorus/status.h"  // Result

namespace chorus::eval {

inline constexpr int kSegmentReportVersion = 1;

struct SegmentCase {
  std::string document;                // the shared text
  std::vector<std::string> questions;  // asked by each reader
  std::vector<std::string> needles;    // (questions) the answer's expected substring, or "" (no check)
};

struct SegmentEvalConfig {
  EngineOptions engine;                                             // model and KV settings (segments are set per run)
  std::string source_role = "You are an analyst. Answer briefly.";  // the role that computes the document first
  std::vector<std::string> reader_roles = {"You are a critic. Answer in one sentence.",
                                           "You summarize documents for busy readers.",
                                           "You are a lawyer and you answer precisely."};
  std::vector<SegmentCase> cases;
  std::vector<double> repair_fractions = {0.0, 0.05, 0.15, 0.30};
  size_t repair_min_tokens = 16;  // applied at every fraction but 0 (which recomputes nothing extra)
  int max_tokens = 24;
  bool f16_yardstick = true;  // also measure every point against a full prefill with f16 KV
  std::function<void(const std::string& line)> progress = {};
};

struct SegmentEvalPoint {
  double repair = 0;                 // fraction; < 0: the full prefill (the reference itself)
  size_t answers = 0;                // reader questions measured
  double mean_kld = 0, p99_kld = 0;  // per answer token, nats
  double greedy_identical = 0;       // fraction of answers equal to the reference's, token for token
  // The same against a full prefill with f16 KV (the yardstick: the formats' own error shows on
  // the reference's point; 0 without SegmentEvalConfig::f16_yardstick).
  double mean_kld_f16 = 0, greedy_identical_f16 = 0;
  double needle_exact = 0;  // fraction of needle answers holding their expected text
  size_t needles = 0;
  double mean_ttft_ms = 0;     // first question of each (case, reader): its document is not cached exactly
  double reused_fraction = 0;  // reused prompt tokens / prompt tokens
  double repaired_tokens = 0;  // mean per answer
};

struct SegmentEvalReport {
  int version = kSegmentReportVersion;
  std::string model;
  std::vector<SegmentEvalPoint> points;  // the reference (full prefill) first, then one per repair fraction
};

// n_docs cases cut from `corpus` at seeded offsets, each of about `words` words with a needle
// sentence (a seeded number) placed at a seeded depth; questions: the needle's, then general ones.
std::vector<SegmentCase> MakeSegmentCases(const std::string& corpus, size_t n_docs, size_t words, uint64_t seed);

Result<SegmentEvalReport> RunSegmentEval(const SegmentEvalConfig& config);
std::string ToJson(const SegmentEvalReport& report);

}  // namespace chorus::eval
