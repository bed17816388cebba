// Cocktail decision rules and per-block policy (see cocktail_policy.h).
#include "policy/cocktail_policy.h"

#include <algorithm>
#include <cmath>

namespace chorus {

Status ValidateCocktailParams(double alpha, double beta) {
  if (!(alpha >= 0 && alpha <= 1)) return Status::Error("cocktail alpha must be in [0, 1], got {}", alpha);
  if (!(beta >= 0 && beta <= 1)) return Status::Error("cocktail beta must be in [0, 1], got {}", beta);
  if (alpha + beta > 1)
    return Status::Error("cocktail alpha + beta must be <= 1 (else T_low > T_high), got {} + {} = {}", alpha, beta,
                         alpha + beta);
  return Status::Ok();
}

Result<CocktailThresholds> ComputeThresholds(std::span<const float> scores, double alpha, double beta) {
  CHORUS_RETURN_IF_ERROR(ValidateCocktailParams(alpha, beta));
  if (scores.empty()) return Status::Error("cocktail: no chunk scores (empty context)");
  CocktailThresholds t{.s_min = INFINITY, .s_max = -INFINITY};
  for (size_t i = 0; i < scores.size(); ++i) {
    if (std::isnan(scores[i])) return Status::Error("cocktail: chunk {} has a NaN similarity", i);
    t.s_min = std::min<double>(t.s_min, scores[i]);
    t.s_max = std::max<double>(t.s_max, scores[i]);
  }
  const double spread = t.s_max - t.s_min;
  t.t_low = t.s_min + alpha * spread;
  t.t_high = t.s_max - beta * spread;
  return t;
}

Result<std::vector<ChunkPrecision>> AssignPrecision(std::span<const float> scores, double alpha, double beta) {
  CHORUS_ASSIGN_OR_RETURN(const CocktailThresholds t, ComputeThresholds(scores, alpha, beta));
  std::vector<ChunkPrecision> out(scores.size());
  for (size_t i = 0; i < scores.size(); ++i) {
    const double s = scores[i];
    out[i] = s > t.t_high ? ChunkPrecision::kFp16 : s > t.t_low ? ChunkPrecision::kInt4 : ChunkPrecision::kInt2;
  }
  return out;
}

std::vector<ChunkPrecision> ChunksToBlocks(std::span<const ChunkPrecision> chunks, size_t chunk_tokens,
                                           size_t n_tokens) {
  const size_t n_blocks = (n_tokens + kBlockTokens - 1) / kBlockTokens;
  std::vector<ChunkPrecision> blocks(n_blocks, ChunkPrecision::kInt2);
  std::vector<bool> seen(n_blocks, false);
  for (size_t c = 0; c < chunks.size() && chunk_tokens > 0; ++c) {
    const size_t t0 = c * chunk_tokens, t1 = std::min(n_tokens, t0 + chunk_tokens);
    if (t0 >= t1) break;
    for (size_t b = t0 / kBlockTokens; b <= (t1 - 1) / kBlockTokens; ++b) {
      blocks[b] = seen[b] ? std::max(blocks[b], chunks[c]) : chunks[c];
      seen[b] = true;
    }
  }
  return blocks;
}

std::vector<ChunkPrecision> MaxPrecision(const std::vector<std::vector<ChunkPrecision>>& per_query) {
  std::vector<ChunkPrecision> out;
  for (const auto& p : per_query) {
    if (out.empty()) out = p;
    for (size_t i = 0; i < std::min(out.size(), p.size()); ++i) out[i] = std::max(out[i], p[i]);
  }
  return out;
}

std::vector<float> MaxOverQueries(const std::vector<std::vector<float>>& scores_per_query) {
  std::vector<float> out;
  for (const auto& s : scores_per_query) {
    if (out.empty()) out = s;
    for (size_t i = 0; i < std::min(out.size(), s.size()); ++i) out[i] = std::max(out[i], s[i]);
  }
  return out;
}

BlockFormats FormatsOf(ChunkPrecision p) {
  BlockFormats f;  // f16/f16
  if (p == ChunkPrecision::kInt4) f.k = f.v = KvFormat::kKivi4;
  if (p == ChunkPrecision::kInt2) f.k = f.v = KvFormat::kKivi2;
  return f;
}

const char* ChunkPrecisionName(ChunkPrecision p) {
  return p == ChunkPrecision::kFp16 ? "fp16" : p == ChunkPrecision::kInt4 ? "int4" : "int2";
}

std::string ChunkMapString(std::span<const ChunkPrecision> blocks, size_t sink_blocks) {
  std::string s;
  for (size_t i = 0; i < blocks.size(); ++i)
    s += i < sink_blocks ? 'S' : blocks[i] == ChunkPrecision::kFp16 ? 'F' : blocks[i] == ChunkPrecision::kInt4 ? '4' : '2';
  return s;
}

BlockFormats CocktailPolicy::FormatFor(const BlockInfo& info) {
  if (info.block_index < sink_blocks_) return BlockFormats{};
  if (info.block_index >= map_.size()) {
    ++beyond_map_;
    return FormatsOf(ChunkPrecision::kInt4);
  }
  return FormatsOf(map_[info.block_index]);
}

}  // namespace chorus
