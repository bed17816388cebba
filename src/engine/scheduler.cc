// Scheduler: admission, the step's plan, the batched forward and each request's postprocess
// (scheduler.h).
#include "engine/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kv/kv_batch.h"          // KvBatch
#include "kv/kv_footprint.h"      // KvFootprint
#include "ops/elementwise.h"      // LogSumExpFast

namespace chorus {

Result<AgentId> Scheduler::NewRequest(std::vector<int32_t> prompt, ContextId context, const AgentOptions& options) {
  if (options.max_tokens < 1) return Status::Error("max_tokens must be >= 1, got {}", options.max_tokens);
  SamplingOptions so{.temperature = options.temperature, .top_k = options.top_k, .top_p = options.top_p,
                     .seed = options.seed};
  CHORUS_RETURN_IF_ERROR(ValidateSampling(so));
  if (prompt.empty()) return Status::Error("the agent's prompt is empty");
  const size_t V = core_.model->config().n_vocab;
  for (int32_t t : prompt)
    if (t < 0 || static_cast<size_t>(t) >= V) return Status::Error("prompt token id {} is outside the vocabulary [0, {})", t, V);
  if (!options.forced_tokens.empty()) {
    if (options.forced_tokens.size() != static_cast<size_t>(options.max_tokens))
      return Status::Error("{} forced tokens but max_tokens is {} (they must be equal)", options.forced_tokens.size(),
                           options.max_tokens);
    for (int32_t t : options.forced_tokens)
      if (t < 0 || static_cast<size_t>(t) >= V) return Status::Error("forced token id {} is outside the vocabulary [0, {})", t, V);
  }
  const size_t total = prompt.size() + static_cast<size_t>(options.max_tokens);
  if (total > core_.n_ctx)
    return Status::Error("prompt ({} tokens) + max_tokens ({}) = {} tokens exceed the context of {}", prompt.size(),
                         options.max_tokens, total, core_.n_ctx);
  Request a;
  a.context = context;
  a.cacheable = context == 0 || !contexts_.at(context).keys.empty();
  a.scope = core_.ScopeOf(options.scope);
  if (a.cacheable) a.keys = PrefixCache::Keys(prompt, a.scope.salt);
  a.sampler = std::make_unique<Sampler>(so);
  for (const auto& [t, b] : options.logit_bias)
    if (t < 0 || static_cast<size_t>(t) >= V || !std::isfinite(b) || b < -100 || b > 100)
      return Status::Error("logit_bias: token {} must be in [0, {}) and its bias in [-100, 100], got {}", t, V, b);
  if (!(std::fabs(options.presence_penalty) <= 2) || !(std::fabs(options.frequency_penalty) <= 2))
    return Status::Error("presence and frequency penalties must be in [-2, 2], got {} and {}", options.presence_penalty,
                         options.frequency_penalty);
  if (options.top_logprobs > 20) return Status::Error("top_logprobs must be at most 20, got {}", options.top_logprobs);
  if (options.constraint.kind != OutputConstraint::Kind::kNone && options.forced_tokens.empty()) {
    CHORUS_ASSIGN_OR_RETURN(a.grammar, core_.constraints->Start(options.constraint));
    a.mask.resize(MaskWords(static_cast<int32_t>(V)));
  }
  a.options = options;
  a.state.prompt_tokens = prompt.size();
  a.prompt = std::move(prompt);
  // Can it ever run? Its own KV (nothing borrowed) must fit next to the pinned contexts.
  const size_t budget = core_.store->budget();
  if (budget != 0 && !core_.comix) {
    size_t pinned = KvFootprint(core_.store->options()).Overhead(static_cast<size_t>(core_.pool->size()));
    for (const auto& [cid, c] : contexts_.all()) pinned += c.bytes;
    const size_t best = context ? contexts_.at(context).tokens.size() / kBlockTokens : 0;
    const size_t need =
        core_.ProjectedBytes(a.prompt.size(), options.max_tokens, std::min(best, (a.prompt.size() - 1) / kBlockTokens));
    if (need + pinned > budget)
      return Status::Error("request refused: its KV needs about {} bytes ({} prompt + {} answer tokens), more than the "
                           "{}-byte budget leaves beside {} bytes of pinned contexts and the store's scratch",
                           need, a.prompt.size(), options.max_tokens, budget, pinned);
  }
  const AgentId id = next_request_++;
  requests_.emplace(id, std::move(a));
  return id;
}

size_t Scheduler::Reserved() const {
  size_t r = core_.store->pool().SlackAllowance();  // the pool's slot table may grow by a chunk
  for (const auto& [id, a] : requests_)
    if (a.seq) {
      const size_t held = core_.SequenceOwnBytes(*a.seq);
      r += a.reserved_bytes > held ? a.reserved_bytes - held : 0;  // what it has yet to take
    }
  return r;
}

size_t Scheduler::ScopeBytes(uint64_t scope) const {
  size_t r = core_.cache->ScopeBytes(scope);
  for (const auto& [id, a] : requests_)
    if (a.seq && a.scope.id == scope) r += a.reserved_bytes;
  return r;
}

bool Scheduler::MakeRoom(size_t need, std::string* why) {
  const size_t budget = core_.store->budget();
  if (budget == 0) return true;
  auto used = [&] { return core_.store->held() + Reserved(); };
  // Idle cached blocks go first (an evicted block's pool slot stays: evict until it fits or none is left).
  while (used() + need > budget && core_.cache->Evict(used() + need - budget) > 0) {}
  const size_t u = used();
  if (u + need <= budget) return true;
  *why = fmt::format("{} of the {}-byte budget are free ({} bytes held, {} more still to be taken by running requests)",
                     u > budget ? 0 : budget - u, budget, core_.store->held(), u - core_.store->held());
  return false;
}

void Scheduler::UpdateReaders(ContextId context) {
  const Context* c = contexts_.Find(context);
  if (!core_.comix || !c || !c->unit.has_unit()) return;
  size_t k = Readers(context);
  k += c->planned.size();  // readers still to come weigh as much as the running ones
  core_.comix->SetWeight(c->unit.id(), double(std::max<size_t>(1, k)));
}

// ---- admission -----------------------------------------------------------------------------

Result<Scheduler::Admit> Scheduler::TryAdmit(AgentId id, Request& a) {
  const size_t len = a.prompt.size();
  const size_t max_borrow = (len - 1) / kBlockTokens;  // at least one token is computed: its logits
  EngineCore::Borrow borrow;
  BorrowedBlocks borrowed;
  if (a.context) {  // all of the context's full blocks (its prompt is the context + at least a token)
    const Context& ctx = contexts_.at(a.context);
    borrowed = {.tables = ctx.tables, .first = ctx.first};
  } else if (a.cacheable) {
    borrow = core_.BorrowFromCache(a.keys, max_borrow);
    borrowed = borrow.view();
  }
  const size_t k = borrowed.blocks();
  const size_t total = len + static_cast<size_t>(a.options.max_tokens);
  const size_t need = core_.ProjectedBytes(len, a.options.max_tokens, k, a.context && contexts_.at(a.context).cocktail);
  // Segments after the exact prefix: planned (their blocks referenced) before making room, so
  // eviction cannot take them either; a sequence's rows hold their holes too.
  SegmentPlan plan;
  if (UsesSegments(a))
    plan = PlanSegments(a.prompt, k * kBlockTokens, k ? a.keys[k - 1] : 0, *core_.cache, core_.store->pool(),
                        a.scope.salt, core_.salt, core_.model->config().n_layer,
                        SegmentRepair{.fraction = core_.options.segments.repair,
                                      .min_tokens = core_.options.segments.repair_min_tokens});
  // Its own KV is the projection less the planned runs' blocks (prompt blocks: the shared formats).
  const auto need_with = [&](const SegmentPlan& p) {
    const size_t s0 = core_.shared_cfg.sink_blocks, runs = core_.BlockBytes(s0, s0 + p.blocks(), s0 + p.blocks());
    return need - std::min(need, runs);
  };
  // The scope's quota (AgentOptions::kv_quota_bytes): its own idle cached blocks go first, then the
  // request is refused (a server answers 429). Another scope's blocks and requests are not touched.
  if (const size_t q = a.options.kv_quota_bytes; q != 0) {
    const size_t own = need_with(plan);
    if (const size_t u = ScopeBytes(a.scope.id); u + own > q) core_.cache->EvictScope(a.scope.id, u + own - q);
    if (const size_t u = ScopeBytes(a.scope.id); u + own > q) {
      a.state.quota_exceeded = true;
      return Status::Error(
          "KV quota exceeded: the request needs about {} bytes of KV and its scope holds {} bytes of its {}-byte "
          "quota after its idle cached blocks were evicted",
          own, u, q);
    }
  }
  // The borrowed blocks are referenced first, so making room cannot evict them.
  std::unique_ptr<KvSequence> seq = core_.store->NewSequence(total + plan.hole_allowance(), borrowed);
  std::string why;
  // The new sequence's bookkeeping is held already: only the rest of its projection is asked for.
  bool room = core_.comix || MakeRoom(need_with(plan) - std::min(need_with(plan), core_.SequenceOwnBytes(*seq)), &why);
  const auto running = [&] {
    return std::count_if(requests_.begin(), requests_.end(), [](const auto& kv) { return kv.second.seq != nullptr; });
  };
  if (!room && plan.runs() > 0 && running() == 0) {
    // Nothing runs that could free room, and the planned runs themselves may be what holds the
    // budget: without them the idle blocks can be evicted (progress first, reuse second).
    plan.Clear();
    seq = core_.store->NewSequence(total, borrowed);
    room = MakeRoom(need - std::min(need, core_.SequenceOwnBytes(*seq)), &why);
  }
  if (!room) {  // comix admits through its own 2-bit projection below
    last_refusal_ = fmt::format(
        "its KV needs up to {} bytes ({} prompt tokens, {} of them cached, + {} answer tokens "
        "at {}/{}), but {}",
        need, len, k * kBlockTokens, a.options.max_tokens, KvFormatName(core_.private_cfg.k),
        KvFormatName(core_.private_cfg.v), why);
    return Admit::kNotNow;
  }
  PolicyLease lease(core_.policy.get(), core_.comix.get(), seq->id());
  if (core_.comix) {
    // A reader the caller planned for (ShareOptions::readers) takes over its planned unit.
    std::vector<PolicyLease>* planned = a.context ? &contexts_.at(a.context).planned : nullptr;
    uint64_t took = 0;
    if (planned && !planned->empty()) {
      took = planned->back().id();
      planned->pop_back();  // its unit goes
    }
    const auto add = [&] {
      return lease.AddUnit(total - k * kBlockTokens, k * kBlockTokens, 1.0, fmt::format("agent {}", id));
    };
    Status s = add();
    if (!s.ok() && core_.cache->EvictableBytes() > 0) {  // CoMix counts idle cached blocks as held: free them
      core_.cache->Evict(core_.cache->EvictableBytes());
      s = add();
    }
    if (!s.ok()) {
      const Context& c = contexts_.at(a.context);
      if (took) {  // the reservation stays for a reader that fits
        Result<PolicyLease> u = contexts_.PlanReader(took, c.reader_tokens, c.tokens.size(), "planned reader");
        if (u.ok()) planned->push_back(std::move(u).value());
      }
      last_refusal_ = s.message();
      return Admit::kNotNow;
    }
  }
  lease.SetSharedBlocks(len / kBlockTokens);          // prompt blocks: the shared formats
  if (a.context && contexts_.at(a.context).cocktail)  // a Cocktail document's tail block: its map
    lease.SetCocktail(contexts_.at(a.context).cocktail, /*whole=*/false);
  if (a.cacheable) seq->set_keep_from(k * kBlockTokens);  // windowed layers keep blocks until cached
  a.seq = std::move(seq);
  a.lease = std::move(lease);
  a.prefilled = k * kBlockTokens;
  a.inserted = k;
  a.reserved_bytes = core_.comix ? 0 : need_with(plan);  // comix: CoMix's allocation holds the unit's bytes
  a.state.projected_private_bytes = a.reserved_bytes;
  a.state.cached_tokens = k * kBlockTokens;
  a.state.phase = AgentPhase::kPrefill;
  a.timer = Timer();
  core_.counters.prompt_tokens += len;
  core_.counters.prefix_queried_tokens += len;
  core_.counters.prefix_hit_tokens += k * kBlockTokens;
  if (a.cacheable) {
    core_.cache->Touch(std::span<const uint64_t>(a.keys).first(k));
    // What it will insert: its exact blocks, before its first segment.
    const size_t exact = std::max(k, std::min(a.keys.size(), plan.first_at() / kBlockTokens));
    core_.cache->MarkPending(id, std::span<const uint64_t>(a.keys).subspan(k, exact - k));
    std::vector<uint64_t> contents;
    for (size_t j = k; j < exact; ++j) contents.push_back(PrefixCache::BlockContentKey(a.prompt, j, a.scope.salt));
    core_.cache->MarkContentPending(id, contents);
  }
  if (!plan.empty()) {
    a.cont.open = a.cacheable;
    a.cont.block = plan.first_at() / kBlockTokens;  // no holes before the first run: rows = positions
    a.cont.pos = a.cont.block * kBlockTokens;
    a.cont.key = a.cont.block ? a.keys[a.cont.block - 1] : 0;
    core_.counters.segment_runs += plan.runs();
    core_.counters.segment_reused_tokens += plan.reused_tokens();
    core_.counters.segment_repaired_tokens += plan.repaired_tokens();
    a.state.repaired_tokens = plan.repaired_tokens();
  }
  a.segments = std::move(plan);
  AttachDueSegments(a);
  if (a.context) contexts_.at(a.context).hits++;
  UpdateReaders(a.context);
  return Admit::kAdmitted;
}

bool Scheduler::UsesSegments(const Request& a) const {
  const EngineOptions& options = core_.options;
  const ComixPolicy* comix = core_.comix.get();
  const Reuse r = a.options.reuse == Reuse::kDefault ? options.segments.reuse : a.options.reuse;
  return r == Reuse::kSegments && a.cacheable && !a.context && !comix && options.policy.is_uniform();
}

void Scheduler::AttachDueSegments(Request& a) {
  while (!a.segments.empty() && a.segments.next().at == a.prefilled) {
    const SegmentRun& r = a.segments.next();
    const size_t b0 = a.seq->size() / kBlockTokens;
    if (Status s = a.seq->Attach({.tables = r.tables, .shift = r.shift, .skip = r.skip}); !s.ok()) {
      // Nothing attached: the rest of the prompt is computed instead (counted as planned, not reused).
      core_.counters.segment_reused_tokens -= a.segments.reused_tokens() - a.state.reused_tokens;
      a.segments.Clear();
      return;
    }
    core_.cache->Touch(r.keys);
    for (size_t j = 0; j < r.sources.size(); ++j)
      a.attached_blocks[b0 + j] = {.source = r.sources[j], .shift = r.shift, .skip = uint8_t(j == 0 ? r.skip : 0)};
    a.prefilled += r.tokens;
    a.state.reused_tokens += r.tokens;
    a.segments.Advance();
  }
}

// AgentOptions::cache_answer: the sealed blocks after the prompt's, under keys chained over the prompt
// and the answer (only when every prompt block went in, no segment was attached, and no layer is
// windowed: a windowed layer has freed its old blocks).
void Scheduler::InsertAnswerBlocks(Request& a) {
  const ModelConfig& c = core_.model->config();
  const size_t prompt_blocks = a.prompt.size() / kBlockTokens;
  if (!a.options.cache_answer || !a.cacheable || a.inserted < prompt_blocks || a.segments.first_at() < a.prompt.size())
    return;
  for (size_t l = 0; l < c.n_layer; ++l)
    if (c.is_local(l)) return;
  std::vector<int32_t> run = a.prompt;  // the tokens whose KV the sequence holds
  run.insert(run.end(), a.state.tokens.begin(), a.state.tokens.end());
  run.resize(std::min(run.size(), a.seq->size()));
  const std::vector<uint64_t> keys = PrefixCache::Keys(run, core_.salt);
  const size_t upto = std::min(a.seq->sealed_blocks(0), keys.size());
  std::vector<BlockId> ids(c.n_layer);
  for (size_t j = a.inserted; j < upto; ++j) {
    for (size_t l = 0; l < c.n_layer; ++l) ids[l] = a.seq->block(l, j);
    if (!core_.cache->Insert(keys[j], j ? keys[j - 1] : 0, ids) && !core_.cache->Blocks(keys[j])) break;
  }
}

void Scheduler::InsertPromptBlocks(AgentId id, Request& a) {
  if (!a.cacheable || !a.seq) return;
  const size_t L = core_.model->config().n_layer;
  // Blocks after its first segment hold approximate KV: never exact prefix blocks.
  const size_t prompt_blocks = std::min(a.prompt.size(), a.segments.first_at()) / kBlockTokens;
  const size_t upto = std::min(a.seq->sealed_blocks(0), prompt_blocks);
  std::vector<BlockId> ids(L);
  bool stuck = false;
  for (size_t j = a.inserted; j < upto; ++j) {
    for (size_t l = 0; l < L; ++l) ids[l] = a.seq->block(l, j);
    // Present already (another request computed it too): that copy stays; ours is private.
    if (core_.cache->Insert(a.keys[j], j ? a.keys[j - 1] : 0, ids, a.scope.id)) {
      core_.cache->IndexContent(a.keys[j], PrefixCache::BlockContentKey(a.prompt, j, a.scope.salt), j * kBlockTokens);
      remote_.PublishBlock(a.keys[j], j, ids, a.scope);  // computed here: other replicas may use it
    } else if (!core_.cache->Blocks(a.keys[j])) {
      stuck = true;  // its parent was evicted: nothing after it can be reached in the cache
      break;
    }
    a.inserted = j + 1;
  }
  // Its continuation: from its first run on, its blocks (own, or aliases of what it attached) under
  // keys only a prompt identical up to there finds.
  // (It continues the last exact block before its first run: that one must be in the cache.)
  if (stuck) a.cont.open = false;
  while (a.cont.open && a.inserted >= prompt_blocks && a.cont.block < a.seq->sealed_blocks(0)) {
    const size_t j = a.cont.block;
    const auto at = a.attached_blocks.find(j);
    const bool attached = at != a.attached_blocks.end();
    const size_t skip = attached ? at->second.skip : 0, n = kBlockTokens - skip;
    if (a.cont.pos + n > a.prompt.size()) break;  // it holds generated tokens: not a prompt block
    const uint64_t key = PrefixCache::ContinuationKey(
        a.cont.key, std::span<const int32_t>(a.prompt).subspan(a.cont.pos, n), skip, a.scope.salt);
    bool ok = core_.cache->FindContinuation(key).has_value();
    if (!ok && attached) {
      ok = at->second.source &&
           core_.cache->InsertAlias(key, a.cont.key, at->second.source, at->second.shift, at->second.skip, a.scope.id);
    } else if (!ok) {
      for (size_t l = 0; l < L; ++l) ids[l] = a.seq->block(l, j);
      ok = core_.cache->InsertContinuation(key, a.cont.key, ids, a.scope.id);
    }
    if (!ok) {
      a.cont.open = false;
      break;
    }
    a.cont.key = key;
    a.cont.pos += n;
    ++a.cont.block;
  }
  // Windowed layers may free what the cache now holds (or what will never get there).
  size_t keep = stuck || a.inserted == prompt_blocks ? SIZE_MAX : a.inserted * kBlockTokens;
  if (a.cont.open) keep = std::min(keep, a.cont.block * kBlockTokens);
  a.seq->set_keep_from(keep);
}

// ---- generation ----------------------------------------------------------------------------

TokenLogprob LogprobsOf(const float* r, size_t V, int32_t token, size_t top) {
  const double lse = LogSumExpFast(r, V);
  TokenLogprob lp{.token = token, .logprob = static_cast<float>(r[token] - lse)};
  if (top == 0) return lp;
  std::vector<std::pair<float, int32_t>> best;  // a min-heap of the top so far
  best.reserve(top + 1);
  auto greater = [](const auto& x, const auto& y) {
    return x.first > y.first || (x.first == y.first && x.second < y.second);
  };
  for (size_t t = 0; t < V; ++t) {
    if (r[t] == -std::numeric_limits<float>::infinity() || (best.size() == top && r[t] <= best.front().first)) continue;
    best.emplace_back(r[t], static_cast<int32_t>(t));
    std::push_heap(best.begin(), best.end(), greater);
    if (best.size() > top) {
      std::pop_heap(best.begin(), best.end(), greater);
      best.pop_back();
    }
  }
  std::sort(best.begin(), best.end(), greater);
  for (const auto& [x, t] : best) lp.top.emplace_back(t, static_cast<float>(x - lse));
  return lp;
}

Scheduler::Pick Scheduler::PickFor(AgentId id, const float* row) {
  Request& a = requests_.at(id);
  const size_t V = core_.model->config().n_vocab;
  const bool forced = !a.options.forced_tokens.empty();
  if (forced) return {a.options.forced_tokens[a.state.tokens.size()], LogSumExpFast(row, V)};
  const AgentOptions& o = a.options;
  const bool adjusted = a.grammar || !o.logit_bias.empty() || o.presence_penalty != 0 || o.frequency_penalty != 0;
  if (!adjusted && o.top_logprobs < 0) return {a.sampler->Sample(row, V), LogSumExpFast(row, V)};
  // Sample from an adjusted copy of the row (AgentOptions: bias, penalties, then the grammar's
  // mask at -inf); the log-sum-exp stays the model's, so nll is the answer's likelihood under it.
  const float* r = row;
  if (adjusted) {
    a.masked.assign(row, row + V);
    for (const auto& [t, b] : o.logit_bias) a.masked[t] += b;
    for (const auto& [t, n] : a.counts) a.masked[t] -= o.presence_penalty + o.frequency_penalty * float(n);
    if (a.grammar) {
      if (Status s = a.grammar->FillMask(a.mask); !s.ok()) return {-1, 0.0};  // Accept finishes it
      constexpr float kNever = -std::numeric_limits<float>::infinity();
      for (size_t t = 0; t < V; ++t)
        if (!((a.mask[t / 32] >> (t % 32)) & 1u)) a.masked[t] = kNever;
    }
    r = a.masked.data();
  }
  Pick p{a.sampler->Sample(r, V), LogSumExpFast(row, V)};
  if (o.top_logprobs >= 0) p.logprob = LogprobsOf(r, V, p.token, static_cast<size_t>(o.top_logprobs));
  return p;
}

void Scheduler::Accept(AgentId id, const float* row, const Pick* pick) {
  const Pick p = pick ? *pick : PickFor(id, row);
  Request& a = requests_.at(id);
  const Tokenizer& tok = core_.model->tokenizer();
  const bool forced = !a.options.forced_tokens.empty();
  const int32_t t = p.token;
  if (a.state.tokens.empty()) a.state.first_token_seconds = a.timer.Seconds();
  if (a.grammar && !forced && (t < 0 || !a.grammar->Accept(t))) {
    Finish(id, StopReason::kError, "the output grammar allows no next token here (an internal error)");
    return;
  }
  if (!forced && tok.IsEndOfGeneration(t) && !a.options.ignore_eog) {
    Finish(id, StopReason::kEndOfGeneration);
    return;
  }
  a.state.nll += p.lse - row[t];
  if (a.options.capture_logits) a.state.logits.insert(a.state.logits.end(), row, row + core_.model->config().n_vocab);
  a.state.tokens.push_back(t);
  a.state.text += tok.TokenToPiece(t);
  a.counts[t]++;
  if (a.options.top_logprobs >= 0 && !forced) a.state.logprobs.push_back(std::move(p.logprob));
  core_.counters.generated_tokens++;
  a.state.peak_private_bytes = std::max(a.state.peak_private_bytes, core_.SequenceOwnBytes(*a.seq));
  if (a.state.tokens.size() >= static_cast<size_t>(a.options.max_tokens))
    Finish(id, forced ? StopReason::kForcedTokens : StopReason::kMaxTokens);
  else if (a.seq->size() >= a.seq->capacity())
    Finish(id, StopReason::kContextFull);
}

void Scheduler::Finish(AgentId id, StopReason why, std::string error) {
  Request& a = requests_.at(id);
  if (a.state.done) return;
  a.state.done = true;
  a.state.phase = AgentPhase::kDone;
  a.state.stop = why;
  a.state.error = std::move(error);
  a.state.seconds = a.timer.Seconds();
  if (a.seq) {
    a.state.peak_private_bytes = std::max(a.state.peak_private_bytes, core_.SequenceOwnBytes(*a.seq));
    InsertPromptBlocks(id, a);  // what it sealed of its prompt stays useful to others
    if (why != StopReason::kError && why != StopReason::kCancelled) InsertAnswerBlocks(a);
    a.segments.Clear();         // runs not attached yet: their blocks go back to the cache
    a.EndSequence();            // its policies' entries, then its private blocks back to the pool
  }
  core_.cache->ClearPending(id);
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), id), waiting_.end());
  a.reserved_bytes = 0;
  if (a.context) {
    UpdateReaders(a.context);
    CollectContexts();
  }
}

