// Cocktail planning: chunk texts, similarities, thresholds, block map (see cocktail_plan.h).
#include "engine/cocktail_plan.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "chorus/engine.h"             // kHiddenStateEncoder
#include "encoder/minilm_encoder.h"  // OpenMiniLmEncoder
#include "engine/hidden_state_encoder.h"  // HiddenStateEncoder
#include "util/timer.h"

namespace chorus {

Status ValidateCocktailOptions(const CocktailOptions& o) {
  CHORUS_RETURN_IF_ERROR(ValidateCocktailParams(o.alpha, o.beta));
  if (o.chunk_tokens != 16 && o.chunk_tokens != 32 && o.chunk_tokens != 64)
    return Status::Error("cocktail chunk size must be 16, 32 or 64 tokens, got {}", o.chunk_tokens);
  return Status::Ok();
}

Result<CocktailPlan> PlanCocktail(const Tokenizer& tok, std::span<const int32_t> tokens,
                                  const std::vector<std::string>& queries, TextEncoder& encoder,
                                  const CocktailOptions& options) {
  CHORUS_RETURN_IF_ERROR(ValidateCocktailOptions(options));
  if (tokens.empty()) return Status::Error("cocktail: the context is empty");
  if (queries.empty()) return Status::Error("cocktail needs at least one query (the question after the context)");
  Timer timer;
  std::vector<std::string> chunks;
  for (size_t t0 = 0; t0 < tokens.size(); t0 += options.chunk_tokens) {
    const size_t n = std::min(options.chunk_tokens, tokens.size() - t0);
    chunks.push_back(tok.Decode(tokens.subspan(t0, n)));
    // A chunk of only special tokens decodes to nothing the encoder can read; give it a space
    // (it then scores like any content-free chunk).
    if (chunks.back().find_first_not_of(" \t\r\n") == std::string::npos) chunks.back() = " ";
  }
  CHORUS_ASSIGN_OR_RETURN(auto chunk_emb, encoder.EmbedMany(chunks));
  CHORUS_ASSIGN_OR_RETURN(auto query_emb, encoder.EmbedMany(queries));
  std::vector<std::vector<float>> per_query;
  for (const auto& q : query_emb) {
    std::vector<float> s(chunk_emb.size());
    for (size_t c = 0; c < chunk_emb.size(); ++c) {
      if (chunk_emb[c].size() != q.size())
        return Status::Error("encoder returned vectors of {} and {} floats", chunk_emb[c].size(), q.size());
      double dot = 0;
      for (size_t i = 0; i < q.size(); ++i) dot += double(q[i]) * chunk_emb[c][i];
      s[c] = static_cast<float>(dot);
    }
    per_query.push_back(std::move(s));
  }
  // Each query decides with its own thresholds; a chunk gets the highest precision any asks for.
  CocktailPlan plan;
  std::vector<std::vector<ChunkPrecision>> decisions;
  for (const auto& s : per_query) {
    CHORUS_ASSIGN_OR_RETURN(auto d, AssignPrecision(s, options.alpha, options.beta));
    decisions.push_back(std::move(d));
  }
  CHORUS_ASSIGN_OR_RETURN(plan.thresholds, ComputeThresholds(per_query[0], options.alpha, options.beta));
  plan.similarity = MaxOverQueries(per_query);
  plan.blocks = ChunksToBlocks(MaxPrecision(decisions), options.chunk_tokens, tokens.size());
  plan.encoder = encoder.name();
  plan.search_seconds = timer.Seconds();
  return plan;
}

Result<std::unique_ptr<TextEncoder>> OpenTextEncoder(const std::string& path) {
  if (path.empty()) return std::unique_ptr<TextEncoder>();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    return Status::Error("--encoder '{}' does not exist (omit --encoder to use the installed all-MiniLM-L6-v2, or "
                         "the model's own hidden states when none is installed)", path);
  return OpenMiniLmEncoder(path);
}

std::string DefaultEncoderPath(const std::string& model_path) {
  std::error_code ec;
  const std::filesystem::path dir =
      std::filesystem::path(model_path).parent_path() / "all-MiniLM-L6-v2";  // where scripts/fetch_encoder.sh puts it
  return std::filesystem::exists(dir / "model.safetensors", ec) ? dir.string() : std::string();
}

Result<std::unique_ptr<TextEncoder>> OpenCocktailEncoder(const std::string& encoder_path, const std::string& model_path,
                                                         const Model& model, ForwardPass& fwd, ThreadPool& pool) {
  const std::string path = encoder_path == kHiddenStateEncoder ? std::string()
                           : encoder_path.empty()              ? DefaultEncoderPath(model_path)
                                                               : encoder_path;
  if (!path.empty()) return OpenTextEncoder(path);
  return std::unique_ptr<TextEncoder>(std::make_unique<HiddenStateEncoder>(model, fwd, pool));
}

std::vector<float> BlockRelevance(std::span<const float> chunk_similarity, size_t chunk_tokens, size_t n_tokens) {
  std::vector<float> relevance((n_tokens + kBlockTokens - 1) / kBlockTokens, -2.0f);  // below any cosine
  for (size_t c = 0; c < chunk_similarity.size(); ++c) {
    const size_t t0 = c * chunk_tokens, t1 = std::min(n_tokens, t0 + chunk_tokens);
    for (size_t b = t0 / kBlockTokens; t0 < t1 && b <= (t1 - 1) / kBlockTokens; ++b)
      relevance[b] = std::max(relevance[b], chunk_similarity[c]);
  }
  return relevance;
}

std::string RelevanceLevels(std::span<const float> r, size_t sink_blocks) {
  std::string s;
  if (r.empty()) return s;
  const auto [lo, hi] = std::minmax_element(r.begin() + std::min(r.size(), sink_blocks), r.end());
  for (size_t b = 0; b < r.size(); ++b)
    s += b < sink_blocks || lo == r.end()
             ? 'S'
             : char('0' + int(std::lround(*hi > *lo ? 8.0 * (r[b] - *lo) / (*hi - *lo) : 0.0)));
  return s;
}

}  // namespace chorus
