// research.h: scoring one sequence through the engine's KV stack and policy, and measuring what
// its blocks were stored in.
#include "chorus/research.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/cocktail_plan.h"    // PlanCocktail, OpenCocktailEncoder, BlockRelevance
#include "engine/engine_impl.h"      // Engine::Impl, research::Access
#include "kv/kv_footprint.h"         // KvFootprint
#include "policy/cocktail_policy.h"  // CocktailPolicy, ChunkMapString

namespace chorus {

Result<research::SequenceKv> Engine::Impl::ScoreSequence(std::span<const int32_t> tokens,
                                                         const research::SequenceOptions& options) {
  EngineCore& m = *core_;
  const ModelConfig& c = m.model->config();
  const size_t V = c.n_vocab;
  for (int32_t t : tokens)
    if (t < 0 || static_cast<size_t>(t) >= V) return Status::Error("token id {} outside the vocabulary", t);
  if (tokens.size() < 2) return Status::Error("the sequence to score needs at least 2 tokens, got {}", tokens.size());
  if (tokens.size() > m.n_ctx)
    return Status::Error("the sequence ({} tokens) exceeds the context of {}", tokens.size(), m.n_ctx);
  const KvPolicy& policy = m.options.policy;
  const size_t sink = m.shared_cfg.sink_blocks;
  research::SequenceKv out;
  std::shared_ptr<CocktailPolicy> map;  // cocktail-paper
  std::vector<float> relevance;         // cocktail: per 32-token block
  if (policy.needs_questions()) {
    if (options.query.find_first_not_of(" \t\r\n") == std::string::npos)
      return Status::Error("policy {} needs a question (SequenceOptions::query)", FormatSpec(policy));
    if (!m.encoder) {  // first use: the installed sentence encoder, else the model's own hidden states
      CHORUS_ASSIGN_OR_RETURN(
          m.encoder, OpenCocktailEncoder(m.options.encoder_path, m.options.model_path, *m.model, *m.fwd, *m.pool));
    }
    const auto* paper = std::get_if<KvPolicy::CocktailPaper>(&policy.rule);
    const KvPolicy::CocktailPaper p = paper ? *paper : KvPolicy::CocktailPaper{};
    const CocktailOptions co{.alpha = p.alpha, .beta = p.beta, .chunk_tokens = policy.chunk_tokens()};
    auto plan = PlanCocktail(m.model->tokenizer(), tokens, {options.query}, *m.encoder, co);
    if (!plan.ok()) return plan.status().Context(paper ? "cocktail plan" : "cocktail relevance");
    out.encoder = plan->encoder;
    out.s_min = plan->thresholds.s_min, out.s_max = plan->thresholds.s_max;
    out.t_low = plan->thresholds.t_low, out.t_high = plan->thresholds.t_high;
    out.search_seconds = plan->search_seconds;
    if (paper) {
      out.blocks = ChunkMapString(plan->blocks, sink);
      map = std::make_shared<CocktailPolicy>(std::move(plan->blocks), sink);
    } else {
      relevance = BlockRelevance(plan->similarity, co.chunk_tokens, tokens.size());
      out.blocks = RelevanceLevels(relevance, sink);
    }
  }
  if (!m.comix) {  // comix admits the sequence as a unit below
    const size_t need = m.BlockBytes(0, tokens.size() / kBlockTokens, tokens.size() / kBlockTokens, map != nullptr) +
                        KvFootprint(m.store->options()).Sequence(tokens.size(), std::min<size_t>(512, tokens.size()));
    if (std::string why; !scheduler_.MakeRoom(need, &why))
      return Status::Error("scoring {} tokens needs up to {} bytes of KV, but {}", tokens.size(), need, why);
  }
  std::unique_ptr<KvSequence> seq = m.store->NewSequence(tokens.size(), {});
  PolicyLease lease(m.policy.get(), m.comix.get(), seq->id());  // declared after seq: ends first
  if (map)
    lease.SetCocktail(std::move(map), /*whole=*/true);
  else if (!m.comix)
    lease.SetSharedBlocks(SIZE_MAX);  // stored as a prompt is
  if (m.comix) CHORUS_RETURN_IF_ERROR(lease.AddUnit(tokens.size(), 0, 1.0, options.label, relevance));
  // One call: the forward pass splits it into the engine's micro-batches.
  std::vector<float>& logits = score_logits_;
  logits.resize(tokens.size() * V);
  CHORUS_RETURN_IF_ERROR(m.fwd->Run(tokens, *seq, *m.pool, LogitsFor::kAll, logits.data()));
  m.counters.prefilled_tokens += tokens.size();
  const KvUsage usage = m.store->Usage();
  out.total_bytes = usage.total();
  out.sealed_blocks = usage.blocks, out.block_bytes = usage.block_bytes;
  out.window_bytes = usage.window_bytes, out.table_bytes = usage.table_bytes;
  const BlockPool& pool = m.store->pool();
  out.k_formats.resize(c.n_layer), out.v_formats.resize(c.n_layer);
  for (size_t l = 0; l < c.n_layer; ++l)
    for (BlockId id : seq->blocks(l)) {
      out.k_formats[l].emplace_back(KvFormatName(pool.meta(id).k_format));
      out.v_formats[l].emplace_back(KvFormatName(pool.meta(id).v_format));
    }
  if (options.on_logits)
    for (size_t j = 0; j < tokens.size(); ++j) options.on_logits(j, std::span<const float>(logits.data() + j * V, V));
  return out;
}

namespace research {

Result<std::unique_ptr<Engine>> Open(const EngineOptions& options, const OpenOptions& research) {
  return Access::Open(options, research);
}

Result<SequenceKv> ScoreSequence(Engine& engine, std::span<const int32_t> tokens, const SequenceOptions& options) {
  return Access::impl(engine).ScoreSequence(tokens, options);
}

}  // namespace research
}  // namespace chorus
