// KvStore: the block-based KV layer — a BlockPool shared by all sequences, the precision policy
// asked at sealing time, and per-sequence KvSequence objects (block table per layer + a native
// window for the newest tokens, f16 or q8 rows). A sequence may start with blocks borrowed from
// others (a shared document, a cached prompt prefix): they are refcounted, read in place, and the
// batch attention reads a leading run that several sequences share once for all of them.
// Invariant: a block is sealed once, when its 32 tokens are complete, with the formats the policy
// picked; it is never re-quantized, and never changed while any sequence holds it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <span>
#include <vector>

#include "kv/block_attention.h"  // BlockView, BlockAttention
#include "kv/block_pool.h"       // BlockPool, BlockId
#include "kv/precision_policy.h" // PrecisionPolicy
#include "kv/sequence_kv.h"      // SequenceKv, AttentionShape
#include "kv/window_codec.h"     // WindowFormat
#include "util/aligned_buffer.h"

namespace chorus {

// Native-window allocation unit, in tokens (see KvSequence::Append).
inline constexpr size_t kWindowGranule = 8;

struct KvStoreOptions {
  size_t n_layer = 0;
  AttentionShape shape;
  size_t budget_bytes = 0;  // 0 = unlimited
  WindowFormat window = WindowFormat::kF16;  // rows of the newest < 32 tokens (window_codec.h)
};

// Measured bytes of everything the KV layer holds.
struct KvUsage {
  size_t block_bytes = 0;   // sealed blocks (payload + per-block metadata), from the pool
  size_t window_bytes = 0;  // native windows of every live sequence
  size_t table_bytes = 0;   // block tables (ids) of every live sequence
  size_t blocks = 0;        // live blocks
  size_t tokens = 0;        // tokens held across sequences (each sequence counted)
  size_t total() const { return block_bytes + window_bytes + table_bytes; }
};

class KvSequence;

class KvStore {
 public:
  // The policy must outlive the store.
  KvStore(const KvStoreOptions& options, PrecisionPolicy* policy);
  ~KvStore();
  KvStore(const KvStore&) = delete;
  KvStore& operator=(const KvStore&) = delete;

  // A new sequence of at most `capacity` tokens. `borrowed`, if given, holds one table per layer
  // of equally many sealed blocks of this store (a shared document's, a cached prefix's): the
  // sequence starts with them (size() = 32 × that count, one reference taken on each block) and
  // its own tokens continue after them.
  std::unique_ptr<KvSequence> NewSequence(size_t capacity,
                                          std::span<const std::vector<BlockId>> borrowed = {});

  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }
  PrecisionPolicy& policy() const { return *policy_; }  // non-owned; observers are told from const paths
  const KvStoreOptions& options() const { return options_; }
  KvGeometry geometry() const;
  KvUsage Usage() const;

 private:
  friend class KvSequence;
  KvStoreOptions options_;
  PrecisionPolicy* policy_;
  BlockPool pool_;
  std::set<const KvSequence*> live_;
  uint64_t next_seq_id_ = 1;
  friend void AttendRows(KvStore& store, std::span<const struct BatchRows> entries, const float* q, float* out,
                         ThreadPool& pool);
  // Scratch shared by every sequence (one call appends or attends at a time): a block being
  // encoded, and the per-thread attention states and stacked queries of the batch attention.
  // Held once per store, not once per agent.
  AlignedBuffer<float> seal_k_, seal_v_;                // (32, kv_dim) f32
  std::vector<std::unique_ptr<BlockAttention>> attn_;  // per pool thread
  std::vector<std::vector<float>> stack_q_;           // per pool thread: (stacked queries, head_dim)
  void EnsureThreads(size_t n);
};

// Reorders each layer's block table so blocks of equal (K, V) formats are contiguous (stable, by
// format): Cocktail's reorder (METHODS.md §3 step 5). Exact for readers that see every block of
// the table (keys carry their RoPE positions); only ids move, no block is copied or re-encoded.
void SortBlocksByFormat(std::vector<std::vector<BlockId>>& tables, const BlockPool& pool);

class KvSequence final : public SequenceKv {
 public:
  ~KvSequence() override;
  KvSequence(const KvSequence&) = delete;
  KvSequence& operator=(const KvSequence&) = delete;

  size_t size() const override { return size_; }  // tokens held, borrowed blocks included
  size_t capacity() const override { return capacity_; }
  Status AppendAndAttend(size_t layer, size_t n, const float* k, const float* v, const float* q, float* out,
                         ThreadPool& pool) override;
  // The batch is done: its tokens become part of the sequence and the native rows of the batch
  // (scratch between Append and the attention of each layer) are given back.
  void Commit(size_t n) override;

  // The two halves of AppendAndAttend, for batches of several sequences (kv/kv_batch.h):
  // Append stores and seals this layer's K/V of the next n tokens (native rows kept for the
  // attention of this layer); AddOwn folds the keys visible to token t of the batch into queries
  // [q0, q0+nq) of att: blocks [from_block, (size()+t)/32) and the token's own block's rows.
  Status Append(size_t layer, size_t n, const float* k, const float* v);
  // from_block: blocks before it were already folded in (stacked with other tokens' queries).
  void AddOwn(BlockAttention& att, size_t t, uint32_t kv_head, size_t q0, size_t nq, size_t from_block = 0) const;
  // Views of this layer's blocks as of the last Append (the attention that follows reads them).
  std::span<const BlockView> views() const { return views_; }

  uint64_t id() const { return id_; }
  const std::vector<BlockId>& blocks(size_t layer) const { return tables_[layer]; }
  // Leading blocks per layer that came from NewSequence's `borrowed` (not sealed by this sequence).
  size_t borrowed_blocks() const { return borrowed_; }
  size_t window_tokens(size_t layer) const { return size_ - tables_[layer].size() * kBlockTokens; }
  size_t window_bytes() const;
  size_t table_bytes() const;

 private:
  friend class KvStore;
  KvSequence(KvStore& store, uint64_t id, size_t capacity);
  Status Seal(size_t layer, size_t n_full, const uint16_t* nat_k, const uint16_t* nat_v);

  KvStore& store_;
  uint64_t id_;
  size_t capacity_;
  size_t size_ = 0;
  size_t borrowed_ = 0;                          // leading blocks per layer not sealed here
  std::vector<std::vector<BlockId>> tables_;     // (n_layer, sealed blocks) one pool ref each
  std::vector<BlockView> views_;                 // this layer's blocks, set by Append
  size_t nat_base_ = 0;                          // own index of nat_ row 0
  // (n_layer) stored rows (WindowRowBytes each) of the tokens after the last sealed block.
  std::vector<AlignedBuffer<uint8_t>> win_k_, win_v_;
  // (window + batch, kv_dim) fp16 native rows of the layer being computed: read by this
  // sequence's attention after every sequence of a batch has appended; empty between batches
  // (Commit), counted in window_bytes while held. natw_: the same rows in the stored format
  // (q8 windows only), from which the new window is copied.
  AlignedBuffer<uint16_t> nat_k_, nat_v_;
  AlignedBuffer<uint8_t> natw_k_, natw_v_;
};

}  // namespace chorus
