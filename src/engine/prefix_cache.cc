// PrefixCache: chained keys, LRU-of-leaves eviction, pins and in-flight keys (see prefix_cache.h).
#include "engine/prefix_cache.h"

#include <xxhash.h>

#include <unordered_set>

#include "util/check.h"

namespace chorus {

uint64_t PrefixCache::ChainKey(uint64_t parent, std::span<const int32_t> tokens, uint64_t salt) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset_withSeed(st, salt);
  XXH3_64bits_update(st, &parent, sizeof parent);
  XXH3_64bits_update(st, tokens.data(), tokens.size_bytes());
  uint64_t k = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return k == 0 ? 1 : k;  // 0 means "no parent"
}

std::vector<uint64_t> PrefixCache::Keys(std::span<const int32_t> tokens, uint64_t salt) {
  std::vector<uint64_t> keys;
  uint64_t parent = 0;
  for (size_t b = 0; (b + 1) * kBlockTokens <= tokens.size(); ++b) {
    parent = ChainKey(parent, tokens.subspan(b * kBlockTokens, kBlockTokens), salt);
    keys.push_back(parent);
  }
  return keys;
}

uint64_t PrefixCache::ContentKey(std::span<const int32_t> tokens, uint64_t salt) {
  // Seeded apart from the chain keys (a chain key with parent 0 hashes the parent's 8 bytes first).
  const uint64_t k = XXH3_64bits_withSeed(tokens.data(), tokens.size_bytes(), salt ^ 0x5e65e4750a11ull);
  return k == 0 ? 1 : k;
}

uint64_t PrefixCache::ContinuationKey(uint64_t parent, std::span<const int32_t> tokens, size_t skip, uint64_t salt) {
  return ChainKey(parent ^ (0xc0a7ull * (skip + 1)), tokens, salt ^ 0x6c0171ac0ull);  // apart from chain keys
}

bool PrefixCache::InsertContinuation(uint64_t key, uint64_t parent, std::span<const BlockId> ids, uint64_t scope) {
  if (!Insert(key, parent, ids, scope)) return false;
  entries_.at(key).continuation = true;
  return true;
}

bool PrefixCache::InsertAlias(uint64_t key, uint64_t parent, uint64_t source, int32_t shift, uint8_t skip,
                              uint64_t scope) {
  if (!entries_.count(source) || !Insert(key, parent, {}, scope)) return false;
  Entry& e = entries_.at(key);
  e.continuation = true;
  e.alias = source;
  e.shift = shift;
  e.skip = skip;
  return true;
}

std::optional<PrefixCache::ContinuationHit> PrefixCache::FindContinuation(uint64_t key) const {
  auto it = entries_.find(key);
  if (it == entries_.end() || !it->second.continuation) return std::nullopt;
  const Entry& e = it->second;
  if (e.alias == 0) return ContinuationHit{.ids = &e.ids};
  auto src = entries_.find(e.alias);
  if (src == entries_.end()) return std::nullopt;
  return ContinuationHit{.ids = &src->second.ids, .shift = e.shift, .skip = e.skip};
}

PrefixCache::~PrefixCache() {
  for (auto& [key, e] : entries_)
    for (BlockId id : e.ids)
      if (id != kNoBlock) pool_.Unref(id);
}

size_t PrefixCache::Match(std::span<const uint64_t> keys) const {
  size_t n = 0;
  for (; n < keys.size(); ++n) {
    auto it = entries_.find(keys[n]);
    if (it == entries_.end() || it->second.continuation) break;
  }
  return n;
}

const std::vector<BlockId>* PrefixCache::Blocks(uint64_t key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second.ids;
}

void PrefixCache::Touch(std::span<const uint64_t> keys) {
  const uint64_t now = ++clock_;
  for (uint64_t k : keys) {
    auto it = entries_.find(k);
    if (it == entries_.end()) continue;
    Entry& e = it->second;
    if (leaves_.erase({e.last_use, k})) leaves_.insert({now, k});
    e.last_use = now;
    e.hits++;
  }
}

bool PrefixCache::Insert(uint64_t key, uint64_t parent, std::span<const BlockId> ids, uint64_t scope) {
  if (entries_.count(key)) return false;
  Entry* p = nullptr;
  if (parent != 0) {
    auto it = entries_.find(parent);
    if (it == entries_.end()) return false;
    p = &it->second;
  }
  Entry e{.parent = parent, .ids = {ids.begin(), ids.end()}, .last_use = ++clock_, .scope = scope};
  for (BlockId id : ids) {
    if (id == kNoBlock) continue;  // a sliding-window layer had freed it
    pool_.Ref(id);
    e.bytes += BlockPool::BlockCost(pool_.meta(id).k_bytes, pool_.meta(id).v_bytes);
  }
  if (p) {
    if (p->children++ == 0) leaves_.erase({p->last_use, parent});
  }
  leaves_.insert({e.last_use, key});
  entries_.emplace(key, std::move(e));
  pending_.erase(key);  // computed: waiters match it now
  return true;
}

void PrefixCache::Pin(std::span<const uint64_t> keys) {
  for (uint64_t k : keys) {
    auto it = entries_.find(k);
    CHORUS_CHECK(it != entries_.end());
    if (it->second.pins++ == 0) leaves_.erase({it->second.last_use, k});
  }
}

void PrefixCache::Unpin(std::span<const uint64_t> keys) {
  for (uint64_t k : keys) {
    auto it = entries_.find(k);
    CHORUS_CHECK(it != entries_.end() && it->second.pins > 0);
    Entry& e = it->second;
    if (--e.pins == 0 && e.children == 0) leaves_.insert({e.last_use, k});
  }
}

