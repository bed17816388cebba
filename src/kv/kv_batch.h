// KvBatch: several sequences advancing in one forward call (batched multi-agent decode). Rows of
// one sequence are contiguous. Attention is grouped by shared prefix: the prefix's blocks are read
// once per step for every query of every agent reading it (queries stacked), then each agent's
// own blocks and window are folded into its own queries, and the two are merged by log-sum-exp.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "kv/kv_store.h"  // KvSequence, BlockAttention

namespace chorus {

class KvBatch final : public SequenceKv {
 public:
  explicit KvBatch(const KvStore& store);

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

 private:
  struct Entry {
    KvSequence* seq;
    size_t row0, n;
  };
  const KvStore& store_;
  AttentionShape shape_;
  std::vector<Entry> entries_;
  std::vector<size_t> positions_;  // (rows) absolute position of each row
  std::vector<std::unique_ptr<BlockAttention>> attn_;  // per pool thread
};

}  // namespace chorus
