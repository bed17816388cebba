// BlockPool: one aligned allocation per block; ids recycled through a free list.
#include "kv/block_pool.h"

#include <cstdint>
#include <cstdlib>
#include <limits>

#include "util/check.h"

namespace chorus {

BlockPool::BlockPool(size_t budget_bytes) : budget_(budget_bytes) {}

BlockPool::~BlockPool() {
  for (auto& b : blocks_) std::free(b.data);
}

size_t BlockPool::BlockCost(size_t k_bytes, size_t v_bytes) {
  return k_bytes + v_bytes + sizeof(BlockMeta);
}

size_t BlockPool::bytes_free() const {
  if (budget_ == 0) return std::numeric_limits<size_t>::max();
  return budget_ > bytes_in_use_ ? budget_ - bytes_in_use_ : 0;
}

Result<BlockId> BlockPool::Allocate(KvFormat k_format, size_t k_bytes, KvFormat v_format, size_t v_bytes) {
  const size_t cost = BlockCost(k_bytes, v_bytes);
  if (budget_ != 0 && bytes_in_use_ + cost > budget_)
    return Status::Error("KV budget exhausted: a block needs {} bytes, {} of {} are free", cost, bytes_free(), budget_);
  const size_t bytes = (k_bytes + v_bytes + 63) / 64 * 64;
  auto* data = static_cast<uint8_t*>(std::aligned_alloc(64, bytes));
  if (!data) return Status::Error("out of memory allocating a {}-byte KV block", bytes);
  BlockId id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    if (blocks_.size() >= std::numeric_limits<BlockId>::max()) {
      std::free(data);
      return Status::Error("too many KV blocks");
    }
    id = static_cast<BlockId>(blocks_.size());
    blocks_.push_back({});
  }
  blocks_[id] = BlockMeta{k_format, v_format, static_cast<uint32_t>(k_bytes), static_cast<uint32_t>(v_bytes), 1, data};
  bytes_in_use_ += cost;
  ++live_;
  return id;
}

void BlockPool::Ref(BlockId id) {
  CHORUS_CHECK(id < blocks_.size() && blocks_[id].data != nullptr);
  ++blocks_[id].refs;
}

void BlockPool::Unref(BlockId id) {
  CHORUS_CHECK(id < blocks_.size() && blocks_[id].data != nullptr && blocks_[id].refs > 0);
  if (--blocks_[id].refs > 0) return;
  std::free(blocks_[id].data);
  bytes_in_use_ -= BlockCost(blocks_[id].k_bytes, blocks_[id].v_bytes);
  blocks_[id] = BlockMeta{};
  free_ids_.push_back(id);
  --live_;
}

}  // namespace chorus
