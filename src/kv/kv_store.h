// KvStore: the block-based KV layer — a BlockPool shared by all sequences, the precision policy
// asked at sealing time, and per-sequence KvSequence objects (block table per layer + a native
// window for the newest tokens, f16 or q8 rows). A sequence may start with blocks borrowed from
// others (a shared document, a cached prompt prefix): they are refcounted, read in place, and the
// batch attention reads a leading run that several sequences share once for all of them.
// Invariant: a block is sealed once, when its 32 tokens are complete, with the formats the policy
// picked; it is never re-quantized, and never changed while any sequence holds it. A sliding-window
// layer frees a sequence's leading blocks once no token it will still compute can see them.
// Prefill is decode-faithful: appending n tokens at once gives every token the bits it gets when the
// same tokens arrive one by one, whatever the chunking (kv_store_test's PrefillEqualsTokenByToken).
// Accounting: every byte the store holds (blocks and the pool's slots, windows, a batch's native
// rows, undo rows, tables, the scratch it owns) is counted the moment it is allocated; an
// allocation that would pass the byte budget fails instead, and the most ever held at once is kept
// (high_water()). What a sequence can hold at most is projected by KvFootprint (kv_footprint.h).
#pragma once
#include <algorithm>
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
#include "util/thread_pool.h"     // ThreadPool

namespace chorus {

// Native-window allocation unit, in tokens (see KvSequence::Append).
inline constexpr size_t kWindowGranule = 8;

// Queries stacked in one attention pass are at most this many tokens (or batch rows) × the GQA
// group: the attention scratch of a thread has a fixed size (KvFootprint::Overhead).
inline constexpr size_t kStackTokens = 32;

// Long runs of blocks are attended in parts of kPartBlocks blocks, aligned at block 0 (positions
// [1024·k, 1024·(k+1))), each into its own softmax state, and the parts merged in order (kv_batch.cc):
// decode rows spread the parts of one KV head over threads. A row that sees one part only is
// computed as without parts. The store holds the part states of up to kPartSlots (row, part)
// pairs at once, each for every query head (KvStore::parts()).
inline constexpr size_t kPartBlocks = 32;
inline constexpr size_t kPartTokens = kPartBlocks * kBlockTokens;
inline constexpr size_t kPartSlots = 80;  // 15 agents over 5 parts (4K), one row over 80 (80K tokens)

struct KvStoreOptions {
  size_t n_layer = 0;
  AttentionShape shape;
  size_t budget_bytes = 0;  // 0 = unlimited; everything the store holds counts (KvUsage::total)
  WindowFormat window = WindowFormat::kF16;  // rows of the newest < 32 tokens (window_codec.h)
  // (n_layer) sliding-window attention per layer, 0 = global (empty: every layer global). A local
  // layer's token at position p attends positions (p - layer_window[l], p], masked per token even
  // inside a partly covered block; blocks no reader's window can reach are freed at once.
  std::vector<uint32_t> layer_window;
  // (n_layer) how each layer rotated its keys: what a block attached at another offset
  // (KvSequence::Attach) needs to meet its queries exactly. Empty: no sequence may attach such blocks.
  std::vector<KeyRope> layer_rope;
  size_t threads = 1;  // attention scratch is made for this many pool threads up front (more grow it)
  // Testing the all-or-nothing paths: the n-th block allocation of this store (1-based) fails as
  // if the budget were exhausted. 0 = never.
  size_t fail_block_allocation = 0;
};

// A run of sealed blocks selected by the position of their first token, folded for queries that see positions >= lo (a sliding window's
// edge; 0 = everything). Defaults: all of them, unmasked.
struct SegmentRange {
  size_t lo = 0;                // first position the queries see: earlier rows are masked
  size_t begin = 0;             // segments whose first position is in [begin, end)
  size_t end = SIZE_MAX;
};

// Measured bytes of everything the KV layer holds, from the live objects.
struct KvUsage {
  size_t block_bytes = 0;    // the pool: live blocks' payloads + its metadata slot table
  size_t window_bytes = 0;   // windows, a running batch's native rows, undo rows
  size_t table_bytes = 0;    // block tables, block views and the sequence objects themselves
  size_t scratch_bytes = 0;  // the store's seal buffers and per-thread attention states
  size_t blocks = 0;         // live blocks
  size_t tokens = 0;         // tokens held across sequences (each sequence counted)
  size_t total() const { return block_bytes + window_bytes + table_bytes + scratch_bytes; }
};

class KvSequence;
struct BatchRows;

// Blocks a new sequence starts with (a shared document's, a cached prefix's): per layer, the
// live blocks [first[l], n) of the run's n blocks (a sliding-window layer may have dropped the
// leading ones: first[l] > 0; empty `first` = all layers from 0).
struct BorrowedBlocks {
  std::span<const std::vector<BlockId>> tables;  // (n_layer) ids of blocks [first[l], n)
  std::span<const size_t> first;                 // (n_layer) or empty
  size_t blocks() const;                         // n
};

// Blocks attached in the middle of a sequence (KvSequence::Attach): a run of m sealed blocks of
// another sequence, reused at another offset (a segment: METHODS.md §5b). Their keys were rotated
// at (position here - shift); the first block's leading `skip` rows are tokens this sequence does
// not hold there (a hole in its rows: its positions then continue from the first row after it).
struct AttachedBlocks {
  std::span<const std::vector<BlockId>> tables;  // (n_layer) m ids each, every one live
  int32_t shift = 0;
  size_t skip = 0;  // < 32
};

class KvStore {
 public:
  // The policy must outlive the store.
  KvStore(const KvStoreOptions& options, PrecisionPolicy* policy);
  ~KvStore();
  KvStore(const KvStore&) = delete;
  KvStore& operator=(const KvStore&) = delete;

