// EvalKv: the KV of the perplexity and KLD harnesses (`chorus eval ppl|kld`) — one fresh sequence
// per evaluated chunk, beside the engine's KV stack, under uniform formats (exactly MakeKvRuntime), CoMix (one unit per
// chunk, registered while it is evaluated; --kv-budget or --kv-avg-bits), Cocktail (the same CoMix
// unit, each 32-token block's error weighted by its chunk's similarity to --query: PlanCocktail's
// encoder and cosine) or Cocktail-paper (each chunk is the document: its 32-token blocks get
// f16/kivi4/kivi2 from PlanCocktail on the chunk's tokens and --query, the engine's planning code and
// encoder choice). Records what each chunk was stored in
// (measured bytes, chunk maps, allocations) for the report printed after the run.
// Invariants: at most one sequence is live at a time (Begin → forward → End); a chunk refused by
// CoMix admission is an error naming the budget, never an out-of-memory.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdio>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chorus/kv_policy.h"
#include "encoder/text_encoder.h"  // TextEncoder
#include "engine/kv_config.h"      // KvConfig, KvRuntime
#include "kv/kv_store.h"           // KvStore, KvSequence, KvUsage
#include "model/forward.h"         // ForwardPass
#include "model/model.h"           // Model
#include "policy/comix_policy.h"   // ComixPolicy

namespace chorus::eval {

// What an evaluated chunk's KV is stored under: the policy and the settings that go with it.
struct EvalKvOptions {
  KvPolicy policy;             // uniform formats, the allocator (comix, cocktail) or cocktail-paper
  size_t budget_bytes = 0;     // the allocator's byte budget (0 = its average bits)
  std::string encoder;         // the Cocktails' sentence encoder ("" = installed MiniLM, else the fallback)
  std::string query;           // the Cocktails' question
  size_t sink_blocks = 1;      // leading 32-token blocks kept f16 (a uniform spec's :sN wins)
  std::string window = "f16";  // rows of the newest < 32 tokens: f16 or q8
};

// A uniform policy's formats with the sink (the spec's :sN wins) and window, validated against the
// model (errors list valid formats); another kind of policy is an error naming `what`.
Result<KvConfig> UniformKvConfig(const KvPolicy& policy, size_t sink_blocks, const std::string& window,
                                 const ModelConfig& model, std::string_view what = "this command");

class EvalKv {
 public:
  // options.policy decides (uniform: its formats with the sink and window); fwd/pool run the
  // fallback encoder (cocktail) and must outlive this object.
  static Result<std::unique_ptr<EvalKv>> Open(const EvalKvOptions& options, const Model& model,
                                              const std::string& model_path, ForwardPass& fwd, ThreadPool& pool);
  ~EvalKv();

  // A fresh sequence for one chunk of `tokens` (cocktail: its map is planned now; comix: it is
  // admitted as a unit of capacity tokens.size()). Errors name the chunk.
  Result<std::unique_ptr<KvSequence>> Begin(std::span<const int32_t> tokens);
  // After the chunk's forward pass, while `seq` is still alive: measures and records it.
  void End(const KvSequence& seq);

  bool has_policy() const { return !flags_.policy.is_uniform(); }
  // Tokens per forward micro-batch. CoMix decides a block's bits from the statistics of every
  // layer seen so far; a 512-token pass would seal layer 0's blocks before any later layer is
  // observed (the allocation then follows layer order), so it prefills one block at a time.
  size_t micro_batch() const { return flags_.policy.allocator() ? kBlockTokens : 512; }
  const KvUsage& last_usage() const { return last_usage_; }
  size_t peak_bytes() const { return peak_bytes_; }
  // Mean over the chunks so far of the bytes held at the end of each (a policy's chunks differ).
  size_t mean_bytes() const { return chunks_ ? total_bytes_ / chunks_ : 0; }
  // The policy's spec ("q8/tq3", "comix-tq:3", "cocktail-paper:0.6:0.1:32"), "@BYTESB" after it under
  // a byte budget.
  std::string Name() const;
  // The policy report (chunk maps or allocation, formats sealed, measured bytes and bits/element).
  void PrintReport(std::FILE* out, size_t chunk_tokens) const;
  nlohmann::json ReportJson(size_t chunk_tokens) const;

 private:
  struct CocktailChunk {
    std::string map;
    size_t sink = 0, fp16 = 0, int4 = 0, int2 = 0;
    double s_min = 0, s_max = 0, t_low = 0, t_high = 0, search_seconds = 0;
    size_t bytes = 0;
  };
  struct ComixChunk {
    std::string k_bits, v_bits;  // one digit per layer (F: f16 sink only)
    std::string relevance;       // cocktail: per block, relevance level 0..8 (S: sink)
    std::string v_blocks;        // cocktail: per block, the value bits of the middle layer
    size_t bytes = 0;
  };
  class Slot;  // the PrecisionPolicy the store sees: forwards to the current chunk's Cocktail map

  EvalKv() = default;
  std::string BitsLine(const KvSequence& seq, bool v) const;
  KvPolicy::CocktailPaper Paper() const;  // the paper's thresholds (defaults under another policy)

  EvalKvOptions flags_;
  const Model* model_ = nullptr;
  size_t sink_blocks_ = 1;
  KvRuntime uniform_;                     // uniform formats
  std::unique_ptr<ComixPolicy> comix_;    // comix
  std::unique_ptr<Slot> slot_;            // cocktail-paper
  std::unique_ptr<TextEncoder> encoder_;  // cocktail, cocktail-paper
  std::string relevance_;                 // cocktail: the live chunk's relevance levels
  std::unique_ptr<KvStore> store_;        // comix / cocktail
  uint64_t unit_ = 0;                     // comix: the live chunk's sequence id
  size_t chunks_ = 0;
  KvUsage last_usage_;
  size_t peak_bytes_ = 0, total_bytes_ = 0;
  std::vector<CocktailChunk> cocktail_chunks_;
  std::map<std::string, size_t> k_formats_, v_formats_;  // comix: sealed blocks per format, all chunks
  std::vector<ComixChunk> comix_chunks_;
};

}  // namespace chorus::eval
