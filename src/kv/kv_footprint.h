// KvFootprint: the one projection of KV bytes, used by the engine's admission and by CoMix alike —
// the most bytes a sequence can hold at any instant of its life, from what is known before it runs
// (its capacity), and what the store holds once. Upper bounds of exactly the buffers KvStore /
// KvSequence allocate (kv_store.cc), 64-byte rounding included; tests check measured ≤ projected
// at every instant and equality where the bound is exact (tests/kv/kv_footprint_test.cc).
//
// A sequence's life, and what it holds besides its own sealed blocks (Block() each):
//   bookkeeping  block tables reserved for capacity/32 blocks, block views, the object;
//   decoding     + its window (<= 31 rows per layer, K and V) + one step's native rows (<= 32 rows,
//                  one layer at a time) — a seal moves the old window aside until Commit, and a
//                  one-token step's new window is empty, so one window at most;
//   prefilling   an Append of n tokens at a block boundary (own size a multiple of 32, as the
//                  scheduler's prompt chunks and the engine's synchronous prefills keep it): the
//                  native rows of n tokens instead of 32; the window before it is empty, so
//                  nothing is kept for Rollback (PrefillExtra);
//   appending n  anywhere else (a window already holding rows: a scored text after a document's
//                  tail): + the old window kept for Rollback and the native rows of (31 + n)
//                  tokens (AppendExtra).
// Borrowed blocks (a context's, the prefix cache's) are held once by whoever lent them.
#pragma once
#include <cstddef>

#include "kv/kv_format.h"  // KvFormat
#include "kv/kv_store.h"   // KvStoreOptions

namespace chorus {

class KvFootprint {
 public:
  explicit KvFootprint(const KvStoreOptions& options) : o_(options) {}

  // One sealed block of these formats, as the pool holds it.
  size_t Block(KvFormat k, KvFormat v) const;
  // Bookkeeping of a sequence of `capacity` own tokens (exact: KvSequence::table_bytes at creation).
  size_t Bookkeeping(size_t capacity) const;
  // Everything but its blocks that a sequence of `capacity` own tokens can hold while it decodes
  // one token per step: bookkeeping + window + one step's native rows.
  size_t Decoding(size_t capacity) const;
  // What an Append of n tokens at a block boundary needs beyond Decoding (more native rows).
  size_t PrefillExtra(size_t n) const;
  // Everything but its blocks a sequence of `capacity` tokens holds at any instant when its
  // Appends start at block boundaries (or are one token) and take at most `prefill` rows.
  size_t Sequence(size_t capacity, size_t prefill) const { return Decoding(capacity) + PrefillExtra(prefill); }
  // The same for an Append of n tokens wherever the window stands (the old window kept for Rollback).
  size_t AppendExtra(size_t n) const;
  // Held once by the store: seal buffers and the attention scratch of `threads` pool threads. (The
  // pool's free slots are measured: BlockPool::SlackAllowance, added by the projection's users.)
  size_t Overhead(size_t threads) const;

  const KvStoreOptions& options() const { return o_; }

 private:
  size_t WindowLayer(size_t rows) const;  // K + V window buffers of one layer holding `rows` rows
  size_t NativeRows(size_t rows) const;   // nat (+ natw for q8) buffers of `rows` rows, one layer

  KvStoreOptions o_;
};

}  // namespace chorus
