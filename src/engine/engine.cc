// Engine: opening (the EngineCore, then the parts of Engine::Impl), sharing documents as contexts
// (prefilled once, their full blocks pinned in the prefix cache; Cocktail contexts), scoring and
// reports, and Engine's calls, each delegated to its part. The requests are the Scheduler's
// (scheduler.cc).
#include "chorus/engine.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <thread>

#include "engine/cocktail_plan.h"      // PlanCocktail, OpenTextEncoder, OpenCocktailEncoder
#include "engine/engine_impl.h"        // Engine::Impl
#include "engine/kv_policy_options.h"  // AllocatorComixOptions
#include "engine/model_fingerprint.h"  // ModelFingerprint
#include "kv/kv_footprint.h"           // KvFootprint
#include "model/chat_template.h"       // ApplyChatTemplate
#include "ops/elementwise.h"           // LogSumExp
#include "policy/cocktail_policy.h"    // CocktailPolicy

namespace chorus {
namespace {

uint64_t HashTokens(uint64_t seed, std::span<const int32_t> tokens, std::string_view extra = {}) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset_withSeed(st, seed);
  XXH3_64bits_update(st, tokens.data(), tokens.size_bytes());
  XXH3_64bits_update(st, extra.data(), extra.size());
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

// How each layer rotates its keys (as ForwardPass does): what a segment attached at another offset
// needs to meet its queries exactly.
std::vector<KeyRope> LayerRopes(const Model& m) {
  const ModelConfig& c = m.config();
  std::vector<KeyRope> r(c.n_layer);
  for (size_t l = 0; l < c.n_layer; ++l) {
    r[l].rope_dim = c.rope_dim;
    r[l].neox = c.rope_style == RopeStyle::kNeox;
    r[l].params =
        c.is_local(l)
            ? RopeParams{.base = c.rope_base_local}
            : RopeParams{.base = c.rope_base, .freq_scale = c.rope_freq_scale, .freq_factors = m.weights().rope_freqs};
  }
  return r;
}

}  // namespace

Result<Engine::Impl::Document> Engine::Impl::PrefillDocument(std::span<const int32_t> tokens, const Scope& scope,
                                                             std::shared_ptr<CocktailPolicy> cocktail,
                                                             const Progress& progress, size_t readers,
                                                             size_t reader_tokens, std::vector<PolicyLease>* planned,
                                                             std::span<const float> relevance) {
  // A plain document starts from whatever prefix of it the cache holds (a request's, a context's).
  EngineCore::Borrow b;
  if (!cocktail && relevance.empty()) {
    const std::vector<uint64_t> keys = PrefixCache::Keys(tokens, scope.salt);
    b = core_->BorrowFromCache(keys, keys.size());
    core_->cache->Touch(std::span<const uint64_t>(keys).first(b.blocks));
  }
  const size_t k = b.blocks;
  const bool unit = core_->comix && !cocktail;  // a Cocktail context's map decides its blocks
  if (!unit) {  // CoMix admits the document as a unit below; otherwise the projection, like a request's
    const size_t n = tokens.size() / kBlockTokens;  // a Cocktail map's blocks: f16 at most
    const size_t need = core_->BlockBytes(k, n, n, cocktail != nullptr) +
                        KvFootprint(core_->store->options())
                            .Sequence(tokens.size(), std::min(tokens.size() - k * kBlockTokens, core_->prefill_rows));
    if (std::string why; !scheduler_.MakeRoom(need, &why))
      return Status::Error("the shared document's KV needs up to {} bytes ({} tokens), but {}", need, tokens.size(),
                           why);
  }
  std::unique_ptr<KvSequence> seq = core_->store->NewSequence(tokens.size(), b.view());
  // Readers recompute the document's tail block: its windowed layers keep what they will see.
  seq->set_keep_from(tokens.size() / kBlockTokens * kBlockTokens);
  PolicyLease lease(core_->policy.get(), core_->comix.get(),
                    seq->id());  // its rules end with this call, its unit with the context
  if (cocktail)
    lease.SetCocktail(std::move(cocktail), /*whole=*/true);
  else
    lease.SetSharedBlocks(SIZE_MAX);
  if (unit) {
    const auto add = [&] {
      return lease.AddUnit(tokens.size() - k * kBlockTokens, k * kBlockTokens, 1.0,
                           fmt::format("{} #{}", relevance.empty() ? "shared" : "cocktail", contexts_.next_id()),
                           relevance);
    };
    Status s = add();
    if (!s.ok() && core_->cache->EvictableBytes() > 0) {  // CoMix counts idle cached blocks as held: free them
      core_->cache->Evict(core_->cache->EvictableBytes());
      s = add();
    }
    if (!s.ok()) return s.Context("shared document");
    // The readers the caller knows of, planned before the document is sealed: each a unit of its
    // own, taken over by the real agent when it attaches (as many as fit: the rest will queue).
    for (size_t r = 0; r < readers && planned; ++r) {
      const uint64_t id = contexts_.NextPlannedId();
      Result<PolicyLease> u =
          contexts_.PlanReader(id, reader_tokens, tokens.size(), fmt::format("planned reader {}", r + 1));
      if (!u.ok()) break;
      planned->push_back(std::move(u).value());
    }
    core_->comix->SetWeight(lease.id(), double(std::max<size_t>(1, planned ? planned->size() : 0)));
  }
  const auto drop_planned = [&] {
    if (!planned) return;
    for (PolicyLease& u : *planned) u.Reset();
    planned->clear();
  };
  core_->counters.prefix_queried_tokens += tokens.size();
  core_->counters.prefix_hit_tokens += k * kBlockTokens;
  for (size_t done = k * kBlockTokens; done < tokens.size();) {
    const size_t n = std::min<size_t>(512, tokens.size() - done);
    Status s = core_->fwd->Run(tokens.subspan(done, n), *seq, *core_->pool, LogitsFor::kLast, nullptr);
    if (!s.ok()) {
      lease.Reset();
      if (unit) drop_planned();
      return s.Context("prefilling the shared document");
    }
    done += n;
    core_->counters.prefilled_tokens += n;
    if (progress) progress(done, tokens.size());
  }
  return Document{.seq = std::move(seq), .unit = lease.TakeUnit()};
}

Engine::Impl::Impl(std::unique_ptr<EngineCore> core)
    : core_(std::move(core)), remote_(*core_), contexts_(*core_, remote_), scheduler_(*core_, contexts_, remote_) {}

Result<std::unique_ptr<Engine::Impl>> Engine::Impl::Create(std::unique_ptr<EngineCore> core) {
  std::unique_ptr<Impl> impl(new Impl(std::move(core)));
  CHORUS_RETURN_IF_ERROR(impl->remote_.Open());
  return impl;
}

Engine::Impl::~Impl() {
  scheduler_.Clear();
  contexts_.UnrefAll();
  contexts_.Collect([](ContextId) { return false; });
  core_->cache.reset();  // its pool refs go before the store
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

Result<std::unique_ptr<Engine>> Engine::Open(const EngineOptions& requested) {
  return research::Access::Open(requested, {});
}

Result<std::unique_ptr<Engine>> research::Access::Open(const EngineOptions& requested,
                                                       const research::OpenOptions& research) {
  auto impl = std::make_unique<EngineCore>();
  if (research.weights_of != nullptr) {  // read-only weights: one copy for several engines
    const EngineCore& other = research.weights_of->impl_->core();
    if (other.options.model_path != requested.model_path)
      return Status::Error("OpenOptions::weights_of holds '{}', not the model '{}' asked for", other.options.model_path,
                           requested.model_path);
    impl->model = other.model;
  } else {
    auto model = Model::Load(requested.model_path, {.f32_weights = research.f32_weights});
    if (!model.ok()) return model.status();
    impl->model = std::move(model).value();
  }
  impl->model_fp = ModelFingerprint(*impl->model);
  // A :m policy without a table for this model takes its fallback, and says so.
  impl->options = requested;
  impl->policy_note = ApplyTableFallback(impl->options.policy, requested.model_path, impl->model_fp);
  impl->table_source = AllocatorTableSource(impl->options.policy, requested.model_path, impl->model_fp);
  const EngineOptions& options = impl->options;
  impl->constraints = std::make_unique<OutputConstraints>(*impl->model);
  const ModelConfig& c = impl->model->config();
  const KvPolicy::Uniform* uniform = std::get_if<KvPolicy::Uniform>(&options.policy.rule);
  const KvPolicy::Uniform formats = uniform ? *uniform : KvPolicy::Uniform{};  // non-uniform: tails and sinks
  auto shared = MakeKvConfig(formats.k, formats.v, c);
  if (!shared.ok()) return shared.status().Context("shared context formats");
  auto priv = MakeKvConfig(options.private_k, options.private_v, c);
  if (!priv.ok()) return priv.status().Context("private formats");
  const size_t sink = formats.sink_blocks >= 0 ? size_t(formats.sink_blocks) : options.sink_blocks;
  impl->shared_cfg = shared.value();
  impl->shared_cfg.sink_blocks = sink;
  impl->private_cfg = priv.value();
  impl->private_cfg.sink_blocks = sink;
  impl->n_ctx = options.n_ctx ? options.n_ctx : std::min<size_t>(c.n_ctx_train, 8192);
  if (impl->n_ctx > c.n_ctx_train)
    return Status::Error("context {} exceeds the model's training context of {}", impl->n_ctx, c.n_ctx_train);
  const ServeOptions& so = options.serve;
  if (so.prefill_chunk < kBlockTokens || so.prefill_chunk % kBlockTokens || so.max_prefill < so.prefill_chunk ||
      so.max_prefill % kBlockTokens || so.max_running < 1)
    return Status::Error("prefill chunk {} / max prefill {} must be multiples of {} with chunk <= max, and max running "
                         "{} >= 1",
                         so.prefill_chunk, so.max_prefill, kBlockTokens, so.max_running);
  if (options.policy.needs_questions()) {  // a KvPolicy built in code, not parsed
    const auto* paper = std::get_if<KvPolicy::CocktailPaper>(&options.policy.rule);
    const KvPolicy::CocktailPaper p = paper ? *paper : KvPolicy::CocktailPaper{};
    CHORUS_RETURN_IF_ERROR(
        ValidateCocktailOptions({.alpha = p.alpha, .beta = p.beta, .chunk_tokens = options.policy.chunk_tokens()}));
  }
  if (!options.encoder_path.empty() && options.encoder_path != kHiddenStateEncoder) {
    auto enc = OpenTextEncoder(options.encoder_path);
    if (!enc.ok()) return enc.status();
    impl->encoder = std::move(enc).value();
  }
  // "auto": q8 rows unless the shared formats are f16 (the uncompressed baseline stays exact).
  const bool f16_shared = uniform && uniform->k == "f16" && uniform->v == "f16";
  auto window = ParseWindowFormat(options.kv_window == "auto" ? (f16_shared ? "f16" : "q8") : options.kv_window);
  if (!window.ok()) return window.status().Context("kv_window");
  const int threads = options.threads > 0 ? options.threads : std::max(1u, std::thread::hardware_concurrency());
  impl->policy = std::make_unique<RoutingPolicy>(impl->shared_cfg, impl->private_cfg);
  const bool allocator = options.policy.allocator() != nullptr;
  std::string sensitivity_key;
  ComixOptions co = AllocatorComixOptions(options.policy, c);
  CHORUS_RETURN_IF_ERROR(LoadAllocatorTable(options.policy, co, options.model_path, impl->model_fp));
  if (allocator) {
    co.budget_bytes = options.kv_budget_bytes, co.sink_blocks = sink;
    if (!options.kv_budget_bytes || !research.join_reserve) co.join_reserve = 0;
    co.window = *window, co.threads = static_cast<size_t>(threads);
    co.prefill_tokens = kBlockTokens;  // the comix forward's micro-batch (below)
    if (co.measured)
      for (double x : co.measured->kld) sensitivity_key += fmt::format("{:a},", x);  // its values key the prefixes
    CHORUS_RETURN_IF_ERROR(ComixPolicy::Validate(co).Context(fmt::format("policy {}", FormatSpec(options.policy))));
    impl->comix = std::make_unique<ComixPolicy>(co);
    impl->policy->UseForAll(impl->comix.get());
  }
  KvStoreOptions sto{.n_layer = c.n_layer,
                     .shape = {.n_head = c.n_head, .n_head_kv = c.n_head_kv, .head_dim = c.head_dim},
                     .budget_bytes = options.kv_budget_bytes,
                     .window = *window,
                     .layer_window = c.layer_window,
                     .layer_rope = LayerRopes(*impl->model),
                     .threads = static_cast<size_t>(threads),
                     .fail_block_allocation = options.test_fail_block};
  impl->store = std::make_unique<KvStore>(sto, impl->policy.get());
  if (impl->comix) impl->comix->SetStore(impl->store.get());
  impl->cache = std::make_unique<PrefixCache>(impl->store->pool());
  // Everything that changes a block's bytes goes into the prefix keys.
  const std::string settings =
      fmt::format("{}|{}|{}|{}|{}|{}|{}", FormatSpec(options.policy), options.private_k, options.private_v, sink,
                  WindowFormatName(*window), options.kv_budget_bytes, sensitivity_key);
  impl->salt = XXH3_64bits_withSeed(settings.data(), settings.size(), impl->model_fp);
  // CoMix decides a block's bits from every layer observed so far: a one-block micro-batch lets
  // all layers see a document's first tokens before most of its blocks are sealed (512 at once
  // would seal layer 0's blocks knowing only layer 0 — the allocation then follows layer order).
  // Batched steps take up to max_running decode rows beside a prefill chunk in one pass.
  impl->fwd = std::make_unique<ForwardPass>(*impl->model, allocator ? kBlockTokens : 512,
                                            so.max_prefill + so.max_running);
  impl->pool = std::make_unique<ThreadPool>(threads);
  impl->prefill_rows = std::max(so.max_prefill, allocator ? kBlockTokens : size_t{512});
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Engine::Impl> parts, Engine::Impl::Create(std::move(impl)));
  return std::unique_ptr<Engine>(new Engine(std::move(parts)));
}

namespace {
// Share / ShareFor: planned readers need their token count, and must fit the context beside the document.
Status CheckShareOptions(const ShareOptions& options, size_t doc_tokens, size_t n_ctx) {
  if (options.readers > 0 && options.reader_tokens == 0)
    return Status::Error("ShareOptions: {} readers planned but reader_tokens is 0 (prompt + max_tokens of each)",
                         options.readers);
  if (options.readers > 0 && doc_tokens + options.reader_tokens > n_ctx)
    return Status::Error("ShareOptions: document ({}) + reader_tokens ({}) exceed the context of {}", doc_tokens,
                         options.reader_tokens, n_ctx);
  return Status::Ok();
}
}  // namespace

Result<ContextId> Engine::Share(std::string_view text, const ShareOptions& options) {
  return impl_->Share(text, options);
}

Result<ContextId> Engine::Impl::Share(std::string_view text, const ShareOptions& options) {
  EngineCore& m = *core_;
  CHORUS_ASSIGN_OR_RETURN(std::vector<int32_t> tokens, m.DocumentTokens(text));
  if (Status s = CheckShareOptions(options, tokens.size(), m.n_ctx); !s.ok()) return s;
  const Scope scope = m.ScopeOf(options.scope);
  const uint64_t hash = HashTokens(scope.salt, tokens);
  if (const ContextId id = contexts_.AddRef(hash)) return id;
  if (m.options.policy.kind() == KvPolicyKind::kRelevance)
    return Status::Error("policy cocktail weights a shared context's blocks by their relevance to the questions: share "
                         "it with ShareFor(text, questions) (Share has no questions)");
  std::vector<PolicyLease> planned;
  CHORUS_ASSIGN_OR_RETURN(Document doc, PrefillDocument(tokens, scope, nullptr, options.progress, options.readers,
                                                        options.reader_tokens, &planned));
  const ContextId id = contexts_.Add(std::move(tokens), *doc.seq, hash, /*pin=*/true, scope);
  if (m.comix) {
    Context& c = *contexts_.Find(id);
    c.unit = std::move(doc.unit);  // its blocks stay in CoMix's accounting
    c.planned = std::move(planned);
    c.reader_tokens = options.reader_tokens;
  }
  return id;
}

Result<ContextId> Engine::ShareFor(std::string_view text, const std::vector<std::string>& queries,
                                   const ShareOptions& options) {
  return impl_->ShareFor(text, queries, options);
}

Result<ContextId> Engine::Impl::ShareFor(std::string_view text, const std::vector<std::string>& queries,
                                         const ShareOptions& options) {
  EngineCore& m = *core_;
  const Progress& progress = options.progress;
  CHORUS_ASSIGN_OR_RETURN(std::vector<int32_t> tokens, m.DocumentTokens(text));
  if (Status s = CheckShareOptions(options, tokens.size(), m.n_ctx); !s.ok()) return s;
  const bool relevance = m.options.policy.kind() == KvPolicyKind::kRelevance;
  if (relevance && std::all_of(queries.begin(), queries.end(), [](const std::string& q) {
        return q.find_first_not_of(" \t\r\n") == std::string::npos;
      }))
    return Status::Error("policy cocktail needs at least one non-empty question (its relevance to each chunk weights "
                         "the context's blocks); got {} question(s), none with text", queries.size());
  if (!m.encoder) {  // first use: the installed sentence encoder, else the model's own hidden states
    CHORUS_ASSIGN_OR_RETURN(m.encoder, OpenCocktailEncoder(m.options.encoder_path, m.options.model_path, *m.model,
                                                           *m.fwd, *m.pool));
  }
  // The paper's thresholds: its policy's, or the paper's defaults (ShareFor under another policy).
  const auto* paper = std::get_if<KvPolicy::CocktailPaper>(&m.options.policy.rule);
  const KvPolicy::CocktailPaper p = paper ? *paper : KvPolicy::CocktailPaper{};
  const CocktailOptions co{.alpha = p.alpha, .beta = p.beta, .chunk_tokens = m.options.policy.chunk_tokens()};
  CHORUS_ASSIGN_OR_RETURN(CocktailPlan plan, PlanCocktail(m.model->tokenizer(), tokens, queries, *m.encoder, co));
  const size_t sink = m.shared_cfg.sink_blocks;
  if (relevance) return ShareRelevant(std::move(tokens), queries, plan, options);
  ChunkMapReport rep{.encoder = plan.encoder, .blocks = ChunkMapString(plan.blocks, sink),
                     .chunks = plan.similarity.size(), .chunk_tokens = co.chunk_tokens,
                     .s_min = float(plan.thresholds.s_min), .s_max = float(plan.thresholds.s_max),
                     .t_low = float(plan.thresholds.t_low), .t_high = float(plan.thresholds.t_high),
                     .search_seconds = plan.search_seconds};
  for (size_t b = 0; b < tokens.size() / kBlockTokens; ++b) {  // sealed blocks only
    const char c = rep.blocks[b];
    (c == 'S' ? rep.sink : c == 'F' ? rep.fp16 : c == '4' ? rep.int4 : rep.int2)++;
  }
  const Scope scope = m.ScopeOf(options.scope);
  const uint64_t hash = HashTokens(scope.salt ^ 0xc0c7a11, tokens, rep.blocks);
  if (const ContextId id = contexts_.AddRef(hash)) return id;
  Timer t_prefill;
  auto map = std::make_shared<CocktailPolicy>(plan.blocks, sink);
  CHORUS_ASSIGN_OR_RETURN(Document doc, PrefillDocument(tokens, scope, map, progress));
  rep.prefill_seconds = t_prefill.Seconds();
  // Not pinned in the prefix cache: its blocks' precision was chosen for these queries.
  const ContextId id = contexts_.Add(std::move(tokens), *doc.seq, hash, /*pin=*/false, scope);
  Context& ctx = *contexts_.Find(id);
  ctx.cocktail = std::move(map);
  Timer t_reorder;
  SortBlocksByFormat(ctx.tables, m.store->pool(), m.model->config().layer_window);
  rep.reorder_seconds = t_reorder.Seconds();
  contexts_.SetChunkMap(id, std::move(rep));
  return id;
}

// chorus's Cocktail: the document is one allocator unit whose blocks are weighted by relevance.
Result<ContextId> Engine::Impl::ShareRelevant(std::vector<int32_t> tokens, const std::vector<std::string>& queries,
                                              const CocktailPlan& plan, const ShareOptions& share) {
  const EngineOptions& options = core_->options;
  const KvConfig& shared_cfg = core_->shared_cfg;
  const size_t sink = shared_cfg.sink_blocks, chunk = options.policy.chunk_tokens();
  const std::vector<float> relevance = BlockRelevance(plan.similarity, chunk, tokens.size());
  ChunkMapReport rep{.encoder = plan.encoder,
                     .blocks = RelevanceLevels(relevance, sink),
                     .chunks = plan.similarity.size(),
                     .chunk_tokens = chunk,
                     .s_min = float(plan.thresholds.s_min),
                     .s_max = float(plan.thresholds.s_max),
                     .search_seconds = plan.search_seconds,
                     .policy = KvPolicyKind::kRelevance};
  std::string key;  // the same text for the same questions is the same context (as Share: readers aside)
  for (const std::string& q : queries) key += q + '\n';
  const Scope scope = core_->ScopeOf(share.scope);
  const uint64_t hash = HashTokens(scope.salt ^ 0xa110ca7e, tokens, key);
  if (const ContextId id = contexts_.AddRef(hash)) return id;
  Timer t_prefill;
  std::vector<PolicyLease> planned;
  CHORUS_ASSIGN_OR_RETURN(Document doc, PrefillDocument(tokens, scope, nullptr, share.progress, share.readers,
                                                        share.reader_tokens, &planned, relevance));
  const KvSequence* seq = doc.seq.get();
  rep.prefill_seconds = t_prefill.Seconds();
  // What the allocator handed out and what the store's blocks hold, per layer, in token order.
  const BlockPool& bp = core_->store->pool();
  const size_t full = tokens.size() / kBlockTokens;
  const auto bits = [&](KvFormat f) {
    if (f == KvFormat::kF16) return 'F';
    for (int b : {2, 3, 4, 8})
      if (ComixFormat(core_->comix->options().family, b) == f) return char('0' + b);
    return '?';
  };
  for (size_t l = 0; l < core_->model->config().n_layer; ++l) {
    rep.alloc_k.push_back(core_->comix->SealedBits(seq->id(), l, KvSide::kKey));
    rep.alloc_v.push_back(core_->comix->SealedBits(seq->id(), l, KvSide::kValue));
    std::string k(full, '.'), v(full, '.');  // '.': freed by a sliding-window layer
    for (size_t j = seq->first_block(l); j < full; ++j) {
      k[j] = bits(bp.meta(seq->block(l, j)).k_format);
      v[j] = bits(bp.meta(seq->block(l, j)).v_format);
    }
    rep.stored_k.push_back(std::move(k));
    rep.stored_v.push_back(std::move(v));
  }
  // Not pinned in the prefix cache (its bits were chosen for these questions), nor reordered.
  const ContextId id = contexts_.Add(std::move(tokens), *seq, hash, /*pin=*/false, scope);
  Context& c = *contexts_.Find(id);
  c.unit = std::move(doc.unit);  // its blocks stay in the allocator's accounting
  c.planned = std::move(planned);
  c.reader_tokens = share.reader_tokens;
  contexts_.SetChunkMap(id, std::move(rep));
  return id;
}

void Engine::Impl::Release(ContextId context) {
  if (contexts_.Unref(context)) contexts_.Collect([this](ContextId c) { return scheduler_.Readers(c) > 0; });
}

Result<Engine::ScoreResult> Engine::Impl::Score(ContextId context, std::span<const int32_t> tokens, int top_logprobs) {
  EngineCore& m = *core_;
  static const Context kNoContext;  // context 0: the tokens start the sequence
  const Context* found = context == 0 ? &kNoContext : contexts_.Find(context);
  if (!found) return Status::Error("unknown or freed context {}", context);
  const Context& ctx = *found;
  const size_t V = m.model->config().n_vocab;
  for (int32_t t : tokens)
    if (t < 0 || static_cast<size_t>(t) >= V) return Status::Error("token id {} outside the vocabulary", t);
  if (tokens.size() < 2) return Status::Error("the text to score needs at least 2 tokens");
  if (top_logprobs > 20) return Status::Error("top_logprobs must be at most 20, got {}", top_logprobs);
  if (ctx.tokens.size() + tokens.size() > m.n_ctx)
    return Status::Error("context ({}) + text ({}) exceed the context of {}", ctx.tokens.size(), tokens.size(), m.n_ctx);
  // The context's full blocks are borrowed; its tail is prefilled, then the text is scored.
  const size_t borrowed = ctx.tokens.size() / kBlockTokens * kBlockTokens;
  const size_t cap = ctx.tokens.size() + tokens.size();
  if (!m.comix) {  // comix registers the text as a unit below
    // The tail of the context, then the text: every forward call starts at a block boundary.
    const KvFootprint fp(m.store->options());
    const size_t need = m.BlockBytes(borrowed / kBlockTokens, 0, cap / kBlockTokens) +
                        fp.Sequence(cap, std::min<size_t>(512, tokens.size()));
    if (std::string why; !scheduler_.MakeRoom(need, &why))
      return Status::Error("scoring {} tokens needs up to {} bytes of KV, but {}", tokens.size(), need, why);
  }
  auto seq = context == 0 ? m.store->NewSequence(cap, {})
                          : m.store->NewSequence(cap, {.tables = ctx.tables, .first = ctx.first});
  PolicyLease lease(nullptr, m.comix.get(), seq->id());  // declared after seq: ends first
  if (m.comix)
    CHORUS_RETURN_IF_ERROR(lease.AddUnit(ctx.tokens.size() + tokens.size() - borrowed, borrowed, 1.0, "scored text"));
  if (borrowed < ctx.tokens.size())
    CHORUS_RETURN_IF_ERROR(m.fwd->Run(std::span<const int32_t>(ctx.tokens).subspan(borrowed), *seq, *m.pool,
                                      LogitsFor::kLast, nullptr));
  ScoreResult r;
  if (top_logprobs >= 0) r.logprobs.reserve(tokens.size() - 1);
  std::vector<float> logits(std::min<size_t>(512, tokens.size()) * V);
  for (size_t done = 0, n = 0; done < tokens.size(); done += n) {
    // The first piece completes the context's partial block: every Append starts at a block
    // boundary (the projection's prefill).
    n = std::min<size_t>(512, tokens.size() - done);
    if (seq->size() % kBlockTokens) n = std::min(n, kBlockTokens - seq->size() % kBlockTokens);
    CHORUS_RETURN_IF_ERROR(m.fwd->Run(tokens.subspan(done, n), *seq, *m.pool, LogitsFor::kAll, logits.data()));
    for (size_t j = 0; j < n && done + j + 1 < tokens.size(); ++j) {
      const float* row = logits.data() + j * V;
      const int32_t next = tokens[done + j + 1];
      r.nll -= row[next] - LogSumExp(row, V);
      ++r.count;
      // The sampler's own log-softmax (unadjusted logits: the model's likelihood).
      if (top_logprobs >= 0) r.logprobs.push_back(LogprobsOf(row, V, next, static_cast<size_t>(top_logprobs)));
    }
  }
  return r;
}

EngineKvReport Engine::Impl::KvReport() const {
  const EngineCore& m = *core_;
  EngineKvReport r;
  for (const auto& [id, c] : contexts_.all()) r.shared_bytes += c.bytes;
  for (const auto& [id, a] : scheduler_.requests())
    if (a.running()) r.private_bytes += m.SequenceOwnBytes(*a.seq);
  r.total_bytes = m.store->held();
  r.overhead_bytes = m.OverheadBytes();
  r.high_water_bytes = m.store->high_water();
  r.projected_bytes =
      m.comix && m.store->budget() ? m.comix->ProjectedBytes() : m.store->held() + scheduler_.Reserved();
  r.budget_bytes = m.store->budget();
  return r;
}

EngineStats Engine::Impl::Stats() const {
  const EngineCore& m = *core_;
  EngineStats s = m.counters;
  for (const auto& [id, a] : scheduler_.requests()) {
    s.waiting += a.phase() == AgentPhase::kWaiting;
    s.prefilling += a.phase() == AgentPhase::kPrefill;
    s.decoding += a.phase() == AgentPhase::kDecode;
  }
  const PrefixCache::Report cr = m.cache->Stats();
  s.cached_blocks = cr.blocks;
  s.evicted_blocks = cr.evicted_blocks;
  s.total_bytes = m.store->Usage().total();
  s.pinned_bytes = cr.pinned_bytes;
  for (const auto& [id, c] : contexts_.all())
    if (c.keys.empty()) s.pinned_bytes += c.bytes;  // Cocktail contexts: held, not in the cache
  s.cached_bytes = cr.idle_bytes;
  s.shared_bytes = cr.pinned_bytes + cr.idle_bytes + cr.active_bytes;
  for (const auto& [id, c] : contexts_.all())
    if (c.keys.empty()) s.shared_bytes += c.bytes;
  // The store's own scratch and the pool's slot table belong to no request.
  const size_t overhead = m.OverheadBytes();
  s.overhead_bytes = overhead;
  s.in_use_bytes = s.total_bytes - std::min(s.total_bytes, s.pinned_bytes + s.cached_bytes + overhead);
  s.budget_bytes = m.store->budget();
  s.high_water_bytes = m.store->high_water();
  s.sealed_blocks = m.store->seal_stats().blocks;
  s.seal_seconds = m.store->seal_stats().seconds;
  s.free_bytes = s.budget_bytes > s.total_bytes ? s.budget_bytes - s.total_bytes : 0;
  s.remote = remote_.Stats();
  return s;
}

// ---- Engine: each call goes to its part ------------------------------------------------------

Result<ContextId> Engine::Share(std::string_view text, const Progress& progress) {
  return Share(text, ShareOptions{.progress = progress});
}

Result<ContextId> Engine::ShareFor(std::string_view text, const std::vector<std::string>& queries,
                                   const Progress& progress) {
  return ShareFor(text, queries, ShareOptions{.progress = progress});
}

const ChunkMapReport* Engine::chunk_map(ContextId context) const { return impl_->contexts().chunk_map(context); }
void Engine::Release(ContextId context) { impl_->Release(context); }

Result<AgentId> Engine::Spawn(ContextId context, std::string_view prompt, const AgentOptions& options) {
  return impl_->scheduler().Spawn(context, prompt, options);
}
std::string Engine::TokenPiece(int32_t token) const { return impl_->core().model->tokenizer().TokenToPiece(token); }

Status Engine::CheckConstraint(const OutputConstraint& constraint) const {
  if (constraint.kind == OutputConstraint::Kind::kNone) return Status::Ok();
  return impl_->core().constraints->Compile(constraint).status();
}

Result<AgentId> Engine::Submit(std::vector<int32_t> prompt, const AgentOptions& options) {
  return impl_->scheduler().Submit(std::move(prompt), options);
}
void Engine::Cancel(AgentId id) { impl_->scheduler().Cancel(id); }
void Engine::Forget(AgentId id) { impl_->scheduler().Forget(id); }
Status Engine::Step() { return impl_->scheduler().Step(); }
size_t Engine::running() const { return impl_->scheduler().running(); }
size_t Engine::waiting() const { return impl_->scheduler().waiting(); }
const AgentState* Engine::agent(AgentId id) const {
  const Request* r = impl_->scheduler().Find(id);
  return r ? &r->state : nullptr;
}
size_t Engine::EstimateBytes(size_t prompt_tokens, size_t max_tokens) const {
  return impl_->core().ProjectedBytes(std::max<size_t>(prompt_tokens, 1), max_tokens, 0);
}

Result<Engine::ScoreResult> Engine::Score(ContextId context, std::string_view text) {
  const std::vector<int32_t> tokens = impl_->core().model->tokenizer().Encode(text, false, false);
  return Score(context, std::span<const int32_t>(tokens));
}
Result<Engine::ScoreResult> Engine::Score(ContextId context, std::span<const int32_t> tokens, int top_logprobs) {
  return impl_->Score(context, tokens, top_logprobs);
}

EngineKvReport Engine::KvReport() const { return impl_->KvReport(); }
EngineStats Engine::Stats() const { return impl_->Stats(); }
EngineSnapshot Engine::Snapshot(const SnapshotOptions& o) const { return impl_->Snapshot(o); }

std::string Engine::AllocationReport(bool events) const {
  const EngineCore& m = impl_->core();
  return m.comix ? m.comix->Report(events) : "";
}

Engine::AllocationStats Engine::AllocationTiming() const {
  const EngineCore& m = impl_->core();
  if (!m.comix) return {};
  const ComixTiming t = m.comix->Timing();
  return {.count = t.count, .mean_us = t.mean_us, .max_us = t.max_us};
}

size_t Engine::ContextTokens(ContextId context) const {
  const Context* c = impl_->contexts().Find(context);
  return c ? c->tokens.size() : 0;
}

size_t Engine::ContextBytes(ContextId context) const {
  const Context* c = impl_->contexts().Find(context);
  return c ? c->bytes : 0;
}

std::vector<ContextId> Engine::Contexts() const {
  std::vector<ContextId> ids;
  for (const auto& [id, c] : impl_->contexts().all()) ids.push_back(id);
  return ids;
}

size_t Engine::live_contexts() const { return impl_->contexts().all().size(); }
size_t Engine::Fp16Bytes(size_t tokens) const { return impl_->core().fp16_bytes(tokens); }

std::vector<int32_t> Engine::Tokenize(std::string_view text, bool add_special, bool parse_special) const {
  return impl_->core().model->tokenizer().Encode(text, add_special, parse_special);
}

Result<std::string> Engine::RenderChat(const std::vector<ChatTurn>& messages) const {
  auto tmpl = impl_->core().model->chat_template();
  if (!tmpl) return Status::Error("the model has no chat template (tokenizer.chat_template): use completions");
  std::vector<ChatMessage> msgs;
  for (const ChatTurn& t : messages) msgs.push_back({t.role, t.content});
  return ApplyChatTemplate(*tmpl, msgs, /*add_generation_prompt=*/true);
}

bool Engine::has_chat_template() const { return impl_->core().model->chat_template().has_value(); }

size_t Engine::context_size() const { return impl_->core().n_ctx; }
size_t Engine::vocab_size() const { return impl_->core().model->config().n_vocab; }
const std::string& Engine::model_name() const { return impl_->core().model->config().name; }
std::string Engine::fingerprint() const { return fmt::format("{:016x}", impl_->core().salt); }

std::string Engine::KvSettings() const {
  const EngineCore& c = impl_->core();
  nlohmann::json j = {
      {"policy", FormatSpec(c.options.policy)},    {"private_k", c.options.private_k},
      {"private_v", c.options.private_v},          {"window", WindowFormatName(c.store->options().window)},
      {"budget_bytes", c.options.kv_budget_bytes}, {"sink_blocks", c.shared_cfg.sink_blocks}};
  if (!c.table_source.empty()) j["table"] = c.table_source;
  if (!c.policy_note.empty()) j["note"] = c.policy_note;
  return j.dump();
}

}  // namespace chorus
