// ContextRegistry: the shared contexts (Engine::Share, ShareFor) — documents prefilled once whose
// full blocks agents borrow — by id and by content hash, with Cocktail contexts' chunk maps and,
// under CoMix, the units planned for their readers.
// Invariants: a context holds one pool reference on each block of its tables; a pinned context's
// keys are pinned in the prefix cache; it is freed (Collect) exactly when it has no user reference
// and no running request reads it, and its CoMix units (its own, its planned readers') end with it.
// `by_hash_` names exactly the live contexts. Engine-thread only.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "chorus/engine.h"
#include "engine/engine_core.h"        // EngineCore
#include "engine/remote_prefetcher.h"  // RemotePrefetcher
#include "engine/request.h"            // PolicyLease
#include "policy/cocktail_policy.h"    // CocktailPolicy

namespace chorus {

struct Context {
  std::vector<int32_t> tokens;
  std::vector<std::vector<BlockId>> tables;  // (n_layer) live full blocks [first[l], n), one ref each
  std::vector<size_t> first;                 // (n_layer) a sliding-window layer keeps only its tail
  std::vector<uint64_t> keys;                // pinned in the cache (empty for Cocktail contexts)
  uint64_t hash = 0;
  Scope scope;  // ShareOptions::scope: salts its keys
  size_t user_refs = 0;
  size_t bytes = 0;                          // measured: the blocks' cost
  PolicyLease unit;                          // comix: the unit its blocks were sealed under
  std::vector<PolicyLease> planned;          // comix: units of readers planned by Share, not yet attached
  size_t reader_tokens = 0;                  // comix: prompt + max_tokens of each planned reader
  std::shared_ptr<CocktailPolicy> cocktail;  // a Cocktail context's map (its readers' tail block follows it)
  uint64_t hits = 0;                         // requests admitted reading it (Spawn / Submit with a context)
};

class ContextRegistry {
 public:
  ContextRegistry(EngineCore& core, RemotePrefetcher& remote) : core_(core), remote_(remote) {}

  Context* Find(ContextId id);
  const Context* Find(ContextId id) const;
  Context& at(ContextId id) { return contexts_.at(id); }  // a live context (a running request's)
  const std::map<ContextId, Context>& all() const { return contexts_; }
  // The live context of content hash `hash`, given one more user reference; 0 if there is none.
  ContextId AddRef(uint64_t hash);
  // A new context (one user reference) over the full blocks of `seq` holding `tokens`; `pin`: its
  // blocks also enter the prefix cache, pinned, found by content too, and are published.
  // Its keys are salted with `scope`.
  ContextId Add(std::vector<int32_t> tokens, const KvSequence& seq, uint64_t hash, bool pin, const Scope& scope);
  // One user reference less (Engine::Release); false if it had none.
  bool Unref(ContextId id);
  // Every user reference dropped (the engine's end).
  void UnrefAll();
  // Frees the contexts with no user reference that no running request reads (`read`).
  void Collect(const std::function<bool(ContextId)>& read);

  // The id the next context will have.
  ContextId next_id() const { return next_context_; }
  // A reader of a document of doc_tokens planned as CoMix unit NextPlannedId(): its own
  // reader_tokens and the document's tail (< 32 tokens), which it recomputes in its own KV, from
  // the tail's first position.
  uint64_t NextPlannedId() { return kPlannedReaderBit | next_planned_++; }
  Result<PolicyLease> PlanReader(uint64_t id, size_t reader_tokens, size_t doc_tokens, std::string label);

  // Cocktail contexts' chunk maps (ShareFor); null for another or a freed context.
  void SetChunkMap(ContextId id, ChunkMapReport report) { chunk_maps_[id] = std::move(report); }
  const ChunkMapReport* chunk_map(ContextId id) const;

 private:
  static constexpr uint64_t kPlannedReaderBit = uint64_t{1} << 63;  // planned units' ids: no sequence has one

  EngineCore& core_;
  RemotePrefetcher& remote_;
  std::map<ContextId, Context> contexts_;
  std::map<uint64_t, ContextId> by_hash_;
  ContextId next_context_ = 1;
  uint64_t next_planned_ = 1;
  std::map<ContextId, ChunkMapReport> chunk_maps_;  // stale ids are never reused
};

}  // namespace chorus
