// Engine: opening, shared contexts (prefilled once, their full blocks pinned in the prefix cache),
// Cocktail contexts, scoring and reports. The scheduler (Submit, Spawn, Step) is in scheduler.cc.
// The only place that knows the model, the KV layer and the policies together.
#include "chorus/engine.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <thread>

#include "engine/cocktail_plan.h"   // PlanCocktail, OpenTextEncoder, OpenCocktailEncoder
#include "engine/engine_impl.h"     // Engine::Impl
#include "gguf/gguf.h"              // GgufFile (the model fingerprint)
#include "kv/kv_footprint.h"        // KvFootprint
#include "model/chat_template.h"    // ApplyChatTemplate
#include "ops/elementwise.h"        // LogSumExp
#include "policy/cocktail_policy.h" // CocktailPolicy

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

// The model file's identity: its header (metadata + tensor index) and samples of its tensor data.
uint64_t ModelFingerprint(const Model& m) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  const GgufFile& f = m.gguf();
  const size_t size = f.file_size();
  XXH3_64bits_update(st, &size, sizeof size);
  for (const GgufTensor& t : f.tensors()) {
    XXH3_64bits_update(st, t.name.data(), t.name.size());
    XXH3_64bits_update(st, &t.type, sizeof t.type);
    XXH3_64bits_update(st, t.dims.data(), t.dims.size() * sizeof(uint64_t));
    XXH3_64bits_update(st, t.data, std::min<size_t>(t.n_bytes, 256));  // a sample of every tensor
  }
  for (const GgufKv& kv : f.metadata()) XXH3_64bits_update(st, kv.key.data(), kv.key.size());
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

std::string TierString(const std::vector<int>& tiers) {
  std::string s;
  for (int b : tiers) s += char('0' + b);
  return s;
}

}  // namespace

size_t Engine::Impl::fp16_bytes(size_t tokens) const {
  const ModelConfig& c = model->config();
  return tokens * c.n_layer * c.kv_dim() * 2 * sizeof(uint16_t);
}

Result<std::vector<int32_t>> Engine::Impl::DocumentTokens(std::string_view text) const {
  std::vector<int32_t> tokens = model->tokenizer().Encode(text, /*add_special=*/true, /*parse_special=*/true);
  const size_t specials = model->tokenizer().Encode("", true, true).size();  // BOS, when the model adds one
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos || tokens.size() <= specials)
    return Status::Error("the shared document is empty");
  if (tokens.size() >= n_ctx)
    return Status::Error("the document has {} tokens but an agent's context holds {} (document + prompt + answer)",
                         tokens.size(), n_ctx);
  return tokens;
}

size_t Engine::Impl::OverheadBytes() const {
  // The scratch, and the pool's slot table beyond the live blocks' slots (BlockCost has those).
  const BlockPool& bp = store->pool();
  return store->Usage().scratch_bytes + bp.table_bytes() - bp.live_blocks() * BlockPool::BlockCost(0, 0);
}

size_t Engine::Impl::SequenceOwnBytes(const KvSequence& s) const {
  size_t b = s.window_bytes() + s.table_bytes();
  const BlockPool& bp = store->pool();
  for (size_t l = 0; l < model->config().n_layer; ++l)
    for (size_t j = std::max(s.borrowed_blocks(), s.first_block(l)); j < s.sealed_blocks(l); ++j) {
      if (s.attached(j)) continue;  // a segment's block: another request's
      const BlockId id = s.block(l, j);
      b += BlockPool::BlockCost(bp.meta(id).k_bytes, bp.meta(id).v_bytes);
    }
  return b;
}

Result<PolicyLease> Engine::Impl::AddPlannedReader(uint64_t id, size_t reader_tokens, size_t doc_tokens,
                                                   std::string label) {
  const size_t tail = doc_tokens % kBlockTokens;
  PolicyLease unit(nullptr, comix.get(), id);
  CHORUS_RETURN_IF_ERROR(unit.AddUnit(reader_tokens + tail, doc_tokens - tail, 1.0, std::move(label)));
  return unit;
}

