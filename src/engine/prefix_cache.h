// PrefixCache: sealed 32-token prompt blocks (all layers) keyed by a chained content hash, shared
// by every request whose prompt starts with the same tokens under the same KV settings. Blocks of
// finished requests stay cached (the cache holds one pool reference on each) until evicted least
// recently used; a block is never evicted while a sequence reads it (pool refs > 1), while it is
// pinned (an explicit context), or while a cached block continues it (leaves go first, so every
// cached key stays reachable from the first block).
// Segments (METHODS.md §5b): a cached block is also found by a content key of its own 32 tokens,
// whatever came before them, with the position of its first token, so that another prompt holding
// the same tokens after other text can attach it at another offset. That is never an exact prefix
// hit: only the chained keys are.
// Scopes: every key is salted with the sharing scope of the request or context that sealed the
// block (AgentOptions::scope), so blocks are shared inside a scope and never across two; an entry
// knows its scope, so a scope over its quota evicts only its own idle blocks (EvictScope).
// Invariant: Entry::bytes == Σ BlockPool::BlockCost of its ids; the cache's ref is the last one
// standing exactly when no sequence reads the block; a content key names a live entry.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/block_pool.h"  // BlockPool, BlockId

namespace chorus {

class PrefixCache {
 public:
  // The key of the block of `tokens` (32 ids) that follows the block keyed `parent` (0 for the
  // first block). `salt` carries everything that changes stored bytes: model fingerprint,
  // formats, sink, window, policy.
  static uint64_t ChainKey(uint64_t parent, std::span<const int32_t> tokens, uint64_t salt);
  // Keys of every full 32-token block of a prompt.
  static std::vector<uint64_t> Keys(std::span<const int32_t> tokens, uint64_t salt);
  // The position-free key of one block's 32 tokens (never 0).
  static uint64_t ContentKey(std::span<const int32_t> tokens, uint64_t salt);
  // ContentKey of full block `block` of `tokens`.
  static uint64_t BlockContentKey(std::span<const int32_t> tokens, size_t block, uint64_t salt) {
    return ContentKey(tokens.subspan(block * kBlockTokens, kBlockTokens), salt);
  }

  explicit PrefixCache(BlockPool& pool) : pool_(pool) {}
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // How many of keys[0..) are cached in a row from the first.
  size_t Match(std::span<const uint64_t> keys) const;
  // The block ids (n_layer) of a cached key, nullptr if absent. A sliding-window layer's id may be
  // kNoBlock: the sequence that sealed it had freed it before the cache got it.
  const std::vector<BlockId>* Blocks(uint64_t key) const;
  // Marks keys[0, n) used now (LRU clock) and counts a hit on each (a borrow).
  void Touch(std::span<const uint64_t> keys);
  // Adds a sealed block under `key` (continuing `parent`, which must be cached unless 0): the
  // cache takes one pool reference on each id. False (nothing changes) if the key is present or
  // the parent is not. `scope`: the sharing scope whose keys these are (Scope::id; quotas).
  bool Insert(uint64_t key, uint64_t parent, std::span<const BlockId> ids, uint64_t scope = 0);
  // Segments: the cached block `key` (its first token at `first_pos`) is found by `content` too. A
  // content key names one block: the first given, while it is cached.
  void IndexContent(uint64_t key, uint64_t content, size_t first_pos);
  struct ContentHit {
    uint64_t key = 0;
    size_t first_pos = 0;
    const std::vector<BlockId>* ids = nullptr;  // valid until the cache changes
  };
  std::optional<ContentHit> FindContent(uint64_t content) const;
  // Continuations (segments): the blocks a request's sequence held from its first attached run on,
  // chained from the exact key before it (0: none) by the prompt tokens each block holds and its
  // hole. Its own blocks are entries like any other, under keys no exact prompt produces; an
  // attached block is an alias: no ids of its own, the source block's key, shift and hole. Only a
  // prompt identical up to there finds them (the same plan again): reused as a segment, never as a
  // prefix hit, and left out of Entries() (reports show exact blocks).
  static uint64_t ContinuationKey(uint64_t parent, std::span<const int32_t> tokens, size_t skip, uint64_t salt);
  bool InsertContinuation(uint64_t key, uint64_t parent, std::span<const BlockId> ids, uint64_t scope = 0);
  bool InsertAlias(uint64_t key, uint64_t parent, uint64_t source, int32_t shift, uint8_t skip, uint64_t scope = 0);
  struct ContinuationHit {
    const std::vector<BlockId>* ids = nullptr;  // the block's (an alias: its source's), valid until the cache changes
    int32_t shift = 0;
    uint8_t skip = 0;
  };
  // nullopt if absent, or an alias whose source was evicted.
  std::optional<ContinuationHit> FindContinuation(uint64_t key) const;
  // Explicit contexts: pinned keys are never evicted. Pins count (two contexts may share blocks).
  void Pin(std::span<const uint64_t> keys);
  void Unpin(std::span<const uint64_t> keys);

