// BlockPool: owns the bytes of every sealed KV block (K side + V side of 32 tokens × one layer),
// hands out ids, counts references, and knows its exact usage against an optional byte budget.
// Invariant: bytes_in_use() == Σ over live blocks of (K bytes + V bytes) + per-block metadata.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kv/kv_format.h"  // KvFormat
#include "util/status.h"   // Result

namespace chorus {

using BlockId = uint32_t;
inline constexpr BlockId kNoBlock = UINT32_MAX;  // "no block here" (freed by a sliding window)

struct BlockMeta {
  KvFormat k_format;
  KvFormat v_format;
  uint32_t k_bytes;
  uint32_t v_bytes;
  uint32_t refs;
  uint8_t* data;  // (k_bytes + v_bytes): K side then V side
};

class BlockPool {
 public:
  explicit BlockPool(size_t budget_bytes = 0);  // 0 = no budget
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // Bytes one block of these side sizes costs the pool (payload + metadata).
  static size_t BlockCost(size_t k_bytes, size_t v_bytes);

  // A new block with refcount 1; an error if it would exceed the budget (nothing changes then).
  Result<BlockId> Allocate(KvFormat k_format, size_t k_bytes, KvFormat v_format, size_t v_bytes);
  void Ref(BlockId id);
  void Unref(BlockId id);  // frees the block when the count reaches 0

  const BlockMeta& meta(BlockId id) const { return blocks_[id]; }
  const uint8_t* k_data(BlockId id) const { return blocks_[id].data; }
  const uint8_t* v_data(BlockId id) const { return blocks_[id].data + blocks_[id].k_bytes; }
  uint8_t* mutable_k(BlockId id) { return blocks_[id].data; }
  uint8_t* mutable_v(BlockId id) { return blocks_[id].data + blocks_[id].k_bytes; }

  size_t bytes_in_use() const { return bytes_in_use_; }
  size_t budget() const { return budget_; }
  void set_budget(size_t bytes) { budget_ = bytes; }
  size_t live_blocks() const { return live_; }
  // Bytes still free under the budget (SIZE_MAX without a budget).
  size_t bytes_free() const;

 private:
  std::vector<BlockMeta> blocks_;  // (capacity) indexed by BlockId; data == nullptr when free
  std::vector<BlockId> free_ids_;
  size_t bytes_in_use_ = 0;
  size_t budget_ = 0;
  size_t live_ = 0;
};

}  // namespace chorus