Status Scheduler::PrefillNow(AgentId id, Request& a) {
  logits_.resize(core_.model->config().n_vocab);
  while (!a.segments.empty()) {  // up to each segment, then attach it
    const size_t n = a.segments.next().at - a.prefilled;
    Status s = core_.fwd->Run(std::span<const int32_t>(a.prompt).subspan(a.prefilled, n), *a.seq, *core_.pool,
                              LogitsFor::kLast, logits_.data());
    if (!s.ok()) {
      Finish(id, StopReason::kError, s.message());
      return s;
    }
    core_.counters.prefilled_tokens += n;
    a.prefilled += n;
    InsertPromptBlocks(id, a);
    AttachDueSegments(a);
  }
  const size_t n = a.prompt.size() - a.prefilled;
  Status s = core_.fwd->Run(std::span<const int32_t>(a.prompt).subspan(a.prefilled), *a.seq, *core_.pool,
                            LogitsFor::kLast, logits_.data());
  if (!s.ok()) {
    Finish(id, StopReason::kError, s.message());
    return s;
  }
  core_.counters.prefilled_tokens += n;
  a.prefilled = a.prompt.size();
  InsertPromptBlocks(id, a);
  core_.cache->ClearPending(id);
  a.state.phase = AgentPhase::kDecode;
  Accept(id, logits_.data());
  return Status::Ok();
}

