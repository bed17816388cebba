// Engine: shared contexts (prefilled once, compressed, frozen), agents on top of them, and the
// batched step. The only place that knows the model, the KV layer and the policies together.
#include "chorus/engine.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <map>
#include <set>
#include <thread>

#include "engine/cocktail_plan.h"   // PlanCocktail, OpenTextEncoder, OpenCocktailEncoder
#include "engine/kv_config.h"       // MakeKvConfig
#include "kv/kv_batch.h"            // KvBatch
#include "kv/kv_store.h"            // KvStore, KvSequence
#include "model/forward.h"          // ForwardPass
#include "model/model.h"            // Model
#include "model/sampler.h"          // Sampler
#include "ops/elementwise.h"         // LogSumExp
#include "policy/cocktail_policy.h"  // CocktailPolicy
#include "policy/comix_policy.h"    // ComixPolicy
#include "policy/uniform_policy.h"  // UniformPolicy
#include "util/timer.h"

namespace chorus {
namespace {

// Shared-context blocks get the shared formats (or their context's Cocktail map), every other
// sequence the private ones.
class RoutingPolicy : public PrecisionPolicy {
 public:
  RoutingPolicy(const KvConfig& shared, const KvConfig& priv)
      : shared_(shared.k, shared.v, shared.sink_blocks), private_(priv.k, priv.v, priv.sink_blocks) {}
  BlockFormats FormatFor(const BlockInfo& info) override {
    if (auto it = cocktail_.find(info.seq_id); it != cocktail_.end()) return it->second->FormatFor(info);
    if (all_) return all_->FormatFor(info);
    return shared_ids_.count(info.seq_id) ? shared_.FormatFor(info) : private_.FormatFor(info);
  }
  void Observe(const Observation& obs) override {
    if (all_) all_->Observe(obs);
  }
  void UseForAll(PrecisionPolicy* p) { all_ = p; }  // comix: one policy for every sequence
  void MarkShared(uint64_t seq_id) { shared_ids_.insert(seq_id); }
  void SetCocktail(uint64_t seq_id, std::unique_ptr<CocktailPolicy> p) { cocktail_[seq_id] = std::move(p); }
  void Forget(uint64_t seq_id) {
    shared_ids_.erase(seq_id);
    cocktail_.erase(seq_id);
  }

 private:
  UniformPolicy shared_, private_;
  std::set<uint64_t> shared_ids_;
  PrecisionPolicy* all_ = nullptr;
  std::map<uint64_t, std::unique_ptr<CocktailPolicy>> cocktail_;
};

size_t SequenceBytes(const KvSequence& s, const BlockPool& pool, size_t n_layer) {
  size_t b = s.window_bytes() + s.table_bytes();
  for (size_t l = 0; l < n_layer; ++l)
    for (BlockId id : s.blocks(l)) b += BlockPool::BlockCost(pool.meta(id).k_bytes, pool.meta(id).v_bytes);
  return b;
}

}  // namespace

struct Engine::Impl {
  EngineOptions options;
  std::unique_ptr<Model> model;
  KvConfig shared_cfg, private_cfg;
  std::unique_ptr<RoutingPolicy> policy;
  std::unique_ptr<ComixPolicy> comix;  // set with --policy comix
  std::unique_ptr<KvStore> store;
  std::unique_ptr<ForwardPass> fwd;
  std::unique_ptr<ThreadPool> pool;
  size_t n_ctx = 0;
  std::vector<float> logits;  // (rows, n_vocab)

  // A shared document's tokens (special tokens parsed), or why it cannot be shared.
  Result<std::vector<int32_t>> DocumentTokens(std::string_view text) const {
    std::vector<int32_t> tokens = model->tokenizer().Encode(text, /*add_special=*/true, /*parse_special=*/true);
    if (tokens.empty()) return Status::Error("the shared document is empty");
    if (tokens.size() >= n_ctx)
      return Status::Error("the document has {} tokens but an agent's context holds {} (document + prompt + answer)",
                           tokens.size(), n_ctx);
    return tokens;
  }

