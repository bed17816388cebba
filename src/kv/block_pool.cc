// BlockPool: one counted aligned allocation per block; metadata slots in chunks, ids recycled
// through a free list.
#include "kv/block_pool.h"

#include <algorithm>

#include "util/aligned_alloc.h"  // AlignedAlloc, AlignedBytes
#include "util/check.h"

namespace chorus {

BlockPool::BlockPool() = default;

BlockPool::~BlockPool() {
  for (size_t id = 0; id < slots_; ++id) {
    BlockMeta& m = Slot(BlockId(id));
    if (m.data) AlignedFree(m.data, m.k_bytes + m.v_bytes);
  }
}

size_t BlockPool::BlockCost(size_t k_bytes, size_t v_bytes) { return AlignedBytes(k_bytes + v_bytes) + sizeof(BlockMeta); }

size_t BlockPool::SlackAllowance() const {
  return (slots_ - live_) * sizeof(BlockMeta) + kSlotsPerChunk * sizeof(BlockMeta) +
         2 * (chunks_.capacity() + 1) * sizeof(chunks_[0]);
}

size_t BlockPool::table_bytes() const {
  return slots_ * sizeof(BlockMeta) + chunks_.capacity() * sizeof(chunks_[0]);
}

size_t BlockPool::AllocationCost(size_t k_bytes, size_t v_bytes) const {
  size_t cost = AlignedBytes(k_bytes + v_bytes);
  if (free_head_ == kNoSlot) {
    cost += kSlotsPerChunk * sizeof(BlockMeta);
    if (chunks_.size() == chunks_.capacity()) cost += std::max<size_t>(1, 2 * chunks_.capacity()) * sizeof(chunks_[0]);
  }
  return cost;
}

bool BlockPool::AddChunk() {
  if (slots_ + kSlotsPerChunk >= kNoSlot) return false;
  auto chunk = std::make_unique<BlockMeta[]>(kSlotsPerChunk);  // value-initialized: free slots
  for (size_t i = 0; i < kSlotsPerChunk; ++i)  // lowest id first out, then the older free slots
    chunk[i].k_bytes = i + 1 < kSlotsPerChunk ? BlockId(slots_ + i + 1) : free_head_;
  chunks_.push_back(std::move(chunk));
  free_head_ = BlockId(slots_);
  slots_ += kSlotsPerChunk;
  return true;
}

Result<BlockId> BlockPool::Allocate(KvFormat k_format, size_t k_bytes, KvFormat v_format, size_t v_bytes) {
  if (free_head_ == kNoSlot && !AddChunk()) return Status::Error("too many KV blocks");
  auto* data = static_cast<uint8_t*>(AlignedAlloc(k_bytes + v_bytes));
  if (!data) return Status::Error("out of memory allocating a {}-byte KV block", k_bytes + v_bytes);
  const BlockId id = free_head_;
  free_head_ = Slot(id).k_bytes;
  Slot(id) = BlockMeta{k_format, v_format, static_cast<uint32_t>(k_bytes), static_cast<uint32_t>(v_bytes), 1, data};
  payload_bytes_ += AlignedBytes(k_bytes + v_bytes);
  ++live_;
  return id;
}

void BlockPool::Ref(BlockId id) {
  CHORUS_CHECK(id < slots_ && Slot(id).data != nullptr);
  ++Slot(id).refs;
}

void BlockPool::Unref(BlockId id) {
  CHORUS_CHECK(id < slots_ && Slot(id).data != nullptr && Slot(id).refs > 0);
  BlockMeta& m = Slot(id);
  if (--m.refs > 0) return;
  AlignedFree(m.data, m.k_bytes + m.v_bytes);
  payload_bytes_ -= AlignedBytes(m.k_bytes + m.v_bytes);
  m = BlockMeta{};
  m.k_bytes = free_head_;
  free_head_ = id;
  --live_;
}

}  // namespace chorus