Status Scheduler::Step() {
  const StepPlan plan = Schedule();
  if (plan.rows.empty()) {
    remote_.WaitForFetch();  // nothing to compute until a fetch comes back
    return Status::Ok();
  }
  const KvSequence* failed = nullptr;
  if (Status s = Run(plan, &failed); !s.ok()) return FailStep(plan, failed, s);
  Postprocess(plan);
  return Status::Ok();
}

Scheduler::StepPlan Scheduler::Schedule() {
  for (auto& [id, a] : requests_)
    if (a.cancel && !a.state.done) Finish(id, StopReason::kCancelled);
  AdmitWaiting();
  return PlanRows();
}

void Scheduler::AdmitWaiting() {
  const ServeOptions& so = core_.options.serve;
  // First come first served; a request whose next prompt block another request is computing right
  // now waits for it (then borrows it) instead of computing it twice.
  // A request whose leading blocks are not held here first asks the remote store (if any) for
  // them and waits, without holding anything, until they are installed or the fetch gave up.
  remote_.CollectFetches(
      [this](AgentId id) {
        auto it = requests_.find(id);
        return it == requests_.end() ? nullptr : &it->second;
      },
      [this](size_t need, std::string* why) { return MakeRoom(need, why); });
  size_t active = 0;
  for (const auto& [id, a] : requests_) active += a.running();
  for (auto it = waiting_.begin(); it != waiting_.end() && active < so.max_running;) {
    Request& a = requests_.at(*it);
    if (a.cacheable && !a.context) {
      if (a.fetch.ticket) {
        ++it;
        continue;
      }
      const size_t k = std::min(core_.cache->Match(a.keys), (a.prompt.size() - 1) / kBlockTokens);
      if ((k < a.keys.size() && core_.cache->IsPending(a.keys[k])) || remote_.MaybeFetch(*it, a, k) ||
          (UsesSegments(a) && AnyContentPending(a.prompt, k * kBlockTokens, *core_.cache, a.scope.salt))) {
        ++it;
        continue;
      }
    }
    auto r = TryAdmit(*it, a);
    if (!r.ok()) {
      const AgentId id = *it;
      it = waiting_.erase(it);
      Finish(id, StopReason::kError, r.status().message());
      continue;
    }
    if (*r == Admit::kNotNow) break;
    it = waiting_.erase(it);
    ++active;
  }
}

