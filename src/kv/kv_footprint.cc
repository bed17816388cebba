// KvFootprint: the projection, buffer by buffer as kv_store.cc allocates them.
#include "kv/kv_footprint.h"

#include <algorithm>

#include "kv/block_attention.h"  // BlockAttention::BytesFor
#include "kv/block_pool.h"       // BlockPool::BlockCost
#include "util/aligned_alloc.h"  // AlignedBytes
#include "util/aligned_buffer.h" // AlignedBuffer (the deferred seals' scratch)

namespace chorus {
namespace {

size_t RoundGranule(size_t rows) { return (rows + kWindowGranule - 1) / kWindowGranule * kWindowGranule; }

}  // namespace

size_t KvFootprint::Block(KvFormat k, KvFormat v) const {
  const KvGeometry g{uint32_t(o_.shape.n_head_kv), uint32_t(o_.shape.head_dim)};
  return BlockPool::BlockCost(KvBlockBytes(k, KvSide::kKey, g), KvBlockBytes(v, KvSide::kValue, g));
}

size_t KvFootprint::Bookkeeping(size_t capacity) const {
  return KvSequence::TableBytesFor(o_, capacity);
}

size_t KvFootprint::WindowLayer(size_t rows) const {
  return 2 * AlignedBytes(RoundGranule(rows) * WindowRowBytes(o_.window, o_.shape.n_head_kv, o_.shape.head_dim));
}

size_t KvFootprint::NativeRows(size_t rows) const {
  size_t b = 2 * AlignedBytes(rows * o_.shape.kv_dim() * sizeof(uint16_t));
  if (o_.window != WindowFormat::kF16)
    b += 2 * AlignedBytes(rows * WindowRowBytes(o_.window, o_.shape.n_head_kv, o_.shape.head_dim));
  return b;
}

size_t KvFootprint::Decoding(size_t capacity) const {
  // A window never holds 32 rows (a full block is sealed), so ≤ 31 rows → 32 after rounding; a
  // step appends one token to ≤ 31 window rows.
  return Bookkeeping(capacity) + o_.n_layer * WindowLayer(kBlockTokens - 1) + NativeRows(kBlockTokens);
}

size_t KvFootprint::PrefillExtra(size_t n) const {
  return n > kBlockTokens ? NativeRows(n) - NativeRows(kBlockTokens) : 0;
}

size_t KvFootprint::AppendExtra(size_t n) const {
  if (n <= 1) return 0;
  return o_.n_layer * WindowLayer(kBlockTokens - 1) + (NativeRows(kBlockTokens - 1 + n) - NativeRows(kBlockTokens));
}

size_t KvFootprint::Overhead(size_t threads) const {
  threads = std::max<size_t>(1, threads);
  const size_t kv_dim = o_.shape.kv_dim(), group = o_.shape.n_head / o_.shape.n_head_kv;
  const size_t max_q = kStackTokens * group;
  const KvGeometry g{uint32_t(o_.shape.n_head_kv), uint32_t(o_.shape.head_dim)};
  size_t b = 2 * AlignedBytes(kBlockTokens * kv_dim * sizeof(float));  // seal buffers
  b += threads * (BlockAttention::BytesFor(g, max_q) + max_q * o_.shape.head_dim * sizeof(float) +
                  sizeof(void*) + sizeof(std::vector<float>));
  b += kPartSlots * o_.shape.n_head * BlockAttention::PartStateFloats(o_.shape.head_dim) * sizeof(float);
  // each further thread's f32 pair for the seals a batch encodes over the pool (KvStore::EncodeDeferredSeals)
  b += (threads - 1) * (AlignedBytes(2 * kBlockTokens * kv_dim * sizeof(float)) + sizeof(AlignedBuffer<float>));
  return b;
}

}  // namespace chorus
