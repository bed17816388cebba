// ContextRegistry: shared contexts' blocks, pins and CoMix units (context_registry.h).
#include "engine/context_registry.h"

#include <algorithm>

namespace chorus {

Context* ContextRegistry::Find(ContextId id) {
  auto it = contexts_.find(id);
  return it == contexts_.end() ? nullptr : &it->second;
}

const Context* ContextRegistry::Find(ContextId id) const {
  auto it = contexts_.find(id);
  return it == contexts_.end() ? nullptr : &it->second;
}

ContextId ContextRegistry::AddRef(uint64_t hash) {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return 0;
  contexts_[it->second].user_refs++;
  return it->second;
}

bool ContextRegistry::Unref(ContextId id) {
  Context* c = Find(id);
  if (!c || c->user_refs == 0) return false;
  c->user_refs--;
  return true;
}

void ContextRegistry::UnrefAll() {
  for (auto& [id, c] : contexts_) c.user_refs = 0;
}

const ChunkMapReport* ContextRegistry::chunk_map(ContextId id) const {
  if (!contexts_.count(id)) return nullptr;
  auto it = chunk_maps_.find(id);
  return it == chunk_maps_.end() ? nullptr : &it->second;
}

Result<PolicyLease> ContextRegistry::PlanReader(uint64_t id, size_t reader_tokens, size_t doc_tokens,
                                                std::string label) {
  const size_t tail = doc_tokens % kBlockTokens;
  PolicyLease unit(nullptr, core_.comix.get(), id);
  CHORUS_RETURN_IF_ERROR(unit.AddUnit(reader_tokens + tail, doc_tokens - tail, 1.0, std::move(label)));
  return unit;
}

ContextId ContextRegistry::Add(std::vector<int32_t> tokens, const KvSequence& seq, uint64_t hash, bool pin,
                               const Scope& scope) {
  const size_t L = core_.model->config().n_layer, full = tokens.size() / kBlockTokens;
  Context c{.hash = hash, .scope = scope, .user_refs = 1};
  c.tables.assign(L, {});
  c.first.assign(L, 0);
  const BlockPool& bp = core_.store->pool();
  for (size_t l = 0; l < L; ++l) {
    c.first[l] = std::min(seq.first_block(l), full);
    for (size_t j = c.first[l]; j < full; ++j) {
      const BlockId id = seq.block(l, j);
      core_.store->pool().Ref(id);
      c.tables[l].push_back(id);
      c.bytes += BlockPool::BlockCost(bp.meta(id).k_bytes, bp.meta(id).v_bytes);
    }
  }
  if (pin) {
    c.keys = PrefixCache::Keys(tokens, scope.salt);
    std::vector<BlockId> ids(L);
    for (size_t j = 0; j < full; ++j) {
      for (size_t l = 0; l < L; ++l) ids[l] = seq.block(l, j);
      if (core_.cache->Insert(c.keys[j], j ? c.keys[j - 1] : 0, ids, scope.id)) {  // present already when borrowed
        // Found by content too: a prompt holding the context's text after other text reuses it (segments).
        core_.cache->IndexContent(c.keys[j], PrefixCache::BlockContentKey(tokens, j, scope.salt), j * kBlockTokens);
        remote_.PublishBlock(c.keys[j], j, ids, scope);
      }
    }
    core_.cache->Pin(c.keys);
  }
  c.tokens = std::move(tokens);
  const ContextId id = next_context_++;
  by_hash_[hash] = id;
  contexts_.emplace(id, std::move(c));
  return id;
}

void ContextRegistry::Collect(const std::function<bool(ContextId)>& read) {
  for (auto it = contexts_.begin(); it != contexts_.end();) {
    Context& c = it->second;
    if (c.user_refs == 0 && !read(it->first)) {
      if (!c.keys.empty()) core_.cache->Unpin(c.keys);  // the blocks stay cached (evictable) after this
      c.unit.Reset();
      for (PolicyLease& u : c.planned) u.Reset();
      for (const auto& t : c.tables)
        for (BlockId b : t) core_.store->pool().Unref(b);
      by_hash_.erase(c.hash);
      it = contexts_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace chorus
