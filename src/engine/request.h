// Request: one generation request (an agent, to the public API) from submission to finish, and
// PolicyLease: a sequence's entries in the engine's precision policies, which end with it.
// Invariants: a request is in exactly one phase (state.phase); it holds a sequence exactly while it
// runs (kPrefill, kDecode) and its lease is ended before its sequence is freed; a lease's entries
// (RoutingPolicy rules, a CoMix unit) exist exactly while the lease holds them, so no path removes
// them by hand. Engine-thread only.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "chorus/engine.h"
#include "engine/engine_core.h"     // Scope
#include "engine/routing_policy.h"  // RoutingPolicy
#include "engine/segments.h"        // SegmentPlan
#include "grammar/grammar_matcher.h"  // GrammarMatcher
#include "kv/kv_store.h"            // KvSequence
#include "model/sampler.h"          // Sampler
#include "policy/comix_policy.h"    // ComixPolicy
#include "util/timer.h"

namespace chorus {

// A sequence's (or a planned unit's) entries in the RoutingPolicy and in CoMix. Move-only; Reset,
// or the destructor, removes the CoMix unit and then the routing rules. Either policy may be null.
class PolicyLease {
 public:
  PolicyLease() = default;
  PolicyLease(RoutingPolicy* routing, ComixPolicy* comix, uint64_t seq_id)
      : routing_(routing), comix_(comix), id_(seq_id) {}
  ~PolicyLease() { Reset(); }
  PolicyLease(PolicyLease&& o) noexcept { *this = std::move(o); }
  PolicyLease& operator=(PolicyLease&& o) noexcept {
    if (this != &o) {
      Reset();
      routing_ = o.routing_;
      comix_ = o.comix_;
      id_ = o.id_;
      unit_ = o.unit_;
      o.routing_ = nullptr;
      o.comix_ = nullptr;
      o.unit_ = false;
    }
    return *this;
  }
  PolicyLease(const PolicyLease&) = delete;
  PolicyLease& operator=(const PolicyLease&) = delete;

  uint64_t id() const { return id_; }
  bool has_unit() const { return unit_; }
  // RoutingPolicy::SetSharedBlocks / SetCocktail for this sequence.
  void SetSharedBlocks(size_t n) { routing_->SetSharedBlocks(id_, n); }
  void SetCocktail(std::shared_ptr<CocktailPolicy> p, bool whole) { routing_->SetCocktail(id_, std::move(p), whole); }
  // ComixPolicy::AddUnit for this sequence; refused, nothing is registered.
  Status AddUnit(size_t capacity, size_t first_pos, double weight, std::string label,
                 std::span<const float> block_relevance = {}) {
    Status s = comix_->AddUnit(id_, capacity, first_pos, weight, std::move(label), block_relevance);
    unit_ = s.ok();
    return s;
  }
  // The CoMix unit outlives this lease (a context's blocks stay in CoMix's accounting after its
  // sequence is gone): moved to a lease of its own, which holds no routing rules.
  PolicyLease TakeUnit() {
    PolicyLease u(nullptr, comix_, id_);
    u.unit_ = unit_;
    unit_ = false;
    return u;
  }
  void Reset() {
    if (unit_ && comix_) comix_->RemoveUnit(id_);  // its bytes go to the others
    if (routing_) routing_->Forget(id_);
    unit_ = false;
    routing_ = nullptr;
    comix_ = nullptr;
  }

 private:
  RoutingPolicy* routing_ = nullptr;
  ComixPolicy* comix_ = nullptr;
  uint64_t id_ = 0;
  bool unit_ = false;  // the CoMix unit is registered
};

struct Request {
  // What was asked.
  std::vector<int32_t> prompt;  // every prompt token (a context's first)
  ContextId context = 0;        // Spawn(context): borrow its tables
  AgentOptions options;
  std::unique_ptr<Sampler> sampler;
  // AgentOptions::constraint: where the answer stands in its grammar, and the step's scratch (the
  // allowed-token mask, the logits row with disallowed tokens at -inf). Null: unconstrained.
  std::unique_ptr<GrammarMatcher> grammar;
  std::vector<uint32_t> mask;
  std::vector<float> masked;
  std::unordered_map<int32_t, int> counts;  // tokens of the answer (presence / frequency penalties)
  AgentState state;  // what the caller reads; state.phase is the request's phase
  bool cancel = false;
  Timer timer;  // from admission

  // The prefix cache.
  Scope scope;                 // options.scope: salts every key below, the remote store's too
  std::vector<uint64_t> keys;  // prefix keys of the prompt's full blocks
  bool cacheable = true;       // its prompt blocks may enter the prefix cache
  size_t inserted = 0;         // prompt blocks already in the cache

  // From admission until finished: its KV and its entries in the policies (declared after the
  // sequence: ended first).
  std::unique_ptr<KvSequence> seq;
  PolicyLease lease;
  size_t prefilled = 0;       // prompt tokens in seq (borrowed included)
  size_t reserved_bytes = 0;  // projected bytes still to be used (budget admission)

  // The remote block store (RemotePrefetcher).
  struct Fetch {
    bool checked = false;  // the store was asked for its leading blocks (once)
    uint64_t ticket = 0;   // a fetch of its leading blocks is in flight
  } fetch;

  // Segments (Reuse::kSegments).
  SegmentPlan segments;  // runs still to attach, holding their blocks
  // Its continuation chain (PrefixCache::ContinuationKey): blocks [block, ...) of its sequence go
  // in under it from its first attached run on, prompt tokens from pos.
  struct Continuation {
    bool open = false;
    uint64_t key = 0;
    size_t block = 0, pos = 0;
  } cont;
  struct AttachedBlock {
    uint64_t source = 0;  // the source block's exact key (0: a continuation block found again)
    int32_t shift = 0;
    uint8_t skip = 0;
  };
  std::map<size_t, AttachedBlock> attached_blocks;  // sequence block index → what was attached there

  AgentPhase phase() const { return state.phase; }
  bool running() const { return seq != nullptr; }
  // Its policies' entries, then its KV (private blocks back to the pool).
  void EndSequence() {
    lease.Reset();
    seq.reset();
  }
};

}  // namespace chorus
