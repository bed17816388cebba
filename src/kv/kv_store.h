// KvStore: the block-based KV layer — a BlockPool shared by all sequences, the precision policy
// asked at sealing time, and per-sequence KvSequence objects (block table per layer + a native
// window for the newest tokens, f16 or q8 rows). Invariant: a block is sealed once, when its 32 tokens are
// complete, with the formats the policy picked; it is never re-quantized.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
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
  // (n_layer) sliding-window attention per layer, 0 = global (empty: every layer global). A local
  // layer's token at position p attends positions (p - layer_window[l], p], masked per token even
  // inside a partly covered block; blocks no reader's window can reach are freed at once.
  std::vector<uint32_t> layer_window;
};

// A run of attention segments (sealed blocks, a frozen prefix's native tail) selected by the
// position of their first token, folded for queries that see positions >= lo (a sliding window's
// edge; 0 = everything). Defaults: all of them, unmasked.
struct SegmentRange {
  size_t lo = 0;                // first position the queries see: earlier rows are masked
  size_t begin = 0;             // segments whose first position is in [begin, end)
  size_t end = SIZE_MAX;
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

  // A new empty sequence of at most `capacity` tokens of its own. With a prefix (a frozen
  // sequence of this store, e.g. a shared document), its tokens continue after the prefix's
  // positions and attend to the prefix's blocks and tail too; the prefix stays alive while read.
  std::unique_ptr<KvSequence> NewSequence(size_t capacity, std::shared_ptr<const KvSequence> prefix = nullptr);

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
  // Scratch shared by every sequence (one sequence appends or attends at a time; KvBatch has its
  // own attention scratch): a block being encoded, and the per-thread attention states of
  // KvSequence::AppendAndAttend. Held once per store, not once per agent.
  AlignedBuffer<float> seal_k_, seal_v_;                // (32, kv_dim) f32
  std::vector<std::unique_ptr<BlockAttention>> attn_;  // per pool thread
  std::vector<std::vector<float>> stack_q_;           // per pool thread: stacked queries of a token run
};

class KvSequence final : public SequenceKv {
 public:
  ~KvSequence() override;
  KvSequence(const KvSequence&) = delete;
  KvSequence& operator=(const KvSequence&) = delete;

  size_t size() const override { return size_; }  // own tokens (after the prefix)
  size_t capacity() const override { return capacity_; }
  size_t Position(size_t t) const override { return base_pos_ + size_ + t; }
  Status AppendAndAttend(size_t layer, size_t n, const float* k, const float* v, const float* q, float* out,
                         ThreadPool& pool) override;
  // The batch is done: its tokens become part of the sequence and the native rows of the batch
  // (scratch between Append and the attention of each layer) are given back.
  void Commit(size_t n) override;

  // Read-only from now on (a shared context): Append fails, sequences may use it as a prefix. A q8
  // window tail is decoded once into the f16 rows its readers attend, and its q8 rows are freed.
  void Freeze();
  bool frozen() const { return frozen_; }
  // Cocktail's reorder (METHODS.md §3 step 5): permutes each layer's block table of a frozen
  // sequence so blocks of equal (K, V) formats are contiguous (stable, by format). Exact: every
  // reader of a frozen context sees all of it, and keys carry their RoPE positions. No block is
  // copied or re-encoded — only ids move. Call it before any reader attends. Error if not frozen.
  Status ReorderByFormat();
  const KvSequence* prefix() const { return prefix_.get(); }
  size_t base_position() const { return base_pos_; }

  // The two halves of AppendAndAttend, for batches of several sequences (kv/kv_batch.h):
  // Append stores and seals this layer's K/V of the next n own tokens (native rows kept for the
  // attention of this layer); AddPrefix / AddOwn fold the prefix, and the keys visible to own
  // token t of the batch, into queries [q0, q0+nq) of att.
  Status Append(size_t layer, size_t n, const float* k, const float* v);
  void AddPrefix(BlockAttention& att, size_t layer, uint32_t kv_head, size_t q0, size_t nq,
                 const SegmentRange& range = {}) const;
  // Own sealed blocks [first live, to_block) of the layer of the last Append, within `range`.
  void AddOwnBlocks(BlockAttention& att, uint32_t kv_head, size_t q0, size_t nq, size_t to_block,
                    const SegmentRange& range = {}) const;
  // Everything else own token t of the batch sees (its window's edge applied): own blocks
  // [from_block, t's block) — those before were already folded in, stacked with other tokens'
  // queries — and the native rows of its block.
  void AddOwn(BlockAttention& att, size_t t, uint32_t kv_head, size_t q0, size_t nq, size_t from_block = 0) const;
  // First absolute position own token t of the batch sees in `layer` (0 on a global layer).
  size_t VisibleFrom(size_t layer, size_t t) const;

  uint64_t id() const { return id_; }
  // Live sealed blocks of a layer: own block indices [first_block(layer), sealed_blocks(layer)).
  // A sliding-window layer frees its leading blocks once no reader's window can reach them.
  const std::vector<BlockId>& blocks(size_t layer) const { return tables_[layer]; }
  size_t first_block(size_t layer) const { return dropped_[layer]; }
  size_t sealed_blocks(size_t layer) const { return dropped_[layer] + tables_[layer].size(); }
  size_t window_tokens(size_t layer) const { return size_ - sealed_blocks(layer) * kBlockTokens; }
  size_t window_bytes() const;
  size_t table_bytes() const;

 private:
  friend class KvStore;
  KvSequence(KvStore& store, uint64_t id, size_t capacity);
  Status Seal(size_t layer, size_t n_full, const uint16_t* nat_k, const uint16_t* nat_v);
  // Frees the leading blocks of every sliding-window layer that the next token (position
  // base_pos_ + size_) — and so every later token and every reader of a frozen prefix — cannot see.
  void FreeOutOfWindow();
  size_t Window(size_t layer) const;  // 0 = global

  KvStore& store_;
  uint64_t id_;
  size_t capacity_;
  size_t size_ = 0;
  size_t base_pos_ = 0;   // absolute position of own token 0 (= prefix length)
  bool frozen_ = false;
  std::shared_ptr<const KvSequence> prefix_;
  std::vector<std::vector<BlockId>> tables_;     // (n_layer, live sealed blocks)
  std::vector<size_t> dropped_;                  // (n_layer) leading blocks freed (sliding window)
  mutable std::vector<std::vector<BlockView>> prefix_views_;  // (n_layer) views when used as a frozen prefix
  std::vector<BlockView> views_;                 // this layer's live own blocks, set by Append
  size_t views_first_ = 0;                       // own block index of views_[0]
  size_t views_window_ = 0;                      // sliding window of the layer of views_ (0 = global)
  size_t nat_base_ = 0;                          // own index of nat_ row 0
  // (n_layer) stored rows (WindowRowBytes each) of the tokens after the last sealed block.
  std::vector<AlignedBuffer<uint8_t>> win_k_, win_v_;
  // (window + batch, kv_dim) fp16 native rows of the layer being computed: read by this
  // sequence's attention after every sequence of a batch has appended; empty between batches
  // (Commit), counted in window_bytes while held. natw_: the same rows in the stored format
  // (q8 windows only), from which the new window is copied.
  AlignedBuffer<uint16_t> nat_k_, nat_v_;
  AlignedBuffer<uint8_t> natw_k_, natw_v_;
  // A frozen q8-window sequence's tails decoded once to the f16 rows its readers attend.
  std::vector<AlignedBuffer<uint16_t>> tail_k_, tail_v_;
  const uint16_t* TailRows(size_t layer, bool keys) const;
};

}  // namespace chorus
