// KvRecord: what the chunks of `chorus eval ppl|kld` were stored in under a KV policy, for the
// report printed after the run. Each chunk is one sequence scored through an Engine opened with the
// policy (research::ScoreSequence); the record keeps what the engine measured of it (bytes, the
// formats of its blocks, the Cocktails' chunk maps and relevance) and the allocator's timing.
// Invariants: Add is called once per chunk, in order, with that chunk's SequenceKv; the engine
// outlives the record.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "chorus/engine.h"     // Engine, EngineOptions
#include "chorus/kv_policy.h"  // KvPolicy
#include "chorus/research.h"   // research::SequenceKv

namespace chorus::eval {

// What an evaluated chunk's KV is stored under: the policy and the settings that go with it.
struct KvOptions {
  KvPolicy policy;             // uniform formats, the allocator (comix, cocktail) or cocktail-paper
  size_t budget_bytes = 0;     // the allocator's byte budget (0 = its average bits)
  std::string encoder;         // the Cocktails' sentence encoder ("" = installed MiniLM, else the fallback)
  std::string query;           // the Cocktails' question
  size_t sink_blocks = 1;      // leading 32-token blocks kept f16 (a uniform spec's :sN wins)
  std::string window = "f16";  // rows of the newest < 32 tokens: f16 or q8
};

// The engine settings of an evaluation under `kv`: positions per sequence `ctx`, the byte budget
// for the allocator only (a uniform policy has none).
EngineOptions EvalEngineOptions(const KvOptions& kv, const std::string& model_path, int threads, size_t ctx);

// Bits per stored K/V element of `bytes` for `tokens` tokens (16 = an fp16 KV's).
double BitsPerElement(const Engine& engine, size_t bytes, size_t tokens);

class KvRecord {
 public:
  KvRecord(const KvOptions& kv, const Engine& engine) : kv_(kv), engine_(&engine) {}

  void Add(const research::SequenceKv& chunk, size_t tokens);  // a chunk of `tokens` tokens
  bool has_policy() const { return !kv_.policy.is_uniform(); }
  size_t last_bytes() const { return last_.total_bytes; }
  const research::SequenceKv& last() const { return last_; }  // the latest chunk's
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

  bool allocator() const { return kv_.policy.allocator() != nullptr; }
  bool paper() const { return kv_.policy.kind() == KvPolicyKind::kCocktailPaper; }
  bool relevance() const { return kv_.policy.kind() == KvPolicyKind::kRelevance; }
  KvPolicy::CocktailPaper Paper() const;  // the paper's thresholds (defaults under another policy)

  KvOptions kv_;
  const Engine* engine_;
  std::string encoder_;  // the Cocktails: the encoder that ran
  size_t n_layer_ = 0, chunks_ = 0;
  research::SequenceKv last_;
  size_t peak_bytes_ = 0, total_bytes_ = 0;
  std::vector<CocktailChunk> cocktail_chunks_;
  std::map<std::string, size_t> k_formats_, v_formats_;  // the allocator: sealed blocks per format, all chunks
  std::vector<ComixChunk> comix_chunks_;
};

}  // namespace chorus::eval