  // A new sequence of at most `capacity` tokens. With borrowed blocks, the sequence starts with
  // them (size() = 32 × their count, one reference taken on each) and its own tokens continue
  // after them; what a sliding-window layer's tokens need of the run must be live.
  std::unique_ptr<KvSequence> NewSequence(size_t capacity, const BorrowedBlocks& borrowed = {});

  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }
  PrecisionPolicy& policy() const { return *policy_; }  // non-owned; observers are told from const paths
  const KvStoreOptions& options() const { return options_; }
  KvGeometry geometry() const;
  // Measured by walking the live objects (tests compare it with held()).
  KvUsage Usage() const;
  // Bytes held now, counted at every allocation and free (equals Usage().total()).
  size_t held() const { return pool_.bytes() + counted_; }
  // The most bytes held at any instant since construction (or ResetHighWater): <= budget, always.
  size_t high_water() const { return high_water_; }
  void ResetHighWater() { high_water_ = held(); }
  size_t budget() const { return options_.budget_bytes; }
  // Blocks sealed here so far (one per layer and block) and the wall time spent sealing them: the
  // policy choosing their formats (an allocator's reallocation included) and the encoding.
  struct SealStats {
    uint64_t blocks = 0;
    double seconds = 0;
  };
  SealStats seal_stats() const { return seal_stats_; }
  // The attention scratch of pool thread ti (grown, and counted, for pools larger than the options
  // said). Shared by every sequence and batch: one batch attends at a time.
  Status PrepareScratch(size_t threads);
  BlockAttention& attention(size_t ti) { return *attn_[ti]; }
  // Seals deferred (KvBatch): between BeginDeferredSeals and EncodeDeferredSeals a sealed block is
  // allocated, counted and given its formats at once (the policy sees it in order), and only its
  // encoding waits, to run over the pool. EncodeDeferredSeals needs PrepareScratch(pool.size())
  // first; on an error (a block it could not encode, or an Append that failed) the caller rolls the
  // batch back, and DropDeferredSeals forgets what was not encoded.
  void BeginDeferredSeals() { defer_seals_ = true; }
  Status EncodeDeferredSeals(ThreadPool& pool);
  void DropDeferredSeals() {
    defer_seals_ = false;
    std::vector<PendingSeal>().swap(pending_);
  }
  std::vector<float>& stack(size_t ti) { return stack_q_[ti]; }
  // Part states shared by the threads of one attention: kPartSlots × n_head states of
  // BlockAttention::PartStateFloats(head_dim) floats.
  float* parts() { return parts_.data(); }
  // The first block of layer `layer` a token at `pos` sees (0 on a global layer).
  size_t FirstVisibleBlock(size_t layer, size_t pos) const;
  // A block sealed elsewhere (a remote store's verified bytes, kv/block_codec.h): allocated here
  // and filled with k then v, counted against the budget like one sealed here (an error, nothing
  // allocated, if it does not fit). Refcount 1: the caller's.
  Result<BlockId> AdoptBlock(KvFormat k_format, std::span<const uint8_t> k, KvFormat v_format,
                             std::span<const uint8_t> v);