  // Evicts least-recently-used evictable leaves until at least `need` bytes went back to the pool
  // (freed, not just unreferenced) or nothing evictable is left. Returns the bytes freed.
  size_t Evict(size_t need);
  // Bytes that Evict could free now (idle, unpinned blocks).
  size_t EvictableBytes() const;
  // Quotas: the bytes of every cached block of one scope (pinned, read, idle), and Evict limited to
  // that scope's idle leaves (another scope's blocks are never touched).
  size_t ScopeBytes(uint64_t scope) const;
  size_t EvictScope(uint64_t scope, size_t need);

  // In-flight prompts: keys a running prefill will insert (a request whose next block is pending
  // waits for it instead of computing it again). Owner = the request's id.
  void MarkPending(uint64_t owner, std::span<const uint64_t> keys);
  void ClearPending(uint64_t owner);
  bool IsPending(uint64_t key) const { return pending_.count(key) > 0; }
  // The same for content keys (segments): a request that would reuse what another one is computing
  // waits for it. Cleared by IndexContent and by ClearPending of the owner.
  void MarkContentPending(uint64_t owner, std::span<const uint64_t> contents);
  bool IsContentPending(uint64_t content) const { return content_pending_.count(content) > 0; }

  struct Report {
    size_t blocks = 0;
    size_t pinned_bytes = 0;  // blocks some context pins
    size_t idle_bytes = 0;    // unpinned blocks only the cache holds (what eviction can free)
    size_t active_bytes = 0;  // unpinned blocks some sequence reads
    uint64_t evicted_blocks = 0;
  };
  Report Stats() const;
  size_t size() const { return entries_.size(); }

  // One cached block for reports (Engine::Snapshot): a copy of the entry's bookkeeping.
  struct EntryInfo {
    uint64_t key = 0, parent = 0;
    const std::vector<BlockId>* ids = nullptr;  // valid until the cache changes
    size_t bytes = 0, children = 0, pins = 0;
    uint64_t hits = 0;
  };
  std::vector<EntryInfo> Entries() const;

 private:
  struct Entry {
    uint64_t parent = 0;
    std::vector<BlockId> ids;  // (n_layer), one pool ref each held by the cache
    size_t bytes = 0;
    size_t children = 0;
    size_t pins = 0;
    uint64_t last_use = 0;
    uint64_t hits = 0;  // Touch calls (borrows) since it was inserted
    uint64_t content = 0;       // its content key while the content index names it (0: none)
    bool continuation = false;  // a continuation block (own or alias)
    uint64_t alias = 0;         // an alias: the source block's key (ids empty, bytes 0)
    int32_t shift = 0;          // an alias: its run's shift
    uint8_t skip = 0;           // an alias: the hole rows at its start
    uint64_t scope = 0;         // whose keys (Insert's scope)
  };
  bool Idle(const Entry& e) const;  // only the cache holds its blocks
  void Drop(uint64_t key);          // unrefs the blocks, erases the entry, updates the parent

  BlockPool& pool_;
  std::unordered_map<uint64_t, Entry> entries_;
  std::set<std::pair<uint64_t, uint64_t>> leaves_;  // (last_use, key) of unpinned leaves: eviction order
  std::unordered_map<uint64_t, uint64_t> pending_;   // key → owner
  std::multimap<uint64_t, uint64_t> pending_by_owner_;
  struct Content {
    uint64_t key;
    size_t first_pos;
  };
  std::unordered_map<uint64_t, Content> content_;           // content key → block
  std::unordered_map<uint64_t, uint64_t> content_pending_;  // content key → owner
  std::multimap<uint64_t, uint64_t> content_pending_by_owner_;
  uint64_t clock_ = 0;
  uint64_t evicted_ = 0;
};

}  // namespace chorus
