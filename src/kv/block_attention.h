// Attention straight from compressed blocks: streaming softmax states per query, updated block by
// block (scores on the compressed keys, values accumulated from the compressed values) and by
// native fp16 rows, then merged by log-sum-exp. Rotated formats work in the Hadamard domain: the
// query is rotated once, the rotated accumulator rotated back once. No dequantized cache, ever.
#pragma once
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "kv/kv_format.h"     // KvFormat, KvGeometry
#include "kv/kv_kernels.h"    // KvBlockKernels
#include "ops/elementwise.h"  // RopeParams

namespace chorus {

// One sealed block as the kernels see it: its two sides and their formats (non-owning).
// A block reused at another offset (a segment attached after a different prefix, KvSequence::Attach)
// holds keys rotated at (its position here - shift): queries meet it rotated by -shift, which is
// exact because RoPE rotations compose (METHODS.md §5b). Its first `skip` rows are a hole: tokens
// this sequence does not hold there; no query sees them.
struct BlockView {
  const uint8_t* k;
  const uint8_t* v;
  KvFormat k_format;
  KvFormat v_format;
  uint8_t skip = 0;   // leading rows no query sees
  int32_t shift = 0;  // position here minus the position its keys were rotated at
};

// How a layer rotates its keys (RoPE), so a query can be rotated back for a shifted block. A
// rope_dim of 0: no rotation to undo (a shifted block is then an error).
struct KeyRope {
  size_t rope_dim = 0;
  bool neox = false;
  RopeParams params;
};
// In place: rotates each of n heads (head_dim apart) by the RoPE of position `pos` (may be
// negative); cos_sin: (rope_dim) scratch.
void RotateHeads(const KeyRope& rope, int64_t pos, float* heads, size_t n, size_t head_dim, float* cos_sin);

// Streaming-softmax state of n_q queries: running max m, sum l, unnormalized output o.
struct SoftmaxState {
  std::vector<float> m;  // (n_q)
  std::vector<float> l;  // (n_q)
  std::vector<float> o;  // (n_q, head_dim)
  void Reset(size_t n_q, size_t head_dim);
};

// Scratch and states for attending n_q stacked queries of one KV head. Reused across calls.
class BlockAttention {
 public:
  BlockAttention(const KvGeometry& geometry);
  // Starts a query group: q (n_q, head_dim), already scaled by 1/sqrt(head_dim).
  void Begin(const float* q, size_t n_q);
  // The calls below act on queries [q0, q0 + nq) of the group (all by default): a shared prefix is
  // folded in once for every stacked query, each agent's private keys only into its own queries.
  // Folds in sealed blocks (any mix of formats), reading head `kv_head` of each; consecutive
  // blocks of equal formats form one group (one kernel lookup).
  // skip_first: the first block's leading rows no query may see (a sliding window's edge): their
  // scores are -inf before the fold, so they weigh nothing and the rest is exactly as unmasked
  // (a block's own BlockView::skip masks the same way). Consecutive blocks of one shift are one
  // group too; a group with a shift needs `rope` (its layer's).
  void AddBlocks(std::span<const BlockView> blocks, uint32_t kv_head, size_t q0 = 0, size_t nq = SIZE_MAX,
                 size_t skip_first = 0, const KeyRope* rope = nullptr);
  // Folds in native fp16 rows: k, v rows of `stride` elements, this head's slice at k/v.
  void AddNative(const uint16_t* k, const uint16_t* v, size_t stride, size_t n_rows, size_t q0 = 0,
                 size_t nq = SIZE_MAX);
  // Writes the normalized output of queries [q0, q0+nq) to out (nq, head_dim), merging the plain
  // and rotated states.
  void Finish(float* out, size_t q0 = 0, size_t nq = SIZE_MAX);
  // Parts (kv_batch.cc attends a long run of blocks in fixed parts, each into its own state, and
  // merges the parts' states in order). Restart: every query's state is empty again; the queries
  // (and their rotation) stay.
  void Restart();
  // Query i (of the group) as one part state at dst: the plain state (m, l, o (head_dim)), then
  // the rotated one (still in the Hadamard domain: rotated back once, by FinishParts). An empty
  // state has m = -inf.
  void ExportPart(size_t i, float* dst) const;
  // The per-thread scratch for merging: max_q part states (Reserve).
  float* part_acc() { return part_acc_.data(); }
  float* part_tmp() { return part_tmp_.data(); }
  // Floats of one query's part state.
  static size_t PartStateFloats(size_t head_dim) { return 2 * (head_dim + 2); }
  // acc ⊕= src for n queries' part states, plain with plain and rotated with rotated (empty src:
  // acc unchanged; empty acc: a copy). Parts are merged left to right in a fixed order, so the bits
  // do not depend on who computed them.
  static void MergeParts(float* acc, const float* src, size_t n, size_t head_dim);
  // out (n, head_dim): the normalized outputs of n merged part states (as Finish).
  void FinishParts(const float* acc, size_t n, float* out);
  // Format groups folded in since construction (tests: a reordered table is one group per format).
  size_t groups() const { return groups_; }
  // Sizes the scratch for groups of up to max_q queries at once (a larger Begin grows it).
  void Reserve(size_t max_q);
  // Bytes of scratch this object holds (capacities, the object included).
  size_t bytes() const;
  // What bytes() is after Reserve(max_q) on a fresh object of this geometry.
  static size_t BytesFor(const KvGeometry& g, size_t max_q);

