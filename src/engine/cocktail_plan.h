// Cocktail planning (METHODS.md §3 steps 1–4) for one shared context, before it is prefilled: cut
// the tokens into chunks, embed each chunk's text and every query, cosine similarity, thresholds
// per query, the highest precision any query asks for per chunk → one precision per 32-token block. Also opens the encoder named by the user.
// Invariants: blocks.size() == ceil(tokens / 32); similarities are computed on unit vectors.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "encoder/text_encoder.h"     // TextEncoder
#include "model/forward.h"            // ForwardPass (the fallback encoder runs the model)
#include "model/model.h"              // Model
#include "model/tokenizer.h"          // Tokenizer
#include "policy/cocktail_policy.h"   // ChunkPrecision, CocktailThresholds
#include "util/status.h"

namespace chorus {

struct CocktailOptions {
  double alpha = 0.6, beta = 0.1;
  size_t chunk_tokens = 32;  // 16, 32 or 64
};
Status ValidateCocktailOptions(const CocktailOptions& o);

struct CocktailPlan {
  std::vector<ChunkPrecision> blocks;  // per 32-token block of the context
  std::vector<float> similarity;       // per chunk: max over queries of cos(chunk, query)
  CocktailThresholds thresholds;       // of the first query
  std::string encoder;                 // TextEncoder::name() of what ran
  double search_seconds = 0;           // embedding + cosine + thresholds
};

Result<CocktailPlan> PlanCocktail(const Tokenizer& tok, std::span<const int32_t> tokens,
                                  const std::vector<std::string>& queries, TextEncoder& encoder,
                                  const CocktailOptions& options);

// chorus's Cocktail (the allocator with relevance): one relevance per 32-token block of an
// n_tokens context — the highest similarity of the chunks (of chunk_tokens) that overlap it — and
// its picture, one char per block: 'S' for the sink blocks, else the level 0..8 of its min–max
// scaled relevance over the non-sink blocks.
std::vector<float> BlockRelevance(std::span<const float> chunk_similarity, size_t chunk_tokens, size_t n_tokens);
std::string RelevanceLevels(std::span<const float> block_relevance, size_t sink_blocks);

// The user's --encoder PATH: the all-MiniLM-L6-v2 encoder (src/encoder/). Empty path → nullptr.
// A path that is missing, or not a supported encoder, → an error naming it.
Result<std::unique_ptr<TextEncoder>> OpenTextEncoder(const std::string& path);
// The encoder installed next to the model by scripts/fetch_encoder.sh (<model dir>/all-MiniLM-L6-v2),
// or "" when there is none (then the model's own mean-pooled hidden states are the fallback).
std::string DefaultEncoderPath(const std::string& model_path);
// The encoder Cocktail runs for an EngineOptions::encoder_path value: a directory → that encoder (a
// missing path is an error naming it); "" → DefaultEncoderPath's if installed, else the fallback;
// "hidden-states" (kHiddenStateEncoder) → the fallback, the model's own mean-pooled hidden states
// (model, fwd and pool must then outlive the encoder). Used by Engine::ShareFor and `chorus eval`.
Result<std::unique_ptr<TextEncoder>> OpenCocktailEncoder(const std::string& encoder_path, const std::string& model_path,
                                                         const Model& model, ForwardPass& fwd, ThreadPool& pool);

}  // namespace chorus