Scheduler::StepPlan Scheduler::PlanRows() {
  const ServeOptions& so = core_.options.serve;
  // Every decoding request's next token, then prompt chunks of prefilling ones.
  StepPlan plan;
  for (auto& [id, a] : requests_)
    if (a.phase() == AgentPhase::kDecode) {
      plan.rows.push_back({id, 1, true});
      plan.tokens.push_back(a.state.tokens.back());
    }
  plan.decode_rows = plan.tokens.size();
  size_t budget = plan.decode_rows ? so.prefill_chunk : so.max_prefill;
  for (auto& [id, a] : requests_) {
    if (a.phase() != AgentPhase::kPrefill || budget == 0) continue;
    const size_t left = a.prompt.size() - a.prefilled;
    size_t take = std::min(left, budget);
    if (core_.comix) take = std::min(take, kBlockTokens - a.prefilled % kBlockTokens);  // one block per pass (see Open)
    if (!a.segments.empty()) take = std::min(take, a.segments.next().at - a.prefilled);  // up to the next segment
    // End chunks on block boundaries of the sequence's rows (the next one then starts on one:
    // KvFootprint's prefill; a segment's `at` is one), or wait for a step with room for a whole block.
    if (take < left) take -= (a.seq->size() + take) % kBlockTokens;
    if (take == 0) continue;
    plan.rows.push_back({id, take, take == left});
    plan.tokens.insert(plan.tokens.end(), a.prompt.begin() + a.prefilled, a.prompt.begin() + a.prefilled + take);
    budget -= take;
  }
  return plan;
}