 private:
  friend class KvSequence;
  // Counts `more` bytes about to be allocated; an error (nothing counted) if the budget would be
  // passed. `what` names the allocation in the message.
  Status Reserve(size_t more, const char* what);
  Status CheckRoom(size_t more, const char* what) const;  // the check alone (the pool counts itself)
  void Release(size_t bytes) { counted_ -= bytes; }
  void Charge(size_t bytes) {  // fixed bookkeeping: projected by admission, no budget check
    counted_ += bytes;
    NoteHeld();
  }
  void NoteHeld() { high_water_ = std::max(high_water_, held()); }
  size_t ScratchBytes() const;

  KvStoreOptions options_;
  PrecisionPolicy* policy_;
  BlockPool pool_;
  std::set<const KvSequence*> live_;
  uint64_t next_seq_id_ = 1;
  size_t counted_ = 0;            // everything but the pool: sequences' buffers and bookkeeping, scratch
  size_t block_allocations_ = 0;  // attempted so far (KvStoreOptions::fail_block_allocation)
  size_t high_water_ = 0;
  SealStats seal_stats_;
  // Scratch shared by every sequence (one call appends or attends at a time): a block being
  // encoded, and per pool thread an attention state and a stack of queries sized for
  // kStackTokens tokens × the GQA group. Held once per store, not once per agent.
  AlignedBuffer<float> seal_k_, seal_v_;                // (32, kv_dim) f32
  std::vector<AlignedBuffer<float>> seal_more_;         // pool threads 1..: (2, 32, kv_dim) f32 each
  struct PendingSeal {  // a block allocated and given its formats, whose encoding is deferred
    BlockId id;
    BlockFormats f;
    const uint16_t* k;  // (32, kv_dim) fp16: the sequence's native rows, alive until its next Append
    const uint16_t* v;
  };
  bool defer_seals_ = false;
  // Filled by one batch's appends and freed when they are encoded: transient bookkeeping of a step
  // (one entry per block sealed in it), like AttendRows' plan, not held between steps and not counted.
  std::vector<PendingSeal> pending_;
  std::vector<std::unique_ptr<BlockAttention>> attn_;  // per pool thread
  std::vector<std::vector<float>> stack_q_;           // per pool thread: (kStackTokens·group, head_dim)
  std::vector<float> parts_;                          // (kPartSlots · n_head, head_dim + 2)
};

// Reorders each global layer's block table so blocks of equal (K, V) formats are contiguous
// (stable, by format): Cocktail's reorder (METHODS.md §3 step 5). Exact for readers that see every
// block of the table (keys carry their RoPE positions); only ids move, no block is copied or
// re-encoded. Sliding-window layers mask by position: their tables keep their order.
void SortBlocksByFormat(std::vector<std::vector<BlockId>>& tables, const BlockPool& pool,
                        std::span<const uint32_t> layer_window = {});

class KvSequence final : public SequenceKv {
 public:
  ~KvSequence() override;
  KvSequence(const KvSequence&) = delete;
  KvSequence& operator=(const KvSequence&) = delete;