Result<Engine::Impl::Document> Engine::Impl::PrefillDocument(std::span<const int32_t> tokens,
                                                             std::shared_ptr<CocktailPolicy> cocktail,
                                                             const Progress& progress, size_t readers,
                                                             size_t reader_tokens, std::vector<PolicyLease>* planned,
                                                             std::span<const float> relevance) {
  // A plain document starts from whatever prefix of it the cache holds (a request's, a context's).
  Borrow b;
  if (!cocktail && relevance.empty()) {
    const std::vector<uint64_t> keys = PrefixCache::Keys(tokens, salt);
    b = BorrowFromCache(keys, keys.size());
    cache->Touch(std::span<const uint64_t>(keys).first(b.blocks));
  }
  const size_t k = b.blocks;
  const bool unit = comix && !cocktail;  // a Cocktail context's map decides its blocks
  if (!unit) {  // CoMix admits the document as a unit below; otherwise the projection, like a request's
    const size_t n = tokens.size() / kBlockTokens;  // a Cocktail map's blocks: f16 at most
    const size_t need = BlockBytes(k, n, n, cocktail != nullptr) +
                        KvFootprint(store->options()).Sequence(tokens.size(), std::min(tokens.size() - k * kBlockTokens, prefill_rows));
    if (std::string why; !MakeRoom(need, &why))
      return Status::Error("the shared document's KV needs up to {} bytes ({} tokens), but {}", need, tokens.size(),
                           why);
  }
  std::unique_ptr<KvSequence> seq = store->NewSequence(tokens.size(), b.view());
  // Readers recompute the document's tail block: its windowed layers keep what they will see.
  seq->set_keep_from(tokens.size() / kBlockTokens * kBlockTokens);
  PolicyLease lease(policy.get(), comix.get(), seq->id());  // its rules end with this call, its unit with the context
  if (cocktail)
    lease.SetCocktail(std::move(cocktail), /*whole=*/true);
  else
    lease.SetSharedBlocks(SIZE_MAX);
  if (unit) {
    const auto add = [&] {
      return lease.AddUnit(tokens.size() - k * kBlockTokens, k * kBlockTokens, 1.0,
                           fmt::format("{} #{}", relevance.empty() ? "shared" : "cocktail", next_context), relevance);
    };
    Status s = add();
    if (!s.ok() && cache->EvictableBytes() > 0) {  // CoMix counts idle cached blocks as held: free them
      cache->Evict(cache->EvictableBytes());
      s = add();
    }
    if (!s.ok()) return s.Context("shared document");
    // The readers the caller knows of, planned before the document is sealed: each a unit of its
    // own, taken over by the real agent when it attaches (as many as fit: the rest will queue).
    for (size_t r = 0; r < readers && planned; ++r) {
      const uint64_t id = kPlannedReaderBit | next_planned++;
      Result<PolicyLease> u =
          AddPlannedReader(id, reader_tokens, tokens.size(), fmt::format("planned reader {}", r + 1));
      if (!u.ok()) break;
      planned->push_back(std::move(u).value());
    }
    comix->SetWeight(lease.id(), double(std::max<size_t>(1, planned ? planned->size() : 0)));
  }
  const auto drop_planned = [&] {
    if (!planned) return;
    for (PolicyLease& u : *planned) u.Reset();
    planned->clear();
  };
  counters.prefix_queried_tokens += tokens.size();
  counters.prefix_hit_tokens += k * kBlockTokens;
  for (size_t done = k * kBlockTokens; done < tokens.size();) {
    const size_t n = std::min<size_t>(512, tokens.size() - done);
    Status s = fwd->Run(tokens.subspan(done, n), *seq, *pool, LogitsFor::kLast, nullptr);
    if (!s.ok()) {
      lease.Reset();
      if (unit) drop_planned();
      return s.Context("prefilling the shared document");
    }
    done += n;
    counters.prefilled_tokens += n;
    if (progress) progress(done, tokens.size());
  }
  return Document{.seq = std::move(seq), .unit = lease.TakeUnit()};
}

