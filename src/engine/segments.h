// Segments: spans of a prompt that the prefix cache holds from another prompt, after other text,
// reused at their new offset instead of prefilled (METHODS.md §5b). A span is found block by block
// by content keys (PrefixCache::ContentKey), so any run of ≥ 32 tokens another prompt sealed is
// found, whatever message or role it came in. Positions are exact: the run's blocks are attached
// with a shift the attention undoes on the queries (KvSequence::Attach). Context is repaired by
// recomputing the span's first tokens (EPIC's attention sink, and the rows up to the block
// boundary where the run can be attached), so only the rest of the span is reused.
// A request's blocks from its first attached run on are approximate: they are cached under
// continuation keys (PrefixCache::ContinuationKey), never in the exact chain, so an exact-only
// request never matches them. With reuse off the engine is bit-identical (Segments.ReuseOffIsBitIdentical).
// Invariant: a planned run holds one pool reference on each of its blocks from planning until it
// is attached or dropped (SegmentPlan's destructor), so eviction can never take it meanwhile.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/prefix_cache.h"  // PrefixCache
#include "kv/block_pool.h"        // BlockPool, BlockId

namespace chorus {

// How a span is repaired: its first max(min_tokens, fraction · span) tokens are recomputed (then
// rounded up to where its blocks can be attached).
struct SegmentRepair {
  double fraction = 0.05;
  size_t min_tokens = 16;
};

// One run of cached blocks to attach to a request's sequence.
struct SegmentRun {
  size_t at = 0;        // prompt position at which it is attached (the sequence's rows end on a block boundary there)
  size_t tokens = 0;    // prompt tokens its rows hold (its blocks' rows minus the hole)
  size_t repaired = 0;  // tokens of its span before `at` this request recomputes (the repair, gaps, alignment)
  int32_t shift = 0;    // position here minus the position its keys were computed at
  size_t skip = 0;      // the first block's leading rows this request holds itself (a hole)
  std::vector<std::vector<BlockId>> tables;  // (n_layer) its blocks
  std::vector<uint64_t> keys;                // their cache keys (LRU touch on attach; a continuation's own keys)
  std::vector<uint64_t> sources;             // (blocks) the source block's exact key; 0: a continuation's own block
};

// The runs planned for one request, in prompt order, each holding its pool references until
// attached (Take) or dropped.
class SegmentPlan {
 public:
  SegmentPlan() = default;
  SegmentPlan(BlockPool* pool, std::vector<SegmentRun> runs);
  ~SegmentPlan() { Clear(); }
  SegmentPlan(SegmentPlan&& o) noexcept { *this = std::move(o); }
  SegmentPlan& operator=(SegmentPlan&& o) noexcept;
  SegmentPlan(const SegmentPlan&) = delete;
  SegmentPlan& operator=(const SegmentPlan&) = delete;

  bool empty() const { return next_ >= runs_.size(); }
  // The next run to attach (empty() must be false).
  const SegmentRun& next() const { return runs_[next_]; }
  // The next run was attached (its sequence took its own references): ours are given back.
  void Advance();
  // Every run left is dropped (its references given back).
  void Clear();
  // The first run's `at` (SIZE_MAX with none): prompt blocks before it are exact.
  size_t first_at() const { return runs_.empty() ? SIZE_MAX : runs_.front().at; }
  size_t runs() const { return runs_.size(); }
  const SegmentRun& run(size_t i) const { return runs_[i]; }
  // Extra rows a sequence needs for the holes: one block per run at most.
  size_t hole_allowance() const;
  size_t reused_tokens() const;  // tokens every run holds
  size_t blocks() const;         // blocks every run holds (per layer)
  size_t repaired_tokens() const;

 private:
  void Unref(size_t from);
  BlockPool* pool_ = nullptr;
  std::vector<SegmentRun> runs_;
  size_t next_ = 0;
};

// The runs of `prompt` after position `from` (a block boundary: what the exact prefix covers; its
// last block's key is `parent`, 0 for none) that the cache holds. First the continuation of that
// exact prefix another request with the same prompt left (PrefixCache::ContinuationKey: its own
// blocks and attached runs, in its layout, nothing repaired again), then spans found by content
// anywhere after, each with its repair. Every layer's block of a run must be live. The last prompt
// token is never reused (its logits are computed). `salt` salts the keys (the request's scope);
// a content run not found under it is looked for under `public_salt` (public contexts' blocks).
SegmentPlan PlanSegments(std::span<const int32_t> prompt, size_t from, uint64_t parent, const PrefixCache& cache,
                         BlockPool& pool, uint64_t salt, uint64_t public_salt, size_t n_layer,
                         const SegmentRepair& repair);
// The content keys of a prompt's 32-token windows from `from` on, at every offset (the rolling
// search of PlanSegments): one pending among them means another request is computing a span this
// one could reuse.
bool AnyContentPending(std::span<const int32_t> prompt, size_t from, const PrefixCache& cache, uint64_t content_salt);

}  // namespace chorus