  // Rows held, borrowed and attached blocks (their holes too) included: rows are a sequence's
  // storage order, and a token's position is its row minus the hole rows before it.
  size_t size() const override { return size_; }
  size_t capacity() const override { return capacity_; }
  size_t Position(size_t t) const override { return size_ + t - holes_; }
  // Appends another sequence's sealed blocks after this one's rows (see AttachedBlocks): the
  // sequence must end on a block boundary with no batch in flight, and have room for them. One
  // reference is taken on each. Their rows join size(); their hole rows are no one's.
  Status Attach(const AttachedBlocks& run);
  // Rows of attached blocks (holes included), and whether block j of the table was attached.
  size_t attached_rows() const;
  bool attached(size_t j) const;
  size_t hole_rows() const { return holes_; }
  Status AppendAndAttend(size_t layer, size_t n, const float* k, const float* v, const float* q, float* out,
                         ThreadPool& pool) override;
  // The batch is done: its tokens become part of the sequence, the native rows of the batch
  // (scratch between Append and the attention of each layer) are given back, and sliding-window
  // layers free the blocks no later token can see (see keep_from).
  void Commit(size_t n) override;
  // Undoes every Append since the last Commit (all layers): the blocks they sealed are unreferenced
  // (the policy is told: PrecisionPolicy::Unseal), windows restored, the native rows freed. The
  // sequence reads and holds what it did before the batch (a window may keep one allocation
  // granule more until its next Append).
  void Rollback() override;

  // The two halves of AppendAndAttend, for batches of several sequences (kv/kv_batch.h):
  // Append stores and seals this layer's K/V of the next n tokens (native rows kept for the
  // attention of this layer); AddOwn folds the keys visible to token t of the batch into queries
  // [q0, q0+nq) of att: blocks [from_block, (size()+t)/32) (its window's edge applied) and the
  // native rows of its block.
  // defer: the views of the layer's blocks are left to FinishAppend (given the same n, k, v; called
  // once after every successful deferred Append), and
  // when nothing is sealed and the window keeps its size (most decode steps) storing the new rows
  // into the window in place and decoding its earlier rows into the native rows are left to it
  // too. FinishAppend touches nothing but this sequence (a batch runs it for its sequences over the
  // pool); nothing may read the views, the window or the native rows before it.
  Status Append(size_t layer, size_t n, const float* k, const float* v, bool defer = false);
  void FinishAppend(size_t layer, size_t n, const float* k, const float* v);
  // Blocks [first live, to_block) of the layer of the last Append, within `range`.
  void AddOwnBlocks(BlockAttention& att, uint32_t kv_head, size_t q0, size_t nq, size_t to_block,
                    const SegmentRange& range = {}) const;
  // from_block: blocks before it were already folded in (stacked with other tokens' queries).
  // [part_begin, part_end): only blocks (and native rows) whose first position lies there (a part).
  void AddOwn(BlockAttention& att, size_t t, uint32_t kv_head, size_t q0, size_t nq, size_t from_block = 0,
              size_t part_begin = 0, size_t part_end = SIZE_MAX) const;
  // First position token t of the batch sees in `layer` (0 on a global layer).
  size_t VisibleFrom(size_t layer, size_t t) const;
  // Views of the live blocks of the layer of the last Append (the attention that follows reads them).
  std::span<const BlockView> views() const { return views_; }
  size_t views_first() const { return views_first_; }

  // Sliding-window layers keep every block a token at position `pos` would see, even when the
  // sequence's own next token sees less (others will compute from there: a document's readers
  // recompute its tail block; a prompt's blocks wait until the prefix cache holds them).
  // SIZE_MAX (the default): free as the sequence moves on.
  void set_keep_from(size_t pos) { keep_from_ = pos; }

