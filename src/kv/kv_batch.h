// KvBatch: several sequences advancing in one forward call (batched multi-agent decode, chunked
// prefill beside it). Rows of one sequence are contiguous. Attention is grouped by shared leading
// blocks: sequences whose tables start with the same blocks (a shared document, a cached prompt
// prefix) have their queries stacked and that run read once per step for all of them; then each
// sequence's own blocks and native rows are folded into its own queries.
// Invariant: a row's result does not depend on which other rows share the batch (the same blocks
// meet the same per-block updates in the same order; the kernels give stacked queries their own bits).
#pragma once
#include <cstddef>
#include <span>
#include <vector>

#include "kv/kv_store.h"  // KvSequence, KvStore

namespace chorus {

// Rows [row0, row0 + n) of a batch are the next n tokens of seq.
struct BatchRows {
  KvSequence* seq;
  size_t row0, n;
};

// The attention of every row over what its token sees, after each sequence's Append of `layer`:
// q (rows, q_dim) scaled, out (rows, q_dim).
void AttendRows(KvStore& store, size_t layer, std::span<const BatchRows> entries, const float* q, float* out,
                ThreadPool& pool);

class KvBatch final : public SequenceKv {
 public:
  explicit KvBatch(KvStore& store);

  void Clear();
  // Adds the next n rows of the batch for `seq` (which must outlive the forward call).
  void Add(KvSequence* seq, size_t n);
  size_t rows() const { return positions_.size(); }

  size_t size() const override { return 0; }
  size_t capacity() const override { return rows(); }
  size_t Position(size_t t) const override { return positions_[t]; }
  Status AppendAndAttend(size_t layer, size_t n, const float* k, const float* v, const float* q, float* out,
                         ThreadPool& pool) override;
  void Commit(size_t n) override;
  // Every sequence of the batch back to how it was before the batch (KvSequence::Rollback).
  void Rollback() override;
  // The sequence whose Append failed in the last AppendAndAttend (nullptr: none, or the failure
  // was not one sequence's, e.g. the store's scratch).
  const KvSequence* failed() const { return failed_; }

 private:
  KvStore& store_;
  const KvSequence* failed_ = nullptr;
  std::vector<BatchRows> entries_;
  std::vector<size_t> positions_;  // (rows) position of each row in its sequence
};

}  // namespace chorus