Status Scheduler::Run(const StepPlan& plan, const KvSequence** failed) {
  KvBatch batch(*core_.store);
  std::vector<size_t> logit_rows;
  for (const StepPlan::Row& r : plan.rows) {
    batch.Add(requests_.at(r.id).seq.get(), r.n);
    if (r.logits) logit_rows.push_back(batch.rows() - 1);
  }
  logits_.resize(logit_rows.size() * core_.model->config().n_vocab);
  core_.counters.steps++;
  core_.counters.last_step_rows = plan.tokens.size();
  core_.counters.last_step_prefill_tokens = plan.tokens.size() - plan.decode_rows;
  Status s = core_.fwd->RunRows(plan.tokens, batch, *core_.pool, logit_rows, logits_.data());
  if (!s.ok()) *failed = batch.failed();
  return s;
}

Status Scheduler::FailStep(const StepPlan& plan, const KvSequence* failed, const Status& s) {
  // All or nothing per request: the forward rolled every sequence back. The request whose KV
  // could not be stored fails with the reason (its KV freed); the others are as before the
  // step and run again at the next one. A failure that is no one request's fails them all
  // (retrying it would fail the same way).
  bool named = false;
  for (const StepPlan::Row& r : plan.rows)
    if (failed && requests_.at(r.id).seq.get() == failed) {
      Finish(r.id, StopReason::kError, s.message());
      named = true;
    }
  if (named) return Status::Ok();
  for (const StepPlan::Row& r : plan.rows) Finish(r.id, StopReason::kError, s.message());
  return s;
}

