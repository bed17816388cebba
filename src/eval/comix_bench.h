// One configuration of the CoMix benchmark (`chorus eval comix`, eval/comix_eval.h): several
// agents, each reading its own WikiText-2 excerpt, join one KV store at staggered steps and
// advance together in one batched forward per step (teacher-forced over their excerpt, then a
// short greedy answer), under one KV policy:
// full fp16, uniform K/V formats, or CoMix at an average-bits target. Every scored position is
// compared with the full-KV run (PPL, KLD, top-1), answers with the full-KV answers; peak KV bytes
// are measured (KvStore::Usage) after every step.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kv/window_codec.h"  // WindowFormat
#include "model/model.h"
#include "policy/comix_sensitivity.h"  // ComixSensitivity
#include "util/status.h"

namespace chorus::eval {

struct ComixBenchSetup {
  std::vector<std::vector<int32_t>> texts;  // (agents) token ids each agent reads
  size_t prefill = 128;                     // tokens each agent prefills when it joins
  size_t join_every = 32;                   // agent i joins at step i·join_every
  size_t answer_tokens = 16;                // greedy tokens after the excerpt
  size_t sink_blocks = 1;
  int threads = 1;
  WindowFormat window = WindowFormat::kQ8;  // compressed configs; the f16 base keeps f16 rows
};

// "f16", "kivi3" (= kivi3/kivi3), "q8/tq3", "comix-tq:3", "comix-kivi:2.5", "comix-tq:3:bound",
// "comix-tq:3:budget" (fixed budget: the measured peak bytes of the uniform tq3 run),
// "comix-tq:3:joint" (K and V of a (unit, layer) share one bit width); suffixes combine:
// ":cal" (calibrated sensitivity), ":m" (measured sensitivity: the table of `eval sensitivity`),
// ":k4" (keys never below 4 bits), ":t348" (tiers 3, 4, q8).
struct ComixBenchConfig {
  std::string name;
  bool comix = false;
  std::string family;  // comix: tq | kivi
  double avg_bits = 0;
  bool worst_case = false;    // comix-tq:3:bound — rank by the hard bound's terms
  bool joint = false;         // comix-tq:3:joint — one bit width for K and V of a (unit, layer)
  bool fixed_budget = false;  // comix-tq:3:budget — a fixed --kv-budget = the measured peak of uniform tq3
  size_t budget_bytes = 0;    // set by the caller for fixed_budget
  bool calibrated = false;    // :cal
  bool measured = false;      // :m (the caller sets `sensitivity`)
  std::shared_ptr<const ComixSensitivity> sensitivity;
  int min_k_bits = 0;                  // :k4
  std::vector<int> tiers = {2, 3, 4};  // :t348
  std::string k = "f16", v = "f16";
};
Result<ComixBenchConfig> ParseComixBenchConfig(const std::string& spec);

struct ComixBenchResult {
  ComixBenchConfig config;
  double nll = 0;
  size_t scored = 0;
  std::vector<float> kld;  // per scored position (empty for the base)
  size_t top1 = 0;
  std::vector<std::vector<int32_t>> answers;
  size_t peak_bytes = 0;          // measured peak of everything the KV layer holds
  size_t peak_tokens = 0;         // tokens held at that moment
  size_t sealed_block_bytes = 0;  // Σ over the run of bytes of blocks sealed (sink included)
  double decode_seconds = 0;
  size_t decode_tokens = 0;
  size_t reallocs = 0;
  size_t queued = 0;  // comix: agents refused at their join step and started later
  double realloc_mean_us = 0, realloc_max_us = 0;
  std::string heat_map;             // comix: the allocation when 3 agents (or all) are running
  std::vector<std::string> events;  // comix: a few reallocations (first ones and joins/finishes)
  // Filled against the base: log-probs of the base run (agents × positions × vocab) are kept.
};

// Runs one configuration. With `base` (the full-KV run), KLD/top-1 are measured against its
// stored log-probs; without it, this is the base and its log-probs are written to `base_lp`.
Result<ComixBenchResult> RunComixBench(const Model& model, const ComixBenchSetup& setup, const ComixBenchConfig& config,
                                       std::vector<float>* base_lp, bool is_base);

}  // namespace chorus::eval
