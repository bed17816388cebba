// DenseKvCache: the foundation's KV store — one sequence, per layer a contiguous fp16 K and V.
// Invariant: positions [0, size()) of every layer hold the K/V of the tokens fed so far.
// (The block-based, mixed-precision KvStore of DESIGN.md replaces this for compressed caches.)
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kv/attention_math.h"    // kAttendRows
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

  // Keys: per layer, tiles of kAttendRows positions × one KV head, stored transposed (ScoreF16Tile's
  // layout: element c of position 32t + j at c * 32 + j), tile (t, head) at (t * n_head_kv + head) * 32
  // * head_dim. Values: per layer (capacity, kv_dim) rows.
  uint16_t* KeyTile(size_t layer, size_t t, size_t head) {
    return k_[layer].data() + (t * shape_.n_head_kv + head) * shape_.head_dim * kAttendRows;
  }
  const uint16_t* KeyTile(size_t layer, size_t t, size_t head) const {
    return k_[layer].data() + (t * shape_.n_head_kv + head) * shape_.head_dim * kAttendRows;
  }
  float Key(size_t layer, size_t pos, size_t head, size_t c) const;
  uint16_t* V(size_t layer, size_t pos) { return v_[layer].data() + pos * kv_dim_; }
  const uint16_t* V(size_t layer, size_t pos) const { return v_[layer].data() + pos * kv_dim_; }

  void Clear() { size_ = 0; }
  // Bytes held: the K and V buffers of all layers at full capacity (K rounded up to whole tiles).
  size_t bytes() const;

 private:
  size_t n_layer_, capacity_, kv_dim_;
  AttentionShape shape_;
  std::vector<uint32_t> layer_window_;  // (n_layer) or empty
  size_t size_ = 0;
  std::vector<AlignedBuffer<uint16_t>> k_;  // per layer: (capacity, kv_dim) fp16
  std::vector<AlignedBuffer<uint16_t>> v_;  // per layer: (capacity, kv_dim) fp16
};

// Reference: attention of one query head over fp16 K/V rows [0, n_ctx) of one KV head, in double.
// q: (head_dim) already scaled by 1/sqrt(head_dim); k, v: row stride `stride` elements; out: (head_dim).
void AttendDenseHeadRef(const float* q, const uint16_t* k, const uint16_t* v, size_t stride,
                        size_t n_ctx, size_t head_dim, float* out);

}  // namespace chorus