 private:
  void Update(SoftmaxState& st, size_t q0, size_t nq, size_t n_rows);
  // The queries for blocks of this shift, Hadamard-rotated or not: q_ itself (shift 0, plain), or
  // derived into q_rot_ (one derived set is kept: a switch derives again).
  const float* Queries(int32_t shift, bool rotated, const KeyRope* rope);
  // For score_q8 of `keys` (tq4: rotated; q8: as they are) at this shift.
  QueryQ8 QuantizedQueries(KvFormat keys, int32_t shift, const KeyRope* rope);

  KvGeometry g_;
  size_t n_q_ = 0;
  const float* q_ = nullptr;
  std::vector<float> q_rot_;  // (n_q, head_dim) derived queries (Queries), computed on first need
  bool have_q_rot_ = false;
  int32_t q_rot_shift_ = 0;  // what q_rot_ holds: H · R(-shift) · q (rotated) or R(-shift) · q
  bool q_rot_hadamard_ = false;
  int32_t q8_shift_ = 0;           // the shift q8_ was quantized at
  std::vector<int8_t> q8_;         // (n_q, head_dim) int8 rotated queries (score_q8), on first need, and
  bool q8_padded_ = false;         // 16 zero rows after them for the AMX kernels (QueryQ8::qp = q8_)
  std::vector<float> q8_scale_;    // (n_q)
  std::vector<int32_t> q8_bias_;   // (n_q)
  KvFormat q8_keys_ = KvFormat::kF16;  // the keys q8_ was quantized for (f16: none yet)
  SoftmaxState plain_, rot_;   // accumulators of non-rotated / rotated value formats
  std::vector<float> scores_;  // (n_q, 32)
  std::vector<float> tmp_;     // (head_dim)
  std::vector<float> part_acc_;  // (max_q, head_dim + 2) merged part states of a thread's own unit
  std::vector<float> part_tmp_;  // one part state
  KvBlockKernels kernels_[std::size(kAllKvFormats)];
  size_t groups_ = 0;
};

// Scalar reference: decode every block, then plain softmax attention in double. out: (n_q, head_dim).
// A block's skip rows are left out and a shifted block meets the query rotated by -shift (`rope`).
void BlockAttentionRef(const KvGeometry& g, std::span<const BlockView> blocks, uint32_t kv_head,
                       const uint16_t* native_k, const uint16_t* native_v, size_t stride, size_t n_native,
                       const float* q, size_t n_q, float* out, const KeyRope* rope = nullptr);

}  // namespace chorus
