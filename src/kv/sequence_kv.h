// SequenceKv: what the forward pass needs from a KV store for one sequence, one call per layer per
// batch (so the virtual call is far off the hot path). Implemented by DenseKvCache (the fp16
// reference) and KvSequence (blocks of mixed-precision formats).
#pragma once
#include <cstddef>

#include "util/status.h"       // Status
#include "util/thread_pool.h"  // ThreadPool

namespace chorus {

struct AttentionShape {
  size_t n_head = 0;     // query heads
  size_t n_head_kv = 0;  // KV heads (n_head % n_head_kv == 0)
  size_t head_dim = 0;
  size_t q_dim() const { return n_head * head_dim; }
  size_t kv_dim() const { return n_head_kv * head_dim; }
};

class SequenceKv {
 public:
  virtual ~SequenceKv() = default;
  virtual size_t size() const = 0;      // tokens committed
  virtual size_t capacity() const = 0;  // most tokens it may hold
  // Absolute position (for RoPE) of row t of the next batch.
  virtual size_t Position(size_t t) const { return size() + t; }
  // Stores this layer's K/V of positions [size(), size() + n) and writes causal attention of the n
  // queries over positions [0, own position]: k, v: (n, kv_dim); q: (n, q_dim) already scaled by
  // 1/sqrt(head_dim); out: (n, q_dim). An error leaves this layer as it was; the layers appended
  // before it keep the batch until Rollback (or Commit).
  virtual Status AppendAndAttend(size_t layer, size_t n, const float* k, const float* v, const float* q,
                                 float* out, ThreadPool& pool) = 0;
  // After every layer has been given the batch: the n tokens become part of the sequence.
  virtual void Commit(size_t n) = 0;
  // A batch that failed part-way (some layers appended, no Commit): every layer back to how it was
  // before the batch. Nothing to do for stores that only write past size() before Commit.
  virtual void Rollback() {}
};

}  // namespace chorus
