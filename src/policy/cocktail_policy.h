// Cocktail (METHODS.md §3, arXiv 2503.23294): per-chunk precision from the relevance of each
// context chunk to the query. This file holds the pure decision rules and the PrecisionPolicy that
// applies a precomputed per-block map; computing the similarities (encoder) happens above (engine).
// Invariants: thresholds and assignment follow METHODS.md §3 exactly —
//   T_low = s_min + α(s_max − s_min), T_high = s_max − β(s_max − s_min),
//   s > T_high → FP16 (f16/f16), T_low < s ≤ T_high → INT4 (kivi4/kivi4), s ≤ T_low → INT2 (kivi2/kivi2);
// α, β ∈ [0, 1] and α + β ≤ 1 (so T_low ≤ T_high), checked. All-equal scores (one chunk included)
// give s_max = s_min = T_low = T_high, so every chunk is INT2: the rule, applied literally.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kv/precision_policy.h"  // PrecisionPolicy, BlockFormats
#include "util/status.h"

namespace chorus {

enum class ChunkPrecision : uint8_t { kInt2 = 0, kInt4 = 1, kFp16 = 2 };  // ordered: max = most precise

// Errors name the offending value: α or β outside [0, 1], α + β > 1, NaN.
Status ValidateCocktailParams(double alpha, double beta);

struct CocktailThresholds {
  double s_min = 0, s_max = 0, t_low = 0, t_high = 0;
};
// Empty scores or a NaN score → error.
Result<CocktailThresholds> ComputeThresholds(std::span<const float> scores, double alpha, double beta);
// One precision per score (same order), by the rules above.
Result<std::vector<ChunkPrecision>> AssignPrecision(std::span<const float> scores, double alpha, double beta);

// Chunks of `chunk_tokens` tokens mapped onto 32-token blocks: a block takes the highest precision
// of the chunks that overlap it (chunk 16: max of its two halves; chunk 64: both blocks share one).
std::vector<ChunkPrecision> ChunksToBlocks(std::span<const ChunkPrecision> chunks, size_t chunk_tokens,
                                           size_t n_tokens);
// Several queries deciding together (a shared context): each query's own decisions, then per chunk
// the highest precision any of them asks for (MaxPrecision); MaxOverQueries gives the per-chunk
// maximum similarity, for reports.
std::vector<ChunkPrecision> MaxPrecision(const std::vector<std::vector<ChunkPrecision>>& per_query);
std::vector<float> MaxOverQueries(const std::vector<std::vector<float>>& scores_per_query);

BlockFormats FormatsOf(ChunkPrecision p);
const char* ChunkPrecisionName(ChunkPrecision p);  // "fp16", "int4", "int2"
// One character per block ('F', '4', '2'), sink blocks shown as 'S'.
std::string ChunkMapString(std::span<const ChunkPrecision> blocks, size_t sink_blocks);

// The policy of one context: block i gets FormatsOf(map[i]); the first `sink_blocks` blocks stay
// f16 whatever the map says; blocks beyond the map (never the case for a context built from its
// own map) get INT2's neighbour INT4 — the conservative middle — and are counted.
class CocktailPolicy : public PrecisionPolicy {
 public:
  CocktailPolicy(std::vector<ChunkPrecision> block_map, size_t sink_blocks)
      : map_(std::move(block_map)), sink_blocks_(sink_blocks) {}
  BlockFormats FormatFor(const BlockInfo& info) override;
  const std::vector<ChunkPrecision>& map() const { return map_; }
  size_t beyond_map() const { return beyond_map_; }

 private:
  std::vector<ChunkPrecision> map_;
  size_t sink_blocks_;
  size_t beyond_map_ = 0;
};

}  // namespace chorus