ContextId Engine::Impl::AddContext(std::vector<int32_t> tokens, const KvSequence& seq, uint64_t hash, bool pin) {
  const size_t L = model->config().n_layer, full = tokens.size() / kBlockTokens;
  Context c{.hash = hash, .user_refs = 1};
  c.tables.assign(L, {});
  c.first.assign(L, 0);
  const BlockPool& bp = store->pool();
  for (size_t l = 0; l < L; ++l) {
    c.first[l] = std::min(seq.first_block(l), full);
    for (size_t j = c.first[l]; j < full; ++j) {
      const BlockId id = seq.block(l, j);
      store->pool().Ref(id);
      c.tables[l].push_back(id);
      c.bytes += BlockPool::BlockCost(bp.meta(id).k_bytes, bp.meta(id).v_bytes);
    }
  }
  if (pin) {
    c.keys = PrefixCache::Keys(tokens, salt);
    std::vector<BlockId> ids(L);
    for (size_t j = 0; j < full; ++j) {
      for (size_t l = 0; l < L; ++l) ids[l] = seq.block(l, j);
      if (cache->Insert(c.keys[j], j ? c.keys[j - 1] : 0, ids)) {  // present already when borrowed
        // Found by content too: a prompt holding the context's text after other text reuses it (segments).
        cache->IndexContent(c.keys[j], PrefixCache::BlockContentKey(tokens, j, salt), j * kBlockTokens);
        PublishBlock(c.keys[j], j, ids);
      }
    }
    cache->Pin(c.keys);
  }
  c.tokens = std::move(tokens);
  const ContextId id = next_context++;
  by_hash[hash] = id;
  contexts.emplace(id, std::move(c));
  return id;
}