bool PrefixCache::Idle(const Entry& e) const {
  for (BlockId id : e.ids)
    if (id != kNoBlock && pool_.meta(id).refs > 1) return false;
  return true;
}

void PrefixCache::Drop(uint64_t key) {
  auto it = entries_.find(key);
  CHORUS_CHECK(it != entries_.end() && it->second.children == 0 && it->second.pins == 0);
  Entry& e = it->second;
  leaves_.erase({e.last_use, key});
  for (BlockId id : e.ids)
    if (id != kNoBlock) pool_.Unref(id);
  if (e.parent != 0) {
    Entry& p = entries_.at(e.parent);
    if (--p.children == 0 && p.pins == 0) leaves_.insert({p.last_use, e.parent});
  }
  if (e.content != 0) content_.erase(e.content);
  if (e.alias == 0) ++evicted_;
  entries_.erase(it);
}

void PrefixCache::IndexContent(uint64_t key, uint64_t content, size_t first_pos) {
  auto it = entries_.find(key);
  CHORUS_CHECK(it != entries_.end() && content != 0);
  content_pending_.erase(content);
  // The first block given keeps the name while it lives: it is usually the span's original
  // computation, whose chain goes on furthest (a later prompt's copy of a part of it ends sooner).
  if (content_.count(content) || it->second.content != 0) return;
  it->second.content = content;
  content_[content] = {key, first_pos};
}

std::optional<PrefixCache::ContentHit> PrefixCache::FindContent(uint64_t content) const {
  auto it = content_.find(content);
  if (it == content_.end()) return std::nullopt;
  return ContentHit{.key = it->second.key, .first_pos = it->second.first_pos, .ids = &entries_.at(it->second.key).ids};
}

void PrefixCache::MarkContentPending(uint64_t owner, std::span<const uint64_t> contents) {
  for (uint64_t c : contents)
    if (!content_.count(c) && content_pending_.emplace(c, owner).second) content_pending_by_owner_.emplace(owner, c);
}

size_t PrefixCache::Evict(size_t need) {
  size_t freed = 0;
  // Oldest idle leaf first. Dropping a leaf can expose its parent as a leaf older than the rest,
  // so the scan starts again from the oldest after every drop.
  for (auto it = leaves_.begin(); it != leaves_.end() && freed < need;) {
    const uint64_t key = it->second;
    const Entry& e = entries_.at(key);
    if (!Idle(e)) {
      ++it;
      continue;
    }
    freed += e.bytes;
    Drop(key);
    it = leaves_.begin();
  }
  return freed;
}

size_t PrefixCache::ScopeBytes(uint64_t scope) const {
  size_t bytes = 0;
  for (const auto& [key, e] : entries_)
    if (e.scope == scope) bytes += e.bytes;
  return bytes;
}

size_t PrefixCache::EvictScope(uint64_t scope, size_t need) {
  size_t freed = 0;
  for (auto it = leaves_.begin(); it != leaves_.end() && freed < need;) {  // as Evict, this scope only
    const uint64_t key = it->second;
    const Entry& e = entries_.at(key);
    if (!Idle(e) || e.scope != scope) {
      ++it;
      continue;
    }
    freed += e.bytes;
    Drop(key);
    it = leaves_.begin();
  }
  return freed;
}

size_t PrefixCache::EvictableBytes() const {
  // An entry can be evicted eventually iff it and everything continuing it is idle and unpinned.
  std::unordered_set<uint64_t> blocked;
  for (const auto& [key, e] : entries_) {
    if (e.pins == 0 && Idle(e)) continue;
    for (uint64_t k = key; k != 0 && blocked.insert(k).second; k = entries_.at(k).parent) {
    }
  }
  size_t bytes = 0;
  for (const auto& [key, e] : entries_)
    if (!blocked.count(key)) bytes += e.bytes;
  return bytes;
}

void PrefixCache::MarkPending(uint64_t owner, std::span<const uint64_t> keys) {
  for (uint64_t k : keys)
    if (!entries_.count(k) && pending_.emplace(k, owner).second) pending_by_owner_.emplace(owner, k);
}

void PrefixCache::ClearPending(uint64_t owner) {
  auto [b, e] = pending_by_owner_.equal_range(owner);
  for (auto it = b; it != e; ++it) {
    auto p = pending_.find(it->second);
    if (p != pending_.end() && p->second == owner) pending_.erase(p);
  }
  pending_by_owner_.erase(b, e);
  auto [cb, ce] = content_pending_by_owner_.equal_range(owner);
  for (auto it = cb; it != ce; ++it) {
    auto p = content_pending_.find(it->second);
    if (p != content_pending_.end() && p->second == owner) content_pending_.erase(p);
  }
  content_pending_by_owner_.erase(cb, ce);
}

std::vector<PrefixCache::EntryInfo> PrefixCache::Entries() const {
  std::vector<EntryInfo> out;
  out.reserve(entries_.size());
  for (const auto& [key, e] : entries_)
    if (!e.continuation)
      out.push_back({.key = key,
                     .parent = e.parent,
                     .ids = &e.ids,
                     .bytes = e.bytes,
                     .children = e.children,
                     .pins = e.pins,
                     .hits = e.hits});
  return out;
}

PrefixCache::Report PrefixCache::Stats() const {
  Report r{.evicted_blocks = evicted_};
  for (const auto& [key, e] : entries_) {
    r.blocks += e.alias == 0;
    if (e.pins > 0) r.pinned_bytes += e.bytes;
    else if (Idle(e)) r.idle_bytes += e.bytes;
    else r.active_bytes += e.bytes;
  }
  return r;
}

}  // namespace chorus
