// chorus research calls: what evaluation harnesses need from an Engine beyond serving. Each call
// runs one sequence through the engine's own KV stack, model and policy (EngineOptions), so an
// evaluation measures exactly what serving stores.
//
//   auto engine = chorus::research::Open({.model_path = m, .policy = p}, {}).value();
//   auto kv = chorus::research::ScoreSequence(*engine, tokens,
//                 {.on_logits = [&](size_t pos, std::span<const float> row) { ... }}).value();
//
// Invariants: ScoreSequence keeps nothing afterwards (its sequence, policy rules and CoMix unit end
// with the call), so sequences scored one after another are independent; not thread-safe (as
// Engine).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "chorus/engine.h"  // Engine, EngineOptions
#include "chorus/status.h"  // Result

namespace chorus::research {

// Engine settings only measurements use.
struct OpenOptions {
  bool f32_weights = false;  // every quantized matrix dequantized to f32 (a reference for small differences)
  // The allocator under a budget keeps a reserve for requests that join later; a harness that
  // scores one sequence at a time has none (false: the whole budget is the sequence's).
  bool join_reserve = true;
  // An open engine of the same model_path whose (read-only) weights this one shares instead of
  // loading a copy: f32_weights is then that engine's; the weights live as long as either engine.
  const Engine* weights_of = nullptr;
};
Result<std::unique_ptr<Engine>> Open(const EngineOptions& options, const OpenOptions& research);

struct SequenceOptions {
  // The two Cocktails: the question each chunk's relevance is measured against (required).
  std::string query;
  // The allocator: the unit's name in Engine::AllocationReport.
  std::string label = "scored sequence";
  // Called once per position, in order, with the model's raw logit row (n_vocab floats) there.
  std::function<void(size_t position, std::span<const float> logits)> on_logits;
};

// What the sequence's KV was stored in, measured before it was dropped.
struct SequenceKv {
  size_t total_bytes = 0;  // everything the KV layer held at the end (Engine::KvReport total_bytes)
  // Of which: sealed blocks (count, bytes), the sequences' windows and block tables.
  size_t sealed_blocks = 0, block_bytes = 0, window_bytes = 0, table_bytes = 0;
  // Per layer, per block in token order (a sliding-window layer's freed blocks omitted): the K and
  // V format names ("f16", "tq3", "kivi2", ...).
  std::vector<std::vector<std::string>> k_formats, v_formats;
  std::string encoder;  // the two Cocktails: the sentence encoder that ran
  // cocktail-paper: the chunk map (ChunkMapReport::blocks) and the plan's similarity range and
  // thresholds; cocktail: `blocks` is each block's relevance level (S sink, 0..8).
  std::string blocks;
  double s_min = 0, s_max = 0, t_low = 0, t_high = 0, search_seconds = 0;
};

// Prefills `tokens` (at least 2, within the context) as a new sequence from position 0, stored the
// way a prompt is: the shared formats of a uniform policy, one allocator unit of tokens.size()
// (comix; cocktail: its blocks weighted by relevance to options.query), or the chunk map
// PlanCocktail gives the tokens and options.query (cocktail-paper). The forward runs in the
// engine's micro-batches (32 tokens under the allocator, so each block's bits see every layer).
Result<SequenceKv> ScoreSequence(Engine& engine, std::span<const int32_t> tokens, const SequenceOptions& options);

}  // namespace chorus::research
