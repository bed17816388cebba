// `chorus generate --policy comix|cocktail|cocktail-paper`: one agent of the Engine. comix: the
// agent (and the document's context, if given) are units under the budget / average bits. cocktail:
// the same allocator and bytes; the document (required) is shared with Engine::ShareFor and the
// question (required) as its query, each block's error weighted by its chunk's relevance.
// cocktail-paper: the document's chunk map chosen by the question (sealed, reordered by precision),
// the question and answer at f16. Reports the answer, the allocation in force and the measured KV
// bytes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "chorus/engine.h"     // Engine, ChunkMapReport
#include "chorus/kv_policy.h"  // KvPolicy
#include "model/sampler.h"     // SamplingOptions
#include "util/status.h"

namespace chorus::eval {

struct PolicyGenerateConfig {
  std::string model;
  KvPolicy policy;          // not uniform (uniform formats go through `chorus generate`'s own loop)
  size_t budget_bytes = 0;  // EngineOptions::kv_budget_bytes (0: the policy's average bits)
  std::string encoder;      // EngineOptions::encoder_path
  size_t sink_blocks = 1;
  std::string question;                      // the prompt (-p / -f); with a document, the question about it
  std::string doc;                           // the document's text (empty: none); its file is read by the caller
  std::string system;                        // with chat: the system turn
  bool chat = false;                         // the question as a chat user turn (not with a document)
  int n_predict = 64, threads = 2, ctx = 0;  // ctx: EngineOptions::n_ctx (0: the engine's default)
  SamplingOptions sampling;                  // its seed as given (the caller draws a random one)
  // Called with each new piece of the answer as it is decoded (may be empty).
  std::function<void(std::string_view)> on_text;
  // Called once the document is shared, with its chunk map (cocktail, cocktail-paper; may be empty).
  std::function<void(const Engine&, const ChunkMapReport&, size_t shared_bytes, size_t doc_tokens)> on_chunk_map;
};

struct PolicyGenerateReport {
  std::string text, policy_kind, policy_spec, policy_desc, stop, allocation;
  size_t doc_tokens = 0, prompt_tokens = 0, generated_tokens = 0;
  double prefill_seconds = 0, decode_tokens_per_s = 0;
  int threads = 0;
  uint64_t seed = 0;
  size_t kv_peak_bytes = 0, kv_shared_bytes = 0, kv_private_peak_bytes = 0, fp16_bytes = 0, budget_bytes = 0;
  double kv_bits_per_element = 0;
  nlohmann::json chunk_map;  // ChunkMapJson of the document's map, null without one
};

Result<PolicyGenerateReport> RunPolicyGenerate(const PolicyGenerateConfig& config);
nlohmann::json ToJson(const PolicyGenerateReport& report);  // kind "generate"
// The allocation in force and the one-line summary of tokens, speed and KV bytes.
void PrintSummary(const PolicyGenerateReport& report, std::FILE* out);

}  // namespace chorus::eval