void Scheduler::Postprocess(const StepPlan& plan) {
  // The rows' tokens and log-sum-exps over the pool (a step of many requests sampled them one
  // after another on the calling thread while the others waited), then accepted in plan order.
  const size_t V = core_.model->config().n_vocab;
  std::vector<std::pair<AgentId, const float*>> rows;
  for (const StepPlan::Row& r : plan.rows)
    if (r.logits) rows.emplace_back(r.id, logits_.data() + rows.size() * V);
  std::vector<Pick> picks(rows.size());
  core_.pool->ParallelFor(rows.size(), 1, [&](size_t b, size_t e) {  // one row: inline, no pool round trip
    for (size_t i = b; i < e; ++i) picks[i] = PickFor(rows[i].first, rows[i].second);
  });
  size_t pi = 0;
  for (const StepPlan::Row& r : plan.rows) {
    Request& a = requests_.at(r.id);
    if (a.phase() == AgentPhase::kPrefill) {
      a.prefilled += r.n;
      core_.counters.prefilled_tokens += r.n;
      InsertPromptBlocks(r.id, a);
      AttachDueSegments(a);
      if (a.prefilled == a.prompt.size()) {
        core_.cache->ClearPending(r.id);
        a.state.phase = AgentPhase::kDecode;
      }
    }
    if (r.logits) {
      Accept(r.id, rows[pi].second, &picks[pi]);
      ++pi;
    }
  }
}