  struct Context {
    std::shared_ptr<KvSequence> seq;
    uint64_t hash = 0;
    size_t user_refs = 0;
    size_t tokens = 0;
  };
  std::map<ContextId, Context> contexts;
  std::map<uint64_t, ContextId> by_hash;
  ContextId next_context = 1;
  std::unique_ptr<TextEncoder> encoder;             // Cocktail's, opened on first use
  std::map<ContextId, ChunkMapReport> chunk_maps;   // Cocktail contexts (stale ids are never reused)

  struct Agent {
    std::unique_ptr<KvSequence> seq;
    std::shared_ptr<KvSequence> context;
    std::unique_ptr<Sampler> sampler;
    AgentOptions options;
    AgentState state;
    size_t reserved_bytes = 0;  // projected bytes still to be used (budget admission)
    Timer timer;
  };
  std::map<AgentId, Agent> agents;
  AgentId next_agent = 1;

  size_t fp16_bytes(size_t tokens) const {
    const ModelConfig& c = model->config();
    return tokens * c.n_layer * c.kv_dim() * 2 * sizeof(uint16_t);
  }

  // Bytes an agent's own KV will take for `tokens` tokens at the private formats (blocks + window).
  size_t ProjectedBytes(size_t tokens) const {
    const ModelConfig& c = model->config();
    const KvGeometry g = store->geometry();
    const size_t block = BlockPool::BlockCost(KvBlockBytes(private_cfg.k, KvSide::kKey, g),
                                              KvBlockBytes(private_cfg.v, KvSide::kValue, g));
    // Window: ≤ 32 stored rows per layer (K and V), plus one layer's native rows while a step runs.
    const WindowFormat wf = store->options().window;
    const size_t rb = WindowRowBytes(wf, c.n_head_kv, c.head_dim);
    const size_t window = c.n_layer * kBlockTokens * 2 * rb +
                          kBlockTokens * 2 * (c.kv_dim() * sizeof(uint16_t) + (wf == WindowFormat::kF16 ? 0 : rb));
    return c.n_layer * ((tokens / kBlockTokens) * block + (tokens / kBlockTokens + 1) * sizeof(BlockId)) + window;
  }

  size_t Reserved() const {
    size_t r = 0;
    for (const auto& [id, a] : agents)
      if (!a.state.done) r += a.reserved_bytes;
    return r;
  }

  void CollectContexts() {
    for (auto it = contexts.begin(); it != contexts.end();) {
      if (it->second.user_refs == 0 && it->second.seq.use_count() == 1) {
        policy->Forget(it->second.seq->id());
        if (comix) comix->RemoveUnit(it->second.seq->id());
        by_hash.erase(it->second.hash);
        it = contexts.erase(it);
      } else {
        ++it;
      }
    }
  }

  // Samples the next token of agent a from `row` and records it; finishes the agent if it stops.
  void Accept(Agent& a, const float* row) {
    const Tokenizer& tok = model->tokenizer();
    const int32_t t = a.sampler->Sample(row, model->config().n_vocab);
    if (tok.IsEndOfGeneration(t) && !a.options.ignore_eog) {
      Finish(a, "end of generation");
      return;
    }
    a.state.tokens.push_back(t);
    a.state.text += tok.TokenToPiece(t);
    a.state.peak_private_bytes =
        std::max(a.state.peak_private_bytes, SequenceBytes(*a.seq, store->pool(), model->config().n_layer));
    if (a.state.tokens.size() >= static_cast<size_t>(a.options.max_tokens)) Finish(a, "max tokens");
    else if (a.seq->size() >= a.seq->capacity()) Finish(a, "context full");
  }

  // comix: a shared context read by k running agents is one unit of weight k.
  void UpdateReaders(const KvSequence* ctx) {
    if (!comix || !ctx) return;
    size_t k = 0;
    for (const auto& [id, a] : agents) k += !a.state.done && a.context.get() == ctx;
    comix->SetWeight(ctx->id(), double(std::max<size_t>(1, k)));
  }