void Engine::Impl::CollectContexts() {
  for (auto it = contexts.begin(); it != contexts.end();) {
    Context& c = it->second;
    bool read = false;
    for (const auto& [aid, a] : requests) read = read || (a.context == it->first && a.seq);
    if (c.user_refs == 0 && !read) {
      if (!c.keys.empty()) cache->Unpin(c.keys);  // the blocks stay cached (evictable) after this
      c.unit.Reset();
      for (PolicyLease& u : c.planned) u.Reset();
      for (const auto& t : c.tables)
        for (BlockId b : t) store->pool().Unref(b);
      by_hash.erase(c.hash);
      it = contexts.erase(it);
    } else {
      ++it;
    }
  }
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() {
  if (!impl_) return;
  impl_->requests.clear();
  for (auto& [id, c] : impl_->contexts) c.user_refs = 0;
  impl_->CollectContexts();
  impl_->cache.reset();  // its pool refs go before the store
}

Result<std::unique_ptr<Engine>> Engine::Open(const EngineOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  auto model = Model::Load(options.model_path);
  if (!model.ok()) return model.status();
  impl->model = std::move(model).value();
  const ModelConfig& c = impl->model->config();
  auto shared = MakeKvConfig(options.shared_k, options.shared_v, c);
  if (!shared.ok()) return shared.status().Context("shared context formats");
  auto priv = MakeKvConfig(options.private_k, options.private_v, c);
  if (!priv.ok()) return priv.status().Context("private formats");
  impl->shared_cfg = shared.value();
  impl->shared_cfg.sink_blocks = options.sink_blocks;
  impl->private_cfg = priv.value();
  impl->private_cfg.sink_blocks = options.sink_blocks;
  impl->n_ctx = options.n_ctx ? options.n_ctx : std::min<size_t>(c.n_ctx_train, 8192);
  if (impl->n_ctx > c.n_ctx_train)
    return Status::Error("context {} exceeds the model's training context of {}", impl->n_ctx, c.n_ctx_train);
  const ServeOptions& so = options.serve;
  if (so.prefill_chunk < kBlockTokens || so.prefill_chunk % kBlockTokens || so.max_prefill < so.prefill_chunk ||
      so.max_prefill % kBlockTokens || so.max_running < 1)
    return Status::Error("prefill chunk {} / max prefill {} must be multiples of {} with chunk <= max, and max running "
                         "{} >= 1",
                         so.prefill_chunk, so.max_prefill, kBlockTokens, so.max_running);
  if (!(options.comix_join_reserve >= 0 && options.comix_join_reserve <= 1))
    return Status::Error("comix join reserve must be in [0, 1], got {}", options.comix_join_reserve);
  CHORUS_RETURN_IF_ERROR(ValidateCocktailOptions({.alpha = options.cocktail_alpha, .beta = options.cocktail_beta,
                                                   .chunk_tokens = options.cocktail_chunk_tokens}));
  if (!options.encoder_path.empty() && options.encoder_path != kHiddenStateEncoder) {
    auto enc = OpenTextEncoder(options.encoder_path);
    if (!enc.ok()) return enc.status();
    impl->encoder = std::move(enc).value();
  }
  // "auto": q8 rows unless the shared formats are f16 (the uncompressed baseline stays exact).
  const bool f16_shared = options.shared_k == "f16" && options.shared_v == "f16" && options.policy == "uniform";
  auto window = ParseWindowFormat(options.kv_window == "auto" ? (f16_shared ? "f16" : "q8") : options.kv_window);
  if (!window.ok()) return window.status().Context("kv_window");
  const int threads = options.threads > 0 ? options.threads : std::max(1u, std::thread::hardware_concurrency());
  impl->policy = std::make_unique<RoutingPolicy>(impl->shared_cfg, impl->private_cfg);
  const bool allocator = options.policy == "comix" || options.policy == "cocktail";
  std::string sensitivity_key;
  if (!options.comix_sensitivity.empty() && !allocator)
    return Status::Error("comix_sensitivity needs policy comix or cocktail (got '{}')", options.policy);
  if (allocator) {
    ComixOptions co{.n_layer = c.n_layer, .n_head = c.n_head, .n_head_kv = c.n_head_kv, .head_dim = c.head_dim,
                    .budget_bytes = options.kv_budget_bytes, .avg_bits = options.kv_avg_bits,
                    .sink_blocks = options.sink_blocks,
                    .join_reserve = options.kv_budget_bytes ? options.comix_join_reserve : 0.0,
                    .window = *window,
                    .threads = static_cast<size_t>(threads),
                    .prefill_tokens = kBlockTokens,  // the comix forward's micro-batch (below)
                    .tiers = options.comix_tiers,
                    .min_k_bits = options.comix_min_k_bits,
                    .relevance_gain = options.relevance_gain,
                    .relevance_values_only = options.relevance_values_only};
    if (options.comix_family == "kivi") co.family = ComixFamily::kKivi;
    else if (options.comix_family != "tq")
      return Status::Error("unknown comix family '{}' (valid: tq, kivi)", options.comix_family);
    if (!options.comix_sensitivity.empty()) {
      CHORUS_ASSIGN_OR_RETURN(co.measured, LoadComixSensitivity(options.comix_sensitivity));
      for (double x : co.measured->kld) sensitivity_key += fmt::format("{:a},", x);  // its values key the prefixes
    }
    CHORUS_RETURN_IF_ERROR(ComixPolicy::Validate(co).Context(fmt::format("policy {}", options.policy)));
    impl->comix = std::make_unique<ComixPolicy>(co);
    impl->policy->UseForAll(impl->comix.get());
  } else if (options.policy != "uniform" && options.policy != "cocktail-paper") {
    return Status::Error("unknown KV policy '{}' (valid: uniform, comix, cocktail, cocktail-paper)", options.policy);
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
  const std::string settings = fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", options.shared_k, options.shared_v,
                                           options.private_k, options.private_v, options.sink_blocks,
                                           WindowFormatName(*window), options.policy, options.comix_family,
                                           options.kv_avg_bits, options.kv_budget_bytes) +
                               fmt::format("|{}|{}|{}|{}|{}", TierString(options.comix_tiers), options.comix_min_k_bits,
                                           options.relevance_gain, options.relevance_values_only, sensitivity_key);
  impl->model_fp = ModelFingerprint(*impl->model);
  impl->salt = XXH3_64bits_withSeed(settings.data(), settings.size(), impl->model_fp);
  CHORUS_RETURN_IF_ERROR(impl->OpenRemote());
  // CoMix decides a block's bits from every layer observed so far: a one-block micro-batch lets
  // all layers see a document's first tokens before most of its blocks are sealed (512 at once
  // would seal layer 0's blocks knowing only layer 0 — the allocation then follows layer order).
  // Batched steps take up to max_running decode rows beside a prefill chunk in one pass.
  impl->fwd = std::make_unique<ForwardPass>(*impl->model, allocator ? kBlockTokens : 512,
                                            so.max_prefill + so.max_running);
  impl->pool = std::make_unique<ThreadPool>(threads);
  impl->prefill_rows = std::max(so.max_prefill, allocator ? kBlockTokens : size_t{512});
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
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

Result<ContextId> Engine::Share(std::string_view text, const Progress& progress) {
  return Share(text, ShareOptions{.progress = progress});
}

Result<ContextId> Engine::Share(std::string_view text, const ShareOptions& options) {
  Impl& m = *impl_;
  CHORUS_ASSIGN_OR_RETURN(std::vector<int32_t> tokens, m.DocumentTokens(text));
  if (Status s = CheckShareOptions(options, tokens.size(), m.n_ctx); !s.ok()) return s;
  const uint64_t hash = HashTokens(m.salt, tokens);
  if (auto it = m.by_hash.find(hash); it != m.by_hash.end()) {
    m.contexts[it->second].user_refs++;
    return it->second;
  }
  if (m.options.policy == "cocktail")
    return Status::Error("policy cocktail weights a shared context's blocks by their relevance to the questions: share "
                         "it with ShareFor(text, questions) (Share has no questions)");
  std::vector<PolicyLease> planned;
  CHORUS_ASSIGN_OR_RETURN(Impl::Document doc, m.PrefillDocument(tokens, nullptr, options.progress, options.readers,
                                                                options.reader_tokens, &planned));
  const ContextId id = m.AddContext(std::move(tokens), *doc.seq, hash, /*pin=*/true);
  if (m.comix) {
    m.contexts.at(id).unit = std::move(doc.unit);  // its blocks stay in CoMix's accounting
    m.contexts.at(id).planned = std::move(planned);
    m.contexts.at(id).reader_tokens = options.reader_tokens;
  }
  return id;
}

Result<ContextId> Engine::ShareFor(std::string_view text, const std::vector<std::string>& queries,
                                   const Progress& progress) {
  return ShareFor(text, queries, ShareOptions{.progress = progress});
}

Result<ContextId> Engine::ShareFor(std::string_view text, const std::vector<std::string>& queries,
                                   const ShareOptions& options) {
  Impl& m = *impl_;
  const Progress& progress = options.progress;
  CHORUS_ASSIGN_OR_RETURN(std::vector<int32_t> tokens, m.DocumentTokens(text));
  if (Status s = CheckShareOptions(options, tokens.size(), m.n_ctx); !s.ok()) return s;
  if (m.options.policy == "cocktail" &&
      std::all_of(queries.begin(), queries.end(),
                  [](const std::string& q) { return q.find_first_not_of(" \t\r\n") == std::string::npos; }))
    return Status::Error("policy cocktail needs at least one non-empty question (its relevance to each chunk weights "
                         "the context's blocks); got {} question(s), none with text", queries.size());
  if (!m.encoder) {  // first use: the installed sentence encoder, else the model's own hidden states
    CHORUS_ASSIGN_OR_RETURN(m.encoder, OpenCocktailEncoder(m.options.encoder_path, m.options.model_path, *m.model,
                                                           *m.fwd, *m.pool));
  }
  const CocktailOptions co{.alpha = m.options.cocktail_alpha, .beta = m.options.cocktail_beta,
                           .chunk_tokens = m.options.cocktail_chunk_tokens};
  CHORUS_ASSIGN_OR_RETURN(CocktailPlan plan, PlanCocktail(m.model->tokenizer(), tokens, queries, *m.encoder, co));
  const size_t sink = m.shared_cfg.sink_blocks;
  if (m.options.policy == "cocktail") return m.ShareRelevant(std::move(tokens), queries, plan, options);
  ChunkMapReport rep{.encoder = plan.encoder, .blocks = ChunkMapString(plan.blocks, sink),
                     .chunks = plan.similarity.size(), .chunk_tokens = co.chunk_tokens,
                     .s_min = float(plan.thresholds.s_min), .s_max = float(plan.thresholds.s_max),
                     .t_low = float(plan.thresholds.t_low), .t_high = float(plan.thresholds.t_high),
                     .search_seconds = plan.search_seconds};
  for (size_t b = 0; b < tokens.size() / kBlockTokens; ++b) {  // sealed blocks only
    const char c = rep.blocks[b];
    (c == 'S' ? rep.sink : c == 'F' ? rep.fp16 : c == '4' ? rep.int4 : rep.int2)++;
  }
  const uint64_t hash = HashTokens(m.salt ^ 0xc0c7a11, tokens, rep.blocks);
  if (auto it = m.by_hash.find(hash); it != m.by_hash.end()) {
    m.contexts[it->second].user_refs++;
    return it->second;
  }
  Timer t_prefill;
  auto map = std::make_shared<CocktailPolicy>(plan.blocks, sink);
  CHORUS_ASSIGN_OR_RETURN(Impl::Document doc, m.PrefillDocument(tokens, map, progress));
  rep.prefill_seconds = t_prefill.Seconds();
  // Not pinned in the prefix cache: its blocks' precision was chosen for these queries.
  const ContextId id = m.AddContext(std::move(tokens), *doc.seq, hash, /*pin=*/false);
  m.contexts.at(id).cocktail = std::move(map);
  Timer t_reorder;
  SortBlocksByFormat(m.contexts.at(id).tables, m.store->pool(), m.model->config().layer_window);
  rep.reorder_seconds = t_reorder.Seconds();
  m.chunk_maps[id] = std::move(rep);
  return id;
}

// chorus's Cocktail: the document is one allocator unit whose blocks are weighted by relevance.
Result<ContextId> Engine::Impl::ShareRelevant(std::vector<int32_t> tokens, const std::vector<std::string>& queries,
                                              const CocktailPlan& plan, const ShareOptions& share) {
  const size_t sink = shared_cfg.sink_blocks, chunk = options.cocktail_chunk_tokens;
  const std::vector<float> relevance = BlockRelevance(plan.similarity, chunk, tokens.size());
  ChunkMapReport rep{.encoder = plan.encoder, .blocks = RelevanceLevels(relevance, sink),
                     .chunks = plan.similarity.size(), .chunk_tokens = chunk,
                     .s_min = float(plan.thresholds.s_min), .s_max = float(plan.thresholds.s_max),
                     .search_seconds = plan.search_seconds, .policy = "cocktail"};
  std::string key;  // the same text for the same questions is the same context (as Share: readers aside)
  for (const std::string& q : queries) key += q + '\n';
  const uint64_t hash = HashTokens(salt ^ 0xa110ca7e, tokens, key);
  if (auto it = by_hash.find(hash); it != by_hash.end()) {
    contexts[it->second].user_refs++;
    return it->second;
  }
  Timer t_prefill;
  std::vector<PolicyLease> planned;
  CHORUS_ASSIGN_OR_RETURN(Document doc, PrefillDocument(tokens, nullptr, share.progress, share.readers,
                                                        share.reader_tokens, &planned, relevance));
  const KvSequence* seq = doc.seq.get();
  rep.prefill_seconds = t_prefill.Seconds();
  // What the allocator handed out and what the store's blocks hold, per layer, in token order.
  const BlockPool& bp = store->pool();
  const size_t full = tokens.size() / kBlockTokens;
  const auto bits = [&](KvFormat f) {
    if (f == KvFormat::kF16) return 'F';
    for (int b : {2, 3, 4, 8})
      if (ComixFormat(comix->options().family, b) == f) return char('0' + b);
    return '?';
  };
  for (size_t l = 0; l < model->config().n_layer; ++l) {
    rep.alloc_k.push_back(comix->SealedBits(seq->id(), l, KvSide::kKey));
    rep.alloc_v.push_back(comix->SealedBits(seq->id(), l, KvSide::kValue));
    std::string k(full, '.'), v(full, '.');  // '.': freed by a sliding-window layer
    for (size_t j = seq->first_block(l); j < full; ++j) {
      k[j] = bits(bp.meta(seq->block(l, j)).k_format);
      v[j] = bits(bp.meta(seq->block(l, j)).v_format);
    }
    rep.stored_k.push_back(std::move(k));
    rep.stored_v.push_back(std::move(v));
  }
  // Not pinned in the prefix cache (its bits were chosen for these questions), nor reordered.
  const ContextId id = AddContext(std::move(tokens), *seq, hash, /*pin=*/false);
  contexts.at(id).unit = std::move(doc.unit);  // its blocks stay in the allocator's accounting
  contexts.at(id).planned = std::move(planned);
  contexts.at(id).reader_tokens = share.reader_tokens;
  chunk_maps[id] = std::move(rep);
  return id;
}

const ChunkMapReport* Engine::chunk_map(ContextId context) const {
  if (!impl_->contexts.count(context)) return nullptr;
  auto it = impl_->chunk_maps.find(context);
  return it == impl_->chunk_maps.end() ? nullptr : &it->second;
}

void Engine::Release(ContextId context) {
  auto it = impl_->contexts.find(context);
  if (it == impl_->contexts.end() || it->second.user_refs == 0) return;
  it->second.user_refs--;
  impl_->CollectContexts();
}

Result<Engine::ScoreResult> Engine::Score(ContextId context, std::string_view text) {
  const std::vector<int32_t> tokens = impl_->model->tokenizer().Encode(text, false, false);
  return Score(context, std::span<const int32_t>(tokens));
}

Result<Engine::ScoreResult> Engine::Score(ContextId context, std::span<const int32_t> tokens) {
  Impl& m = *impl_;
  auto it = m.contexts.find(context);
  if (it == m.contexts.end()) return Status::Error("unknown or freed context {}", context);
  const Impl::Context& ctx = it->second;
  const size_t V = m.model->config().n_vocab;
  for (int32_t t : tokens)
    if (t < 0 || static_cast<size_t>(t) >= V) return Status::Error("token id {} outside the vocabulary", t);
  if (tokens.size() < 2) return Status::Error("the text to score needs at least 2 tokens");
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
    if (std::string why; !m.MakeRoom(need, &why))
      return Status::Error("scoring {} tokens needs up to {} bytes of KV, but {}", tokens.size(), need, why);
  }
  auto seq = m.store->NewSequence(cap, {.tables = ctx.tables, .first = ctx.first});
  PolicyLease lease(nullptr, m.comix.get(), seq->id());  // declared after seq: ends first
  if (m.comix)
    CHORUS_RETURN_IF_ERROR(lease.AddUnit(ctx.tokens.size() + tokens.size() - borrowed, borrowed, 1.0, "scored text"));
  if (borrowed < ctx.tokens.size())
    CHORUS_RETURN_IF_ERROR(m.fwd->Run(std::span<const int32_t>(ctx.tokens).subspan(borrowed), *seq, *m.pool,
                                      LogitsFor::kLast, nullptr));
  ScoreResult r;
  std::vector<float> logits(std::min<size_t>(512, tokens.size()) * V);
  for (size_t done = 0, n = 0; done < tokens.size(); done += n) {
    // The first piece completes the context's partial block: every Append starts at a block
    // boundary (the projection's prefill).
    n = std::min<size_t>(512, tokens.size() - done);
    if (seq->size() % kBlockTokens) n = std::min(n, kBlockTokens - seq->size() % kBlockTokens);
    CHORUS_RETURN_IF_ERROR(m.fwd->Run(tokens.subspan(done, n), *seq, *m.pool, LogitsFor::kAll, logits.data()));
    for (size_t j = 0; j < n && done + j + 1 < tokens.size(); ++j) {
      const float* row = logits.data() + j * V;
      r.nll -= row[tokens[done + j + 1]] - LogSumExp(row, V);
      ++r.count;
    }
  }
  return r;
}

EngineKvReport Engine::KvReport() const {
  const Impl& m = *impl_;
  EngineKvReport r;
  for (const auto& [id, c] : m.contexts) r.shared_bytes += c.bytes;
  for (const auto& [id, a] : m.requests)
    if (a.seq) r.private_bytes += m.SequenceOwnBytes(*a.seq);
  r.total_bytes = m.store->held();
  r.overhead_bytes = m.OverheadBytes();
  r.high_water_bytes = m.store->high_water();
  r.projected_bytes = m.comix && m.store->budget() ? m.comix->ProjectedBytes() : m.store->held() + m.Reserved();
  r.budget_bytes = m.store->budget();
  return r;
}

EngineStats Engine::Stats() const {
  const Impl& m = *impl_;
  EngineStats s = m.counters;
  for (const auto& [id, a] : m.requests) {
    s.waiting += a.state.phase == AgentPhase::kWaiting;
    s.prefilling += a.state.phase == AgentPhase::kPrefill;
    s.decoding += a.state.phase == AgentPhase::kDecode;
  }
  const PrefixCache::Report cr = m.cache->Stats();
  s.cached_blocks = cr.blocks;
  s.evicted_blocks = cr.evicted_blocks;
  s.total_bytes = m.store->Usage().total();
  s.pinned_bytes = cr.pinned_bytes;
  for (const auto& [id, c] : m.contexts)
    if (c.keys.empty()) s.pinned_bytes += c.bytes;  // Cocktail contexts: held, not in the cache
  s.cached_bytes = cr.idle_bytes;
  s.shared_bytes = cr.pinned_bytes + cr.idle_bytes + cr.active_bytes;
  for (const auto& [id, c] : m.contexts)
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
  if (m.remote) {  // the engine's counters and the store thread's
    s.remote = m.remote_counters;
    const RedisStoreStats rs = m.remote->Stats();
    s.remote.up = rs.up;
    s.remote.published_bytes = rs.published_bytes;
    s.remote.published_blocks = rs.published_values;
    s.remote.publish_dropped = rs.publish_dropped;
    for (const auto& [kind, n] : rs.errors) s.remote.errors[kind] += n;
  }
  return s;
}

std::string Engine::AllocationReport(bool events) const {
  return impl_->comix ? impl_->comix->Report(events) : "";
}

Engine::AllocationStats Engine::AllocationTiming() const {
  if (!impl_->comix) return {};
  const ComixTiming t = impl_->comix->Timing();
  return {.count = t.count, .mean_us = t.mean_us, .max_us = t.max_us};
}

size_t Engine::ContextTokens(ContextId context) const {
  auto it = impl_->contexts.find(context);
  return it == impl_->contexts.end() ? 0 : it->second.tokens.size();
}

size_t Engine::Fp16Bytes(size_t tokens) const { return impl_->fp16_bytes(tokens); }
size_t Engine::live_contexts() const { return impl_->contexts.size(); }

std::vector<int32_t> Engine::Tokenize(std::string_view text, bool add_special, bool parse_special) const {
  return impl_->model->tokenizer().Encode(text, add_special, parse_special);
}

Result<std::string> Engine::RenderChat(const std::vector<ChatTurn>& messages) const {
  auto tmpl = impl_->model->chat_template();
  if (!tmpl) return Status::Error("the model has no chat template (tokenizer.chat_template): use completions");
  std::vector<ChatMessage> msgs;
  for (const ChatTurn& t : messages) msgs.push_back({t.role, t.content});
  return ApplyChatTemplate(*tmpl, msgs, /*add_generation_prompt=*/true);
}

size_t Engine::context_size() const { return impl_->n_ctx; }
size_t Engine::vocab_size() const { return impl_->model->config().n_vocab; }

std::vector<ContextId> Engine::Contexts() const {
  std::vector<ContextId> ids;
  for (const auto& [id, c] : impl_->contexts) ids.push_back(id);
  return ids;
}

size_t Engine::ContextBytes(ContextId context) const {
  auto it = impl_->contexts.find(context);
  return it == impl_->contexts.end() ? 0 : it->second.bytes;
}
const std::string& Engine::model_name() const { return impl_->model->config().name; }
std::string Engine::fingerprint() const { return fmt::format("{:016x}", impl_->salt); }

}  // namespace chorus