// ---- the public side -----------------------------------------------------------------------

Result<AgentId> Scheduler::Spawn(ContextId context, std::string_view prompt, const AgentOptions& options) {
  std::vector<int32_t> tokens;
  if (context != 0) {
    const Context* c = contexts_.Find(context);
    if (!c) return Status::Error("unknown or freed context {}", context);
    tokens = c->tokens;
  }
  const std::vector<int32_t> own =
      core_.model->tokenizer().Encode(prompt, /*add_special=*/context == 0, /*parse_special=*/true);
  if (own.empty()) return Status::Error("the agent's prompt is empty");
  tokens.insert(tokens.end(), own.begin(), own.end());
  CHORUS_ASSIGN_OR_RETURN(const AgentId id, NewRequest(std::move(tokens), context, options));
  Request& a = requests_.at(id);
  auto r = TryAdmit(id, a);
  if (!r.ok() || *r == Admit::kNotNow) {
    const Status s = r.ok() ? Status::Error("agent refused: {}", last_refusal_) : r.status();
    requests_.erase(id);
    return s;
  }
  CHORUS_RETURN_IF_ERROR(PrefillNow(id, a));
  return id;
}

Result<AgentId> Scheduler::Submit(std::vector<int32_t> prompt, const AgentOptions& options) {
  CHORUS_ASSIGN_OR_RETURN(const AgentId id, NewRequest(std::move(prompt), 0, options));
  waiting_.push_back(id);
  return id;
}

void Scheduler::Cancel(AgentId id) {
  auto it = requests_.find(id);
  if (it == requests_.end() || it->second.state.done) return;
  if (it->second.phase() == AgentPhase::kWaiting)
    Finish(id, StopReason::kCancelled);
  else it->second.cancel = true;
}

void Scheduler::Forget(AgentId id) {
  auto it = requests_.find(id);
  if (it != requests_.end() && it->second.state.done) requests_.erase(it);
}

void Scheduler::Clear() { requests_.clear(); }

const Request* Scheduler::Find(AgentId id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : &it->second;
}

size_t Scheduler::running() const {
  size_t n = 0;
  for (const auto& [id, a] : requests_) n += a.running();
  return n;
}

size_t Scheduler::Readers(ContextId context) const {
  size_t k = 0;
  for (const auto& [id, a] : requests_) k += a.running() && a.context == context;
  return k;
}

void Scheduler::CollectContexts() {
  contexts_.Collect([this](ContextId c) { return Readers(c) > 0; });
}

}  // namespace chorus