  uint64_t id() const { return id_; }
  // Live sealed blocks of a layer: block indices [first_block(layer), sealed_blocks(layer)).
  const std::vector<BlockId>& blocks(size_t layer) const { return tables_[layer]; }
  size_t first_block(size_t layer) const { return dropped_[layer]; }
  size_t sealed_blocks(size_t layer) const { return dropped_[layer] + tables_[layer].size(); }
  // The block id of block index j of a layer, or kNoBlock if it was freed (sliding window).
  BlockId block(size_t layer, size_t j) const {
    return j >= dropped_[layer] && j < sealed_blocks(layer) ? tables_[layer][j - dropped_[layer]] : kNoBlock;
  }
  size_t window_tokens(size_t layer) const { return size_ - sealed_blocks(layer) * kBlockTokens; }
  // Leading blocks per layer that came from NewSequence's `borrowed` (not sealed by this sequence).
  size_t borrowed_blocks() const { return borrowed_; }
  // Measured from the buffers (allocated sizes): windows + native rows + undo rows.
  size_t window_bytes() const;
  // Measured from the containers (capacities): block tables, block views, the object itself.
  size_t table_bytes() const;
  // Everything this sequence holds but its sealed blocks (the pool's).
  size_t own_bytes() const { return window_bytes() + table_bytes(); }
  // table_bytes() of a sequence of `capacity` tokens of a store with these options (kv_footprint.h).
  static size_t TableBytesFor(const KvStoreOptions& o, size_t capacity);

 private:
  friend class KvStore;
  KvSequence(KvStore& store, uint64_t id, size_t capacity);
  Status Seal(size_t layer, size_t n_full, const uint16_t* nat_k, const uint16_t* nat_v);
  // Frees the leading blocks of every sliding-window layer that no token from
  // min(size_, keep_from_) on can see.
  void FreeOutOfWindow();
  size_t Window(size_t layer) const;  // 0 = global
  // The first row a token at `row` sees on a layer of sliding window w (0 = global): by position,
  // so hole rows are skipped over.
  size_t WindowEdge(size_t w, size_t row) const;
  // Resizes a buffer (contents not kept), counting the change; an error if the budget would pass.
  template <typename T>
  Status Fit(AlignedBuffer<T>& b, size_t n, const char* what);
  template <typename T>
  void Drop(AlignedBuffer<T>& b);  // frees a buffer, counting it
  void RollbackLayer(size_t layer);
  void SetViews(size_t layer);
  void DropBatchRows();  // the native rows of the batch

  // What Rollback needs of one layer appended since the last Commit.
  struct Undo {
    bool active = false;
    size_t table_size = 0;        // live blocks the layer had before the batch
    bool window_moved = false;    // a seal replaced the window: the old rows are kept below
    bool decode_deferred = false;  // Append(defer) stored nothing: FinishAppend stores the new rows
    uint32_t decode_rows = 0;      // after the window's first decode_rows and decodes those
    AlignedBuffer<uint8_t> k, v;  // the window before the batch (when moved)
  };

  KvStore& store_;
  uint64_t id_;
  size_t capacity_;
  size_t size_ = 0;
  size_t borrowed_ = 0;                          // leading blocks per layer not sealed here
  size_t keep_from_ = SIZE_MAX;
  std::vector<std::vector<BlockId>> tables_;     // (n_layer, live sealed blocks) one pool ref each, reserved for capacity/32
  std::vector<size_t> dropped_;                  // (n_layer) leading blocks freed (sliding window)
  std::vector<BlockView> views_;                 // this layer's live blocks, set by Append (reserved)
  std::vector<Undo> undo_;                       // (n_layer)
  size_t counted_bookkeeping_ = 0;               // table_bytes() as charged at creation
  size_t views_first_ = 0;                       // block index of views_[0]
  size_t views_window_ = 0;                      // sliding window of the layer of views_ (0 = global)
  size_t nat_base_ = 0;                          // index of nat_ row 0
  struct Run {                                   // blocks [first, first + blocks) were attached
    size_t first, blocks;
    int32_t shift;
    uint32_t skip;
  };
  std::vector<Run> runs_;                // in row order; counted in table_bytes once grown
  size_t holes_ = 0;                     // hole rows of attached runs
  const KeyRope* views_rope_ = nullptr;  // the RoPE of the layer of views_ (null: none given)
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
