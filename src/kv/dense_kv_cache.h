// DenseKvCache: the foundation's KV store — one sequence, per layer a contiguous fp16 K and V.
// Invariant: positions [0, size()) of every layer hold the K/V of the tokens fed so far.
// (The block-based, mixed-precision KvStore of DESIGN.md replaces this for compressed caches.)
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kv/sequence_kv.h"      // SequenceKv
#include "util/aligned_buffer.h"  // AlignedBuffer

namespace chorus {

class DenseKvCache final : public SequenceKv {
 public:
  // layer_window: (n_layer) sliding window per layer, 0 = global (empty: all global). A local
  // layer's token at position p attends positions (p - window, p].
  DenseKvCache(size_t n_layer, size_t capacity, const AttentionShape& shape,
               std::vector<uint32_t> layer_window = {});
  DenseKvCache(const DenseKvCache&) = delete;
  DenseKvCache& operator=(const DenseKvCache&) = delete;

  size_t size() const override { return size_; }
  size_t capacity() const override { return capacity_; }
  Status AppendAndAttend(size_t layer, size_t n, const float* k, const float* v, const float* q, float* out,
                         ThreadPool& pool) override;
  void Commit(size_t n) override { size_ += n; }
  size_t kv_dim() const { return kv_dim_; }
  size_t n_layer() const { return n_layer_; }

  uint16_t* K(size_t layer, size_t pos) { return k_[layer].data() + pos * kv_dim_; }
  uint16_t* V(size_t layer, size_t pos) { return v_[layer].data() + pos * kv_dim_; }
  const uint16_t* K(size_t layer, size_t pos) const { return k_[layer].data() + pos * kv_dim_; }
  const uint16_t* V(size_t layer, size_t pos) const { return v_[layer].data() + pos * kv_dim_; }

  void Clear() { size_ = 0; }
  // Bytes held (payload of all layers at full capacity).
  size_t bytes() const;

 private:
  size_t n_layer_, capacity_, kv_dim_;
  AttentionShape shape_;
  std::vector<uint32_t> layer_window_;  // (n_layer) or empty
  size_t size_ = 0;
  std::vector<AlignedBuffer<uint16_t>> k_;  // per layer: (capacity, kv_dim) fp16
  std::vector<AlignedBuffer<uint16_t>> v_;  // per layer: (capacity, kv_dim) fp16
};

// Causal attention of one query head over fp16 K/V rows [0, n_ctx) of one KV head.
// q: (head_dim) already scaled by 1/sqrt(head_dim); k, v: row stride `stride` elements;
// scores: scratch (n_ctx); out: (head_dim).
void AttendDenseHead(const float* q, const uint16_t* k, const uint16_t* v, size_t stride,
                     size_t n_ctx, size_t head_dim, float* scores, float* out);
void AttendDenseHeadRef(const float* q, const uint16_t* k, const uint16_t* v, size_t stride,
                        size_t n_ctx, size_t head_dim, float* out);

}  // namespace chorus
