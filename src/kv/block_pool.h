// BlockPool: owns the bytes of every sealed KV block (K side + V side of 32 tokens × one layer),
// hands out ids, counts references, and measures what it holds. The byte budget is the KvStore's
// (kv_store.h): the store asks AllocationCost before it allocates.
// Invariant: bytes() == Σ over live blocks of their 64-byte-rounded payload + the slot table
// (chunks of kSlotsPerChunk metadata slots, never freed, reused through a free list).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kv/kv_format.h"  // KvFormat
#include "util/status.h"   // Result

namespace chorus {

using BlockId = uint32_t;
inline constexpr BlockId kNoBlock = UINT32_MAX;  // "no block here" (freed by a sliding window)

struct BlockMeta {
  KvFormat k_format;
  KvFormat v_format;
  uint32_t k_bytes;  // a free slot: the next free slot's id (the pool's free list)
  uint32_t v_bytes;
  uint32_t refs;     // 0: a free slot
  uint8_t* data;     // (k_bytes + v_bytes): K side then V side; nullptr when free
};

class BlockPool {
 public:
  static constexpr size_t kSlotsPerChunk = 64;  // metadata slots allocated at once

  BlockPool();
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // Bytes one live block of these side sizes accounts for: its payload as allocated (rounded to
  // 64) and its metadata slot. The projection's unit (kv_footprint.h).
  static size_t BlockCost(size_t k_bytes, size_t v_bytes);
  // Bytes the next Allocate of these side sizes adds to bytes() (its payload, plus a chunk of
  // slots when no free slot is left).
  size_t AllocationCost(size_t k_bytes, size_t v_bytes) const;

  // A new block with refcount 1 (errors: out of memory, too many blocks; nothing changes then).
  Result<BlockId> Allocate(KvFormat k_format, size_t k_bytes, KvFormat v_format, size_t v_bytes);
  void Ref(BlockId id);
  void Unref(BlockId id);  // frees the block when the count reaches 0

  const BlockMeta& meta(BlockId id) const { return Slot(id); }
  const uint8_t* k_data(BlockId id) const { return Slot(id).data; }
  const uint8_t* v_data(BlockId id) const { return Slot(id).data + Slot(id).k_bytes; }
  uint8_t* mutable_k(BlockId id) { return Slot(id).data; }
  uint8_t* mutable_v(BlockId id) { return Slot(id).data + Slot(id).k_bytes; }

  // Everything the pool holds: live payloads + the slot table (measured from the allocations).
  size_t bytes() const { return payload_bytes_ + table_bytes(); }
  size_t payload_bytes() const { return payload_bytes_; }
  size_t table_bytes() const;
  size_t live_blocks() const { return live_; }
  // What the pool may hold beyond BlockCost of its live blocks, now and after any growth: its free
  // slots, one more chunk of slots and the chunk list's growth. Slots are made only when none is
  // free, so this bounds the table whatever blocks come and go (the projection adds it once).
  size_t SlackAllowance() const;

 private:
  bool AddChunk();  // kSlotsPerChunk more free slots (false: the id space is exhausted)

  BlockMeta& Slot(BlockId id) { return chunks_[id / kSlotsPerChunk][id % kSlotsPerChunk]; }
  const BlockMeta& Slot(BlockId id) const { return chunks_[id / kSlotsPerChunk][id % kSlotsPerChunk]; }

  static constexpr BlockId kNoSlot = ~BlockId{0};
  std::vector<std::unique_ptr<BlockMeta[]>> chunks_;  // (chunks) × kSlotsPerChunk slots, indexed by BlockId
  BlockId free_head_ = kNoSlot;  // free slots linked through BlockMeta::k_bytes
  size_t slots_ = 0;
  size_t payload_bytes_ = 0;
  size_t live_ = 0;
};

}  // namespace chorus
