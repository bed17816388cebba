// EvalKv: uniform / CoMix / Cocktail KV for one evaluated chunk at a time (see eval_kv.h).
#include "eval/eval_kv.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/cocktail_plan.h"      // PlanCocktail, OpenCocktailEncoder
#include "engine/kv_policy_options.h"  // AllocatorComixOptions
#include "engine/model_fingerprint.h"  // ModelFingerprint (the calibrated table)
#include "policy/cocktail_policy.h"    // CocktailPolicy, ChunkMapString

namespace chorus::eval {

class EvalKv::Slot : public PrecisionPolicy {
 public:
  BlockFormats FormatFor(const BlockInfo& info) override { return current->FormatFor(info); }
  std::unique_ptr<CocktailPolicy> current;
};

EvalKv::~EvalKv() = default;

Result<KvConfig> UniformKvConfig(const KvPolicy& policy, size_t sink_blocks, const std::string& window,
                                 const ModelConfig& model, std::string_view what) {
  const auto* u = std::get_if<KvPolicy::Uniform>(&policy.rule);
  if (u == nullptr)
    return Status::Error("{} takes uniform formats (K/V, e.g. q8/tq3), not policy {}", what, FormatSpec(policy));
  auto c = MakeKvConfig(u->k, u->v, model);
  if (!c.ok()) return c.status();
  c->sink_blocks = u->sink_blocks >= 0 ? size_t(u->sink_blocks) : sink_blocks;
  auto w = ParseWindowFormat(window);
  if (!w.ok()) return w.status().Context("--kv-window");
  c->window = *w;
  return c;
}

Result<std::unique_ptr<EvalKv>> EvalKv::Open(const EvalKvOptions& flags, const Model& model,
                                             const std::string& model_path, ForwardPass& fwd, ThreadPool& pool) {
  std::unique_ptr<EvalKv> e(new EvalKv());
  e->flags_ = flags;
  e->model_ = &model;
  const ModelConfig& c = model.config();
  if (flags.policy.is_uniform()) {
    CHORUS_ASSIGN_OR_RETURN(const KvConfig uniform_cfg,
                            UniformKvConfig(flags.policy, flags.sink_blocks, flags.window, c));
    e->sink_blocks_ = uniform_cfg.sink_blocks;
    e->uniform_ = MakeKvRuntime(c, uniform_cfg);
    return e;
  }
  CHORUS_ASSIGN_OR_RETURN(const KvConfig uniform,
                          UniformKvConfig(KvPolicy{}, flags.sink_blocks, flags.window, c));  // sink and window
  e->sink_blocks_ = uniform.sink_blocks;
  KvStoreOptions so{.n_layer = c.n_layer,
                    .shape = {.n_head = c.n_head, .n_head_kv = c.n_head_kv, .head_dim = c.head_dim},
                    .window = uniform.window,
                    .layer_window = c.layer_window,
                    .threads = size_t(pool.size())};
  PrecisionPolicy* policy = nullptr;
  if (flags.policy.allocator()) {
    ComixOptions co = AllocatorComixOptions(flags.policy, c);
    CHORUS_RETURN_IF_ERROR(LoadAllocatorTable(flags.policy, co, model_path, ModelFingerprint(model)));
    co.window = uniform.window, co.threads = size_t(pool.size()), co.prefill_tokens = e->micro_batch();
    co.budget_bytes = flags.budget_bytes, co.sink_blocks = uniform.sink_blocks, co.join_reserve = 0;
    CHORUS_RETURN_IF_ERROR(ComixPolicy::Validate(co));
    e->comix_ = std::make_unique<ComixPolicy>(co);
    so.budget_bytes = flags.budget_bytes;
    policy = e->comix_.get();
    if (flags.policy.kind() == KvPolicyKind::kRelevance) {
      CHORUS_ASSIGN_OR_RETURN(e->encoder_, OpenCocktailEncoder(flags.encoder, model_path, model, fwd, pool));
    }
  } else {
    CHORUS_ASSIGN_OR_RETURN(e->encoder_, OpenCocktailEncoder(flags.encoder, model_path, model, fwd, pool));
    e->slot_ = std::make_unique<Slot>();
    policy = e->slot_.get();
  }
  e->store_ = std::make_unique<KvStore>(so, policy);
  if (e->comix_) e->comix_->SetStore(e->store_.get());
  return e;
}

Result<std::unique_ptr<KvSequence>> EvalKv::Begin(std::span<const int32_t> tokens) {
  const size_t index = chunks_++;
  if (flags_.policy.is_uniform()) return uniform_.store->NewSequence(tokens.size());
  const KvPolicy::CocktailPaper paper = Paper();
  const CocktailOptions co{.alpha = paper.alpha, .beta = paper.beta, .chunk_tokens = flags_.policy.chunk_tokens()};
  if (slot_) {
    auto plan = PlanCocktail(model_->tokenizer(), tokens, {flags_.query}, *encoder_, co);
    if (!plan.ok()) return plan.status().Context(fmt::format("cocktail plan of chunk {}", index + 1));
    CocktailChunk ch{.map = ChunkMapString(plan->blocks, sink_blocks_),
                     .s_min = plan->thresholds.s_min,
                     .s_max = plan->thresholds.s_max,
                     .t_low = plan->thresholds.t_low,
                     .t_high = plan->thresholds.t_high,
                     .search_seconds = plan->search_seconds};
    for (size_t b = 0; b < tokens.size() / kBlockTokens; ++b)  // sealed blocks only
      (ch.map[b] == 'S' ? ch.sink : ch.map[b] == 'F' ? ch.fp16 : ch.map[b] == '4' ? ch.int4 : ch.int2)++;
    cocktail_chunks_.push_back(std::move(ch));
    slot_->current = std::make_unique<CocktailPolicy>(std::move(plan->blocks), sink_blocks_);
    return store_->NewSequence(tokens.size());
  }
  std::vector<float> relevance;  // cocktail: per 32-token block, the highest similarity of its chunks
  relevance_.clear();
  if (encoder_) {
    auto plan = PlanCocktail(model_->tokenizer(), tokens, {flags_.query}, *encoder_, co);
    if (!plan.ok()) return plan.status().Context(fmt::format("cocktail relevance of chunk {}", index + 1));
    relevance = BlockRelevance(plan->similarity, co.chunk_tokens, tokens.size());
    relevance_ = RelevanceLevels(relevance, sink_blocks_);
  }
  auto seq = store_->NewSequence(tokens.size());
  if (Status s = comix_->AddUnit(seq->id(), tokens.size(), 0, 1.0, fmt::format("chunk {}", index + 1), relevance);
      !s.ok())
    return s.Context(fmt::format("chunk {} ({} tokens)", index + 1, tokens.size()));
  unit_ = seq->id();
  return seq;
}

// One character per layer: the bits most of the layer's non-sink blocks were sealed with (F: only
// f16 sink blocks).
std::string EvalKv::BitsLine(const KvSequence& seq, bool v) const {
  std::string out;
  const BlockPool& pool = store_->pool();
  for (size_t l = 0; l < model_->config().n_layer; ++l) {
    std::map<char, size_t> n;
    for (BlockId id : seq.blocks(l)) {
      const std::string_view name = KvFormatName(v ? pool.meta(id).v_format : pool.meta(id).k_format);
      if (name != "f16") ++n[name.back()];
    }
    char best = 'F';
    for (const auto& [bits, count] : n)
      if (best == 'F' || count > n[best]) best = bits;
    out += best;
  }
  return out;
}

void EvalKv::End(const KvSequence& seq) {
  last_usage_ = (store_ ? *store_ : *uniform_.store).Usage();
  peak_bytes_ = std::max(peak_bytes_, last_usage_.total());
  total_bytes_ += last_usage_.total();
  if (slot_ && !cocktail_chunks_.empty()) cocktail_chunks_.back().bytes = last_usage_.total();
  if (comix_ && unit_ != 0) {
    const BlockPool& pool = store_->pool();
    for (size_t l = 0; l < model_->config().n_layer; ++l)
      for (BlockId id : seq.blocks(l)) {
        ++k_formats_[std::string(KvFormatName(pool.meta(id).k_format))];
        ++v_formats_[std::string(KvFormatName(pool.meta(id).v_format))];
      }
    ComixChunk ch{.k_bits = BitsLine(seq, false),
                  .v_bits = BitsLine(seq, true),
                  .relevance = relevance_,
                  .bytes = last_usage_.total()};
    if (encoder_)  // the value bits per block of the middle layer: where the relevance put them
      for (BlockId id : seq.blocks(model_->config().n_layer / 2)) {
        const std::string_view name = KvFormatName(pool.meta(id).v_format);
        ch.v_blocks += name == "f16" ? 'F' : name.back();
      }
    comix_chunks_.push_back(std::move(ch));
    comix_->RemoveUnit(unit_);
    unit_ = 0;
  }
}

std::string EvalKv::Name() const {
  return FormatSpec(flags_.policy) + (comix_ && flags_.budget_bytes ? fmt::format("@{}B", flags_.budget_bytes) : "");
}

KvPolicy::CocktailPaper EvalKv::Paper() const {
  const auto* p = std::get_if<KvPolicy::CocktailPaper>(&flags_.policy.rule);
  return p ? *p : KvPolicy::CocktailPaper{};
}

namespace {
std::string Counts(const std::map<std::string, size_t>& m) {
  std::string s;
  for (const auto& [name, n] : m) s += fmt::format("{}{} {}", s.empty() ? "" : ", ", name, n);
  return s;
}
}  // namespace

void EvalKv::PrintReport(std::FILE* out, size_t chunk_tokens) const {
  const ModelConfig& c = model_->config();
  const size_t n = std::max<size_t>(1, chunks_);
  const double mean = double(total_bytes_) / n;
  if (slot_) {
    std::fprintf(out,
                 "cocktail-paper chunk maps (query \"%s\"; alpha %g, beta %g, %zu-token chunks → 32-token blocks; "
                 "S sink f16, F fp16, 4 int4, 2 int2; encoder: %s):\n",
                 flags_.query.c_str(), Paper().alpha, Paper().beta, flags_.policy.chunk_tokens(),
                 encoder_->name().c_str());
    size_t sink = 0, fp16 = 0, int4 = 0, int2 = 0;
    for (size_t i = 0; i < cocktail_chunks_.size(); ++i) {
      const CocktailChunk& ch = cocktail_chunks_[i];
      sink += ch.sink, fp16 += ch.fp16, int4 += ch.int4, int2 += ch.int2;
      if (i < 16)
        std::fprintf(out, "  chunk %-3zu %s  similarity [%.4f, %.4f] T_low %.4f T_high %.4f  %.2f bits/element\n",
                     i + 1, ch.map.c_str(), ch.s_min, ch.s_max, ch.t_low, ch.t_high,
                     KvBitsPerElement(ch.bytes, chunk_tokens, c));
      else if (i == 16)
        std::fprintf(out, "  ... (%zu more chunks; --json lists them all)\n", cocktail_chunks_.size() - 16);
    }
    std::fprintf(out, "  sealed blocks: %zu sink, %zu fp16, %zu int4, %zu int2\n", sink, fp16, int4, int2);
  } else if (comix_) {
    const KvPolicy::Allocator& alloc = *flags_.policy.allocator();
    const auto* rel = std::get_if<KvPolicy::Relevance>(&flags_.policy.rule);
    if (rel)
      std::fprintf(out,
                   "cocktail: CoMix's allocator, block errors weighted by 1 + %g x relevance%s (query \"%s\", "
                   "%zu-token chunks, encoder %s); per chunk: relevance level 0..8 per block, then the middle "
                   "layer's value bits per block\n",
                   rel->gain, rel->values_only ? " (values only)" : "", flags_.query.c_str(), rel->chunk_tokens,
                   encoder_->name().c_str());
    std::fprintf(out,
                 "%s (%s formats, %s): bits per layer 0..%zu of each chunk's sealed blocks (most blocks of "
                 "the layer; F: f16 sink only), K row then V row\n",
                 encoder_ ? "cocktail" : "comix", std::string(FamilyName(alloc.family)).c_str(),
                 flags_.budget_bytes ? fmt::format("--kv-budget {} bytes", flags_.budget_bytes).c_str()
                                     : fmt::format("{} bits on average", alloc.avg_bits).c_str(),
                 c.n_layer - 1);
    for (size_t i = 0; i < comix_chunks_.size(); ++i) {
      const ComixChunk& ch = comix_chunks_[i];
      if (i < 16)
        std::fprintf(out, "  chunk %-3zu K %s\n            V %s  %.2f bits/element%s\n", i + 1, ch.k_bits.c_str(),
                     ch.v_bits.c_str(), KvBitsPerElement(ch.bytes, chunk_tokens, c),
                     ch.relevance.empty() ? ""
                                          : fmt::format("\n            relevance {}\n            V bits    {}",
                                                        ch.relevance, ch.v_blocks)
                                                .c_str());
      else if (i == 16)
        std::fprintf(out, "  ... (%zu more chunks; --json lists them all)\n", comix_chunks_.size() - 16);
    }
    std::fprintf(out, "  sealed blocks, all chunks: K %s; V %s\n", Counts(k_formats_).c_str(),
                 Counts(v_formats_).c_str());
    const ComixTiming t = comix_->Timing();
    std::fprintf(out, "  %zu reallocations, %.1f us mean, %.1f us max\n", t.count, t.mean_us, t.max_us);
  }
  std::fprintf(out,
               "  measured KV: %.2f MiB mean, %.2f MiB peak per %zu-token chunk = %.2f bits/element mean "
               "(fp16 KV: %.2f MiB)%s\n",
               mean / 1048576.0, peak_bytes_ / 1048576.0, chunk_tokens, KvBitsPerElement(size_t(mean), chunk_tokens, c),
               Fp16KvBytes(chunk_tokens, c) / 1048576.0,
               comix_ && flags_.budget_bytes ? fmt::format("; budget {} bytes", flags_.budget_bytes).c_str() : "");
}

nlohmann::json EvalKv::ReportJson(size_t chunk_tokens) const {
  const ModelConfig& c = model_->config();
  const double mean = double(total_bytes_) / std::max<size_t>(1, chunks_);
  nlohmann::json j = {{"policy", ToString(flags_.policy.kind())},
                      {"name", Name()},
                      {"kv_peak_bytes", peak_bytes_},
                      {"kv_mean_bytes", mean},
                      {"kv_mean_bits_per_element", KvBitsPerElement(size_t(mean), chunk_tokens, c)}};
  if (comix_) {
    const KvPolicy::Allocator& alloc = *flags_.policy.allocator();
    j["budget_bytes"] = flags_.budget_bytes;
    j["avg_bits"] = alloc.avg_bits;
    j["family"] = FamilyName(alloc.family);
    j["tiers"] = fmt::format("{}", fmt::join(alloc.tiers, ","));
    j["min_k_bits"] = alloc.min_k_bits;
    j["rank"] = alloc.rank == KvPolicy::Rank::kMeasured     ? "measured"
                : alloc.rank == KvPolicy::Rank::kCalibrated ? "calibrated"
                : alloc.rank == KvPolicy::Rank::kBound      ? "bound"
                                                            : "expected";
    if (const auto* rel = std::get_if<KvPolicy::Relevance>(&flags_.policy.rule)) {
      j["query"] = flags_.query;
      j["relevance_gain"] = rel->gain;
      j["relevance_values_only"] = rel->values_only;
      j["encoder"] = encoder_->name();
    }
    for (const ComixChunk& ch : comix_chunks_)
      j["chunk_bits"].push_back({{"k", ch.k_bits},
                                 {"v", ch.v_bits},
                                 {"relevance", ch.relevance},
                                 {"v_bits_per_block", ch.v_blocks},
                                 {"kv_bytes", ch.bytes},
                                 {"bits_per_element", KvBitsPerElement(ch.bytes, chunk_tokens, c)}});
    j["k_formats"] = k_formats_;
    j["v_formats"] = v_formats_;
    j["reallocations"] = comix_->Timing().count;
  }
  if (slot_) {
    j["query"] = flags_.query;
    j["alpha"] = Paper().alpha;
    j["beta"] = Paper().beta;
    j["chunk_tokens"] = flags_.policy.chunk_tokens();
    j["encoder"] = encoder_->name();
    for (const CocktailChunk& ch : cocktail_chunks_)
      j["chunk_maps"].push_back({{"map", ch.map},
                                 {"sink", ch.sink},
                                 {"fp16", ch.fp16},
                                 {"int4", ch.int4},
                                 {"int2", ch.int2},
                                 {"s_min", ch.s_min},
                                 {"s_max", ch.s_max},
                                 {"t_low", ch.t_low},
                                 {"t_high", ch.t_high},
                                 {"search_seconds", ch.search_seconds},
                                 {"kv_bytes", ch.bytes},
                                 {"bits_per_element", KvBitsPerElement(ch.bytes, chunk_tokens, c)}});
  }
  return j;
}

}  // namespace chorus::eval