  void Finish(Agent& a, const char* why) {
    a.state.done = true;
    a.state.stop = why;
    a.state.seconds = a.timer.Seconds();
    a.state.peak_private_bytes =
        std::max(a.state.peak_private_bytes, SequenceBytes(*a.seq, store->pool(), model->config().n_layer));
    if (comix) comix->RemoveUnit(a.seq->id());  // its bytes go to the others
    a.seq.reset();  // its private blocks go back to the pool now
    const KvSequence* ctx = a.context.get();
    a.context.reset();
    UpdateReaders(ctx);
    a.reserved_bytes = 0;
    CollectContexts();
  }
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() {
  if (!impl_) return;
  impl_->agents.clear();
  impl_->contexts.clear();
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
  CHORUS_RETURN_IF_ERROR(ValidateCocktailOptions({.alpha = options.cocktail_alpha, .beta = options.cocktail_beta,
                                                   .chunk_tokens = options.cocktail_chunk_tokens}));
  if (!options.encoder_path.empty() && options.encoder_path != kHiddenStateEncoder) {
    auto enc = OpenTextEncoder(options.encoder_path);
    if (!enc.ok()) return enc.status();
    impl->encoder = std::move(enc).value();
  }
  impl->policy = std::make_unique<RoutingPolicy>(impl->shared_cfg, impl->private_cfg);
  if (options.policy == "comix") {
    ComixOptions co{.n_layer = c.n_layer, .n_head = c.n_head, .n_head_kv = c.n_head_kv, .head_dim = c.head_dim,
                    .budget_bytes = options.kv_budget_bytes, .avg_bits = options.kv_avg_bits,
                    .sink_blocks = options.sink_blocks,
                    .join_reserve = options.kv_budget_bytes ? 0.25 : 0.0};  // room for agents joining later
    if (options.comix_family == "kivi") co.family = ComixFamily::kKivi;
    else if (options.comix_family != "tq")
      return Status::Error("unknown comix family '{}' (valid: tq, kivi)", options.comix_family);
    CHORUS_RETURN_IF_ERROR(ComixPolicy::Validate(co));
    impl->comix = std::make_unique<ComixPolicy>(co);
    impl->policy->UseForAll(impl->comix.get());
  } else if (options.policy != "uniform" && options.policy != "cocktail") {
    return Status::Error("unknown KV policy '{}' (valid: uniform, comix, cocktail)", options.policy);
  }
  // "auto": q8 rows unless the shared formats are f16 (the uncompressed baseline stays exact).
  const bool f16_shared = options.shared_k == "f16" && options.shared_v == "f16" && options.policy == "uniform";
  auto window = ParseWindowFormat(options.kv_window == "auto" ? (f16_shared ? "f16" : "q8") : options.kv_window);
  if (!window.ok()) return window.status().Context("kv_window");
  KvStoreOptions so{.n_layer = c.n_layer,
                    .shape = {.n_head = c.n_head, .n_head_kv = c.n_head_kv, .head_dim = c.head_dim},
                    .budget_bytes = options.kv_budget_bytes,
                    .window = *window,
                    .layer_window = c.layer_window};
  impl->store = std::make_unique<KvStore>(so, impl->policy.get());
  // CoMix decides a block's bits from every layer observed so far: a one-block micro-batch lets
  // all layers see a document's first tokens before most of its blocks are sealed (512 at once
  // would seal layer 0's blocks knowing only layer 0 — the allocation then follows layer order).
  impl->fwd = std::make_unique<ForwardPass>(*impl->model, options.policy == "comix" ? kBlockTokens : 512);
  const int threads = options.threads > 0 ? options.threads : std::max(1u, std::thread::hardware_concurrency());
  impl->pool = std::make_unique<ThreadPool>(threads);
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Result<ContextId> Engine::Share(std::string_view text, const Progress& progress) {
  Impl& m = *impl_;
  CHORUS_ASSIGN_OR_RETURN(const std::vector<int32_t> tokens, m.DocumentTokens(text));
  const std::string& name = m.model->config().name;
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, name.data(), name.size());
  XXH3_64bits_update(st, &m.model->config().n_vocab, sizeof(size_t));
  XXH3_64bits_update(st, tokens.data(), tokens.size() * sizeof(int32_t));
  const uint64_t hash = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  if (auto it = m.by_hash.find(hash); it != m.by_hash.end()) {
    m.contexts[it->second].user_refs++;
    return it->second;
  }
  std::shared_ptr<KvSequence> seq = m.store->NewSequence(tokens.size());
  m.policy->MarkShared(seq->id());
  if (m.comix) {
    if (Status s = m.comix->AddUnit(seq->id(), tokens.size(), 0, 1.0, fmt::format("shared #{}", m.next_context));
        !s.ok()) {
      m.policy->Forget(seq->id());
      return s.Context("shared document");
    }
  }
  for (size_t done = 0; done < tokens.size(); done += 512) {
    const size_t n = std::min<size_t>(512, tokens.size() - done);
    const bool last = done + n == tokens.size();
    m.logits.resize(m.model->config().n_vocab);
    Status s = m.fwd->Run(std::span<const int32_t>(tokens).subspan(done, n), *seq, *m.pool, LogitsFor::kLast,
                          last ? m.logits.data() : nullptr);
    if (!s.ok()) {
      m.policy->Forget(seq->id());
      if (m.comix) m.comix->RemoveUnit(seq->id());
      return s.Context("prefilling the shared document");
    }
    if (progress) progress(done + n, tokens.size());
  }
  seq->Freeze();
  const ContextId id = m.next_context++;
  m.contexts[id] = Impl::Context{std::move(seq), hash, 1, tokens.size()};
  m.by_hash[hash] = id;
  return id;
}

Result<ContextId> Engine::ShareFor(std::string_view text, const std::vector<std::string>& queries,
                                   const Progress& progress) {
  Impl& m = *impl_;
  CHORUS_ASSIGN_OR_RETURN(const std::vector<int32_t> tokens, m.DocumentTokens(text));
  if (!m.encoder) {  // first use: the installed sentence encoder, else the model's own hidden states
    CHORUS_ASSIGN_OR_RETURN(m.encoder, OpenCocktailEncoder(m.options.encoder_path, m.options.model_path, *m.model,
                                                           *m.fwd, *m.pool));
  }
  const CocktailOptions co{.alpha = m.options.cocktail_alpha, .beta = m.options.cocktail_beta,
                           .chunk_tokens = m.options.cocktail_chunk_tokens};
  CHORUS_ASSIGN_OR_RETURN(CocktailPlan plan, PlanCocktail(m.model->tokenizer(), tokens, queries, *m.encoder, co));
  const size_t sink = m.shared_cfg.sink_blocks;
  ChunkMapReport rep{.encoder = plan.encoder, .blocks = ChunkMapString(plan.blocks, sink),
                     .chunks = plan.similarity.size(), .chunk_tokens = co.chunk_tokens,
                     .s_min = float(plan.thresholds.s_min), .s_max = float(plan.thresholds.s_max),
                     .t_low = float(plan.thresholds.t_low), .t_high = float(plan.thresholds.t_high),
                     .search_seconds = plan.search_seconds};
  for (size_t b = 0; b < tokens.size() / kBlockTokens; ++b) {  // sealed blocks only
    const char c = rep.blocks[b];
    (c == 'S' ? rep.sink : c == 'F' ? rep.fp16 : c == '4' ? rep.int4 : rep.int2)++;
  }
  const std::string& name = m.model->config().name;
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, "cocktail", 8);
  XXH3_64bits_update(st, name.data(), name.size());
  XXH3_64bits_update(st, &m.model->config().n_vocab, sizeof(size_t));
  XXH3_64bits_update(st, tokens.data(), tokens.size() * sizeof(int32_t));
  XXH3_64bits_update(st, rep.blocks.data(), rep.blocks.size());
  const uint64_t hash = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  if (auto it = m.by_hash.find(hash); it != m.by_hash.end()) {
    m.contexts[it->second].user_refs++;
    return it->second;
  }
  Timer t_prefill;
  std::shared_ptr<KvSequence> seq = m.store->NewSequence(tokens.size());
  m.policy->SetCocktail(seq->id(), std::make_unique<CocktailPolicy>(plan.blocks, sink));
  for (size_t done = 0; done < tokens.size(); done += 512) {
    const size_t n = std::min<size_t>(512, tokens.size() - done);
    Status s = m.fwd->Run(std::span<const int32_t>(tokens).subspan(done, n), *seq, *m.pool, LogitsFor::kLast,
                          nullptr);
    if (!s.ok()) {
      m.policy->Forget(seq->id());
      return s.Context("prefilling the shared document");
    }
    if (progress) progress(done + n, tokens.size());
  }
  seq->Freeze();
  rep.prefill_seconds = t_prefill.Seconds();
  Timer t_reorder;
  CHORUS_RETURN_IF_ERROR(seq->ReorderByFormat());
  rep.reorder_seconds = t_reorder.Seconds();
  const ContextId id = m.next_context++;
  m.contexts[id] = Impl::Context{std::move(seq), hash, 1, tokens.size()};
  m.by_hash[hash] = id;
  m.chunk_maps[id] = std::move(rep);
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

Result<AgentId> Engine::Spawn(ContextId context, std::string_view prompt, const AgentOptions& options) {
  Impl& m = *impl_;
  std::shared_ptr<KvSequence> ctx;
  size_t ctx_tokens = 0;
  if (context != 0) {
    auto it = m.contexts.find(context);
    if (it == m.contexts.end()) return Status::Error("unknown or freed context {}", context);
    ctx = it->second.seq;
    ctx_tokens = it->second.tokens;
  }
  if (options.max_tokens < 1) return Status::Error("max_tokens must be >= 1, got {}", options.max_tokens);
  SamplingOptions so{.temperature = options.temperature, .top_k = options.top_k, .top_p = options.top_p,
                     .seed = options.seed};
  CHORUS_RETURN_IF_ERROR(ValidateSampling(so));
  const Tokenizer& tok = m.model->tokenizer();
  const std::vector<int32_t> tokens = tok.Encode(prompt, /*add_special=*/context == 0, /*parse_special=*/true);
  if (tokens.empty()) return Status::Error("the agent's prompt is empty");
  const size_t own = tokens.size() + static_cast<size_t>(options.max_tokens);
  if (ctx_tokens + own > m.n_ctx)
    return Status::Error("document ({}) + prompt ({}) + max_tokens ({}) = {} tokens exceed the context of {}",
                         ctx_tokens, tokens.size(), options.max_tokens, ctx_tokens + own, m.n_ctx);
  const size_t need = m.ProjectedBytes(own);
  const size_t budget = m.store->pool().budget();
  if (budget != 0 && !m.comix) {  // comix admits through its own 2-bit projection below
    const size_t used = m.store->Usage().total() + m.Reserved();
    if (used + need > budget)
      return Status::Error("agent refused: its KV needs about {} bytes ({} prompt + {} answer tokens at {}/{}), "
                           "but only {} of the {}-byte budget are free",
                           need, tokens.size(), options.max_tokens, KvFormatName(m.private_cfg.k),
                           KvFormatName(m.private_cfg.v), used > budget ? 0 : budget - used, budget);
  }
  Impl::Agent a;
  a.seq = m.store->NewSequence(own, ctx);
  a.context = ctx;
  if (m.comix)
    CHORUS_RETURN_IF_ERROR(m.comix->AddUnit(a.seq->id(), own, ctx_tokens, 1.0, fmt::format("agent {}", m.next_agent)));
  a.sampler = std::make_unique<Sampler>(so);
  a.options = options;
  a.state.prompt_tokens = tokens.size();
  a.reserved_bytes = need;
  m.logits.resize(m.model->config().n_vocab);
  if (Status s = m.fwd->Run(tokens, *a.seq, *m.pool, LogitsFor::kLast, m.logits.data()); !s.ok()) {
    if (m.comix) m.comix->RemoveUnit(a.seq->id());
    return s;
  }
  const AgentId id = m.next_agent++;
  Impl::Agent& placed = m.agents[id] = std::move(a);
  m.UpdateReaders(placed.context.get());
  m.Accept(placed, m.logits.data());
  return id;
}

Status Engine::Step() {
  Impl& m = *impl_;
  std::vector<Impl::Agent*> live;
  for (auto& [id, a] : m.agents)
    if (!a.state.done) live.push_back(&a);
  const size_t V = m.model->config().n_vocab;
  for (size_t b0 = 0; b0 < live.size(); b0 += 512) {
    const size_t n = std::min<size_t>(512, live.size() - b0);
    KvBatch batch(*m.store);
    std::vector<int32_t> tokens(n);
    for (size_t i = 0; i < n; ++i) {
      tokens[i] = live[b0 + i]->state.tokens.back();
      batch.Add(live[b0 + i]->seq.get(), 1);
    }
    m.logits.resize(n * V);
    CHORUS_RETURN_IF_ERROR(m.fwd->Run(tokens, batch, *m.pool, LogitsFor::kAll, m.logits.data()));
    for (size_t i = 0; i < n; ++i) m.Accept(*live[b0 + i], m.logits.data() + i * V);
  }
  return Status::Ok();
}

Result<Engine::ScoreResult> Engine::Score(ContextId context, std::string_view text) {
  const std::vector<int32_t> tokens = impl_->model->tokenizer().Encode(text, false, false);
  return Score(context, std::span<const int32_t>(tokens));
}

Result<Engine::ScoreResult> Engine::Score(ContextId context, std::span<const int32_t> tokens) {
  Impl& m = *impl_;
  auto it = m.contexts.find(context);
  if (it == m.contexts.end()) return Status::Error("unknown or freed context {}", context);
  const size_t V = m.model->config().n_vocab;
  for (int32_t t : tokens)
    if (t < 0 || static_cast<size_t>(t) >= V) return Status::Error("token id {} outside the vocabulary", t);
  if (tokens.size() < 2) return Status::Error("the text to score needs at least 2 tokens");
  if (it->second.tokens + tokens.size() > m.n_ctx)
    return Status::Error("context ({}) + text ({}) exceed the context of {}", it->second.tokens, tokens.size(),
                         m.n_ctx);
  auto seq = m.store->NewSequence(tokens.size(), it->second.seq);
  if (m.comix)
    CHORUS_RETURN_IF_ERROR(m.comix->AddUnit(seq->id(), tokens.size(), it->second.tokens, 1.0, "scored text"));
  struct Unregister {
    ComixPolicy* p;
    uint64_t id;
    ~Unregister() {
      if (p) p->RemoveUnit(id);
    }
  } unregister{m.comix.get(), seq->id()};
  ScoreResult r;
  std::vector<float> logits(std::min<size_t>(512, tokens.size()) * V);
  for (size_t done = 0; done < tokens.size(); done += 512) {
    const size_t n = std::min<size_t>(512, tokens.size() - done);
    CHORUS_RETURN_IF_ERROR(m.fwd->Run(tokens.subspan(done, n), *seq, *m.pool, LogitsFor::kAll, logits.data()));
    for (size_t j = 0; j < n && done + j + 1 < tokens.size(); ++j) {
      const float* row = logits.data() + j * V;
      r.nll -= row[tokens[done + j + 1]] - LogSumExp(row, V);
      ++r.count;
    }
  }
  return r;
}

size_t Engine::running() const {
  size_t n = 0;
  for (const auto& [id, a] : impl_->agents) n += !a.state.done;
  return n;
}

const AgentState* Engine::agent(AgentId id) const {
  auto it = impl_->agents.find(id);
  return it == impl_->agents.end() ? nullptr : &it->second.state;
}

EngineKvReport Engine::KvReport() const {
  const Impl& m = *impl_;
  EngineKvReport r;
  const size_t L = m.model->config().n_layer;
  for (const auto& [id, c] : m.contexts) r.shared_bytes += SequenceBytes(*c.seq, m.store->pool(), L);
  for (const auto& [id, a] : m.agents)
    if (a.seq) r.private_bytes += SequenceBytes(*a.seq, m.store->pool(), L);
  r.total_bytes = m.store->Usage().total();
  r.budget_bytes = m.store->pool().budget();
  return r;
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
  return it == impl_->contexts.end() ? 0 : it->second.tokens;
}

size_t Engine::Fp16Bytes(size_t tokens) const { return impl_->fp16_bytes(tokens); }

size_t Engine::live_contexts() const { return impl_->contexts.size(); }

}  // namespace chorus
