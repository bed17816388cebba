// KvBatch and AttendRows: append per sequence, then attention grouped by shared leading blocks
// with stacked queries (see kv_batch.h).
#include "kv/kv_batch.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <span>
#include <tuple>    // std::tie
#include <utility>  // std::pair
#include <vector>

namespace chorus {
namespace {

// Rows [t0, t1) of entry e, stacked together.
struct Segment {
  size_t entry, t0, t1;
};
struct Chunk {
  size_t common = 0;  // leading blocks every row of the chunk sees and all its sequences share
  bool pack = false;  // decode rows (one-row segments) of several sequences, splittable by row
  std::vector<Segment> segs = {};
  // Parts [k0, k1) (kPartTokens positions each) some row of the chunk sees. split: a decode pack
  // whose parts are attended by separate units, their states at state `slot` of store.parts().
  size_t k0 = 0, k1 = 1;
  bool split = false;
  size_t slot = 0;
};
// What one thread attends: segments [s0, s1) of a chunk, one KV head; every part and merged by
// this thread (part = SIZE_MAX), or one part of a split pack (all its segments).
struct Unit {
  size_t chunk;
  uint32_t head;
  size_t s0, s1;
  size_t part = SIZE_MAX;
};

// Rough work of folding positions [lo, hi) of segments segs (block folds weighted by the queries
// they meet, plus decoding the block): balances the plan, never changes a result.
size_t Cost(std::span<const BatchRows> entries, std::span<const Segment> segs, size_t common, size_t group,
            size_t lo, size_t hi) {
  const size_t b_lo = lo / kBlockTokens, b_hi = hi == SIZE_MAX ? SIZE_MAX : hi / kBlockTokens;
  auto in = [&](size_t b0, size_t b1) { return std::min(b1, b_hi) > std::max(b0, b_lo) ? std::min(b1, b_hi) - std::max(b0, b_lo) : 0; };
  size_t nq = 0;
  for (const Segment& s : segs) nq += (s.t1 - s.t0) * group;
  size_t cost = in(0, common) * (4 + nq);
  for (const Segment& s : segs) {
    const size_t size = entries[s.entry].seq->size(), seen = (size + s.t0) / kBlockTokens;
    cost += in(common, seen) * (4 + (s.t1 - s.t0) * group);
    for (size_t t = s.t0; t < s.t1; ++t) cost += (in(seen, (size + t) / kBlockTokens) + 1) * (4 + group);
  }
  return cost;
}

// Work of each thread. A prefill stack (one sequence's consecutive tokens) is one unit per KV head,
// dealt round-robin. Decode packs that see one part are cut by rows: their (pack, KV head, row)
// items in order are split into `threads` equal contiguous spans, so a KV head's shared blocks are
// decoded by as few threads as balance allows and a head's whole stack of queries meets each
// decoded tile. A split pack is one unit per (KV head, part), in contiguous spans of even load
// per thread: every block is decoded once per KV head, for the whole stack. Which unit a row lands
// in does not change its result (its blocks meet it in the same order, its parts merge in order).
std::vector<std::vector<Unit>> PlanUnits(std::span<const BatchRows> entries, const std::vector<Chunk>& chunks,
                                         size_t n_head_kv, size_t group, size_t threads) {
  std::vector<std::vector<Unit>> plan(threads);
  size_t rr = 0, items = 0;
  for (size_t c = 0; c < chunks.size(); ++c) {
    if (chunks[c].pack) {
      if (!chunks[c].split) items += chunks[c].segs.size() * n_head_kv;
      continue;
    }
    for (size_t h = 0; h < n_head_kv; ++h, ++rr)
      plan[rr % threads].push_back({c, static_cast<uint32_t>(h), 0, chunks[c].segs.size()});
  }
  size_t item = 0;  // running index over the packs' items
  for (size_t c = 0; c < chunks.size(); ++c) {
    if (!chunks[c].pack || chunks[c].split) continue;
    const size_t rows = chunks[c].segs.size();
    for (size_t h = 0; h < n_head_kv; ++h, item += rows) {
      for (size_t t = 0; t < threads; ++t) {  // thread t: items [items·t/T, items·(t+1)/T)
        const size_t lo = std::max(items * t / threads, item), hi = std::min(items * (t + 1) / threads, item + rows);
        if (lo < hi) plan[t].push_back({c, static_cast<uint32_t>(h), lo - item, hi - item});
      }
    }
  }
  std::vector<size_t> load(threads, 0);
  for (size_t t = 0; t < threads; ++t)
    for (const Unit& u : plan[t]) {
      const Chunk& ch = chunks[u.chunk];
      load[t] += Cost(entries, std::span(ch.segs).subspan(u.s0, u.s1 - u.s0), ch.common, group, 0, SIZE_MAX);
    }
  // The split packs' (pack, KV head, part) units in order, cut into contiguous spans that even
  // out the threads' loads: a thread attends consecutive parts of a head (the head's queries are
  // stacked and rotated once for them).
  struct PartUnit {
    Unit u;
    size_t cost;
  };
  std::vector<PartUnit> parts;
  size_t total = 0;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const Chunk& ch = chunks[c];
    if (!ch.split) continue;
    for (size_t h = 0; h < n_head_kv; ++h)
      for (size_t k = ch.k0; k < ch.k1; ++k) {
        parts.push_back({{c, static_cast<uint32_t>(h), 0, ch.segs.size(), k},
                         Cost(entries, ch.segs, ch.common, group, k * kPartTokens, (k + 1) * kPartTokens)});
        total += parts.back().cost;
      }
  }
  for (size_t t = 0; t < threads; ++t) total += load[t];
  size_t t = 0;
  for (const PartUnit& p : parts) {
    // Move on once this thread holds its share (the last takes what is left).
    while (t + 1 < threads && load[t] + p.cost / 2 > total / threads) ++t;
    load[t] += p.cost;
    plan[t].push_back(p.u);
  }
  return plan;
}

// Leading blocks two sequences share in the layer of their last Append (the same blocks = the
// same bytes in the pool), counted from block 0: tables that start at different live blocks (a
// sliding window) share nothing here.
size_t SharedRun(const KvSequence& a, const KvSequence& b) {
  if (a.views_first() != 0 || b.views_first() != 0) return 0;
  const auto va = a.views(), vb = b.views();
  size_t n = 0;
  while (n < va.size() && n < vb.size() && va[n].k == vb[n].k && va[n].v == vb[n].v && va[n].shift == vb[n].shift &&
         va[n].skip == vb[n].skip)
    ++n;
  return n;
}

// The attention of a planned step: what a unit folds, finishes and merges.
struct Attend {
  const KvStore& store;
  size_t layer;
  std::span<const BatchRows> entries;
  const std::vector<Chunk>& chunks;
  const float* q;
  float* out;
  float* parts;  // store.parts()
  size_t q_dim, hd, group;

  const KvSequence& Seq(const Segment& s) const { return *entries[s.entry].seq; }
  float* Out(const Segment& s, size_t t, uint32_t hk) const {
    return out + (entries[s.entry].row0 + t) * q_dim + hk * group * hd;
  }
  // Parts row t of s sees: [FirstPart, LastPart] (its window's edge, its own block).
  size_t FirstPart(const Segment& s, size_t t) const { return Seq(s).VisibleFrom(layer, t) / kPartTokens; }
  size_t LastPart(const Segment& s, size_t t) const { return (Seq(s).size() + t) / kPartTokens; }
  // Parts [k0, k1) some row of segs sees.
  std::pair<size_t, size_t> PartRange(std::span<const Segment> segs) const {
    size_t k0 = SIZE_MAX, k1 = 0;
    for (const Segment& s : segs)
      for (size_t t = s.t0; t < s.t1; ++t) {
        k0 = std::min(k0, FirstPart(s, t));
        k1 = std::max(k1, LastPart(s, t) + 1);
      }
    return {k0, k1};
  }
  // The part state of query g of row r (of the chunk's segments, decode: one row each) for head
  // hk and part k of a split chunk.
  float* Slot(const Chunk& c, uint32_t hk, size_t r, size_t k, size_t g) const {
    const size_t state = c.slot + ((hk * c.segs.size() + r) * (c.k1 - c.k0) + (k - c.k0)) * group + g;
    return parts + state * BlockAttention::PartStateFloats(hd);
  }

  // Stacks the queries of head hk of segs into qs; their count.
  size_t Stack(std::vector<float>& qs, std::span<const Segment> segs, uint32_t hk) const {
    size_t nq = 0;
    for (const Segment& s : segs) nq += (s.t1 - s.t0) * group;
    qs.resize(nq * hd);  // reserved for kStackTokens rows × group: never grows
    float* dst = qs.data();
    for (const Segment& s : segs)
      for (size_t t = s.t0; t < s.t1; ++t, dst += group * hd)
        std::copy_n(q + (entries[s.entry].row0 + t) * q_dim + hk * group * hd, group * hd, dst);
    return nq;
  }

  // Folds into att (queries stacked from segs) every block and native row they see whose first
  // position is in [lo, hi) (a part; everything: [0, SIZE_MAX)). Sliding-window layers: `edge` is
  // the stack's latest window edge. What lies before it is folded per row with the row's own edge
  // first; from it on, blocks are folded once for the stack. On global layers the edge is 0. Every
  // row meets its blocks in order, each once, with its own mask — as alone.
  void Fold(BlockAttention& att, std::span<const Segment> segs, size_t common, uint32_t hk, size_t nq, size_t edge,
            size_t lo, size_t hi) const {
    if (edge > lo) {
      size_t q0 = 0;
      for (const Segment& s : segs) {
        const KvSequence& seq = Seq(s);
        const size_t seen = (seq.size() + s.t0) / kBlockTokens;
        for (size_t t = s.t0; t < s.t1; ++t, q0 += group)
          seq.AddOwnBlocks(att, hk, q0, group, seen,
                           SegmentRange{.lo = seq.VisibleFrom(layer, t), .begin = lo, .end = std::min(edge, hi)});
      }
    }
    // The shared run: once for every stacked query.
    Seq(segs[0]).AddOwnBlocks(att, hk, 0, nq, common, SegmentRange{.begin = std::max(edge, lo), .end = hi});
    size_t q0 = 0;
    for (const Segment& s : segs) {
      const KvSequence& seq = Seq(s);
      const size_t ns = (s.t1 - s.t0) * group;
      const size_t seen = (seq.size() + s.t0) / kBlockTokens;  // blocks every token of the stack sees
      // Blocks [common, seen), from the edge on, once for the stack (FoldBlocks skips [0, common)
      // through the range's begin).
      if (seen > common)
        seq.AddOwnBlocks(att, hk, q0, ns, seen,
                         SegmentRange{.begin = std::max({edge, common * kBlockTokens, lo}), .end = hi});
      for (size_t t = s.t0; t < s.t1; ++t) seq.AddOwn(att, t, hk, q0 + (t - s.t0) * group, group, seen, lo, hi);
      q0 += ns;
    }
  }

  size_t Edge(std::span<const Segment> segs) const {
    size_t edge = 0;
    for (const Segment& s : segs) edge = std::max(edge, Seq(s).VisibleFrom(layer, s.t1 - 1));
    return edge;
  }

  // A unit whose parts this thread attends one after the other, merging each row's parts in order.
  void Whole(BlockAttention& att, std::vector<float>& qs, const Unit& u) const {
    const Chunk& c = chunks[u.chunk];
    const std::span<const Segment> segs = std::span(c.segs).subspan(u.s0, u.s1 - u.s0);
    const uint32_t hk = u.head;
    const size_t nq = Stack(qs, segs, hk);
    att.Begin(qs.data(), nq);
    const size_t edge = Edge(segs);
    const auto [k0, k1] = PartRange(segs);
    if (k1 - k0 == 1) {  // one part: no state to merge
      Fold(att, segs, c.common, hk, nq, edge, 0, SIZE_MAX);
      size_t qi = 0;
      for (const Segment& s : segs)
        for (size_t t = s.t0; t < s.t1; ++t, qi += group) att.Finish(Out(s, t, hk), qi, group);
      return;
    }
    const size_t sf = BlockAttention::PartStateFloats(hd);
    float* acc = att.part_acc();  // (nq) merged states: reserved for kStackTokens rows × group
    for (size_t i = 0; i < nq; ++i) acc[i * sf] = acc[i * sf + hd + 2] = -INFINITY;
    for (size_t k = k0; k < k1; ++k) {
      if (k > k0) att.Restart();
      Fold(att, segs, c.common, hk, nq, edge, k * kPartTokens, (k + 1) * kPartTokens);
      size_t qi = 0;
      for (const Segment& s : segs)
        for (size_t t = s.t0; t < s.t1; ++t, qi += group) {
          const size_t f = FirstPart(s, t), l = LastPart(s, t);
          if (f == l) {
            if (k == f) att.Finish(Out(s, t, hk), qi, group);
          } else if (k >= f && k <= l) {
            for (size_t g = 0; g < group; ++g) {
              att.ExportPart(qi + g, att.part_tmp());
              BlockAttention::MergeParts(acc + (qi + g) * sf, att.part_tmp(), 1, hd);
            }
          }
        }
    }
    size_t qi = 0;
    for (const Segment& s : segs)
      for (size_t t = s.t0; t < s.t1; ++t, qi += group)
        if (FirstPart(s, t) != LastPart(s, t)) att.FinishParts(acc + qi * sf, group, Out(s, t, hk));
  }

  // One part of a split pack: rows that see only this part are finished, the others' states stored.
  // again: att holds this pack's queries of this head already (the thread's previous unit).
  void Part(BlockAttention& att, std::vector<float>& qs, const Unit& u, bool again) const {
    const Chunk& c = chunks[u.chunk];
    const uint32_t hk = u.head;
    const size_t k = u.part;
    size_t nq = c.segs.size() * group;
    if (again) {
      att.Restart();
    } else {
      nq = Stack(qs, c.segs, hk);
      att.Begin(qs.data(), nq);
    }
    Fold(att, c.segs, c.common, hk, nq, Edge(c.segs), k * kPartTokens, (k + 1) * kPartTokens);
    for (size_t r = 0; r < c.segs.size(); ++r) {
      const Segment& s = c.segs[r];
      const size_t f = FirstPart(s, 0), l = LastPart(s, 0);
      if (f == l) {
        if (k == f) att.Finish(Out(s, 0, hk), r * group, group);
      } else if (k >= f && k <= l) {
        for (size_t g = 0; g < group; ++g) att.ExportPart(r * group + g, Slot(c, hk, r, k, g));
      }
    }
  }

  // Every part of head hk of a split pack is stored: each row's parts merged in order, finished.
  void Merge(BlockAttention& att, size_t chunk, uint32_t hk) const {
    const Chunk& c = chunks[chunk];
    float* acc = att.part_acc();
    const size_t sf = BlockAttention::PartStateFloats(hd);
    for (size_t r = 0; r < c.segs.size(); ++r) {
      const Segment& s = c.segs[r];
      const size_t f = FirstPart(s, 0), l = LastPart(s, 0);
      if (f == l) continue;
      for (size_t g = 0; g < group; ++g) acc[g * sf] = acc[g * sf + hd + 2] = -INFINITY;
      for (size_t k = f; k <= l; ++k) BlockAttention::MergeParts(acc, Slot(c, hk, r, k, 0), group, hd);
      att.FinishParts(acc, group, Out(s, 0, hk));
    }
  }
};

}  // namespace

void AttendRows(KvStore& store, size_t layer, std::span<const BatchRows> entries, const float* q, float* out,
                ThreadPool& pool) {
  const AttentionShape& sh = store.options().shape;
  const size_t q_dim = sh.q_dim(), hd = sh.head_dim, group = sh.n_head / sh.n_head_kv;
  const size_t threads = std::max(1, pool.size());
  // Groups: entries whose first row sees blocks and whose tables start with the same block.
  std::vector<std::vector<size_t>> groups;
  std::map<const uint8_t*, size_t> by_first;
  for (size_t e = 0; e < entries.size(); ++e) {
    const KvSequence& s = *entries[e].seq;
    if (s.size() / kBlockTokens == 0 || s.views().empty() || s.views_first() != 0) {
      groups.push_back({e});
      continue;
    }
    auto [it, fresh] = by_first.emplace(s.views()[0].k, groups.size());
    if (fresh) groups.push_back({});
    groups[it->second].push_back(e);
  }
  std::vector<Chunk> chunks;
  for (const std::vector<size_t>& g : groups) {
    const KvSequence& first = *entries[g[0]].seq;
    size_t common = first.size() / kBlockTokens;
    for (size_t e : g)
      common = std::min({common, entries[e].seq->size() / kBlockTokens, SharedRun(first, *entries[e].seq)});
    // One-row entries (decode) are packed together (below); longer ones (prefill) give one chunk
    // per stack of kStackTokens consecutive tokens.
    std::vector<size_t> singles;
    for (size_t e : g) {
      if (entries[e].n == 1) {
        singles.push_back(e);
        continue;
      }
      for (size_t t0 = 0; t0 < entries[e].n; t0 += kStackTokens)
        chunks.push_back({.common = common, .segs = {{e, t0, std::min(entries[e].n, t0 + kStackTokens)}}});
    }
    // Decode rows: packs of at most kStackTokens rows (the store's fixed per-thread scratch holds
    // their queries); every shared block is decoded once per (pack, KV head) that reads it.
    const size_t packs = (singles.size() + kStackTokens - 1) / kStackTokens;
    for (size_t p = 0; p < packs; ++p) {
      Chunk c{.common = common, .pack = true};
      for (size_t i = singles.size() * p / packs; i < singles.size() * (p + 1) / packs; ++i)
        c.segs.push_back({singles[i], 0, 1});
      chunks.push_back(std::move(c));
    }
  }
  // Packs over more than one part are split by part while the store's part states hold them
  // (the others are attended whole: the same bits, less balance).
  const Attend at{store, layer, entries, chunks, q, out, store.parts(), q_dim, hd, group};
  size_t used = 0;  // (row, part) pairs of the store's part states given out
  for (Chunk& c : chunks) {
    if (!c.pack) continue;
    std::tie(c.k0, c.k1) = at.PartRange(c.segs);
    const size_t need = c.segs.size() * (c.k1 - c.k0);
    if (c.k1 - c.k0 < 2 || used + need > kPartSlots) continue;
    c.split = true;
    c.slot = used * sh.n_head;
    used += need;
  }
  const std::vector<std::vector<Unit>> plan = PlanUnits(entries, chunks, sh.n_head_kv, group, threads);
  // Parts of each (split pack, KV head) still to be stored: the thread storing the last one merges.
  std::vector<std::atomic<size_t>> remaining(chunks.size() * sh.n_head_kv);
  for (size_t c = 0; c < chunks.size(); ++c)
    for (size_t h = 0; h < sh.n_head_kv; ++h) remaining[c * sh.n_head_kv + h].store(chunks[c].k1 - chunks[c].k0);
  pool.Run([&](int ti, int) {
    BlockAttention& att = store.attention(ti);
    std::vector<float>& qs = store.stack(ti);
    const Unit* prev = nullptr;  // the unit before, if a part
    for (const Unit& u : plan[ti]) {
      if (u.part == SIZE_MAX) {
        at.Whole(att, qs, u);
        prev = nullptr;
        continue;
      }
      at.Part(att, qs, u, prev && prev->chunk == u.chunk && prev->head == u.head);
      prev = &u;
      if (remaining[u.chunk * sh.n_head_kv + u.head].fetch_sub(1, std::memory_order_acq_rel) == 1)
        at.Merge(att, u.chunk, u.head);
    }
  });
}

KvBatch::KvBatch(KvStore& store) : store_(store) {}

void KvBatch::Clear() {
  entries_.clear();
  positions_.clear();
  failed_ = nullptr;
}

void KvBatch::Add(KvSequence* seq, size_t n) {
  entries_.push_back({seq, positions_.size(), n});
  for (size_t t = 0; t < n; ++t) positions_.push_back(seq->Position(t));
}

void KvBatch::Commit(size_t n) {
  for (const BatchRows& e : entries_) e.seq->Commit(e.n);
}

void KvBatch::Rollback() {
  for (const BatchRows& e : entries_) e.seq->Rollback();
}

Status KvBatch::AppendAndAttend(size_t layer, size_t n, const float* k, const float* v, const float* q, float* out,
                                ThreadPool& pool) {
  if (n != rows()) return Status::Error("KvBatch: {} rows given, {} planned", n, rows());
  const size_t kv_dim = store_.options().shape.kv_dim(), q_dim = store_.options().shape.q_dim();
  // The blocks these appends seal are encoded together over the pool before the attention reads them.
  store_.BeginDeferredSeals();
  for (const BatchRows& e : entries_) {
    store_.policy().Observe(Observation{.seq_id = e.seq->id(), .layer = layer, .n = e.n, .q = q + e.row0 * q_dim,
                                        .k = k + e.row0 * kv_dim, .v = v + e.row0 * kv_dim, .q_dim = q_dim,
                                        .kv_dim = kv_dim});
    if (Status s = e.seq->Append(layer, e.n, k + e.row0 * kv_dim, v + e.row0 * kv_dim, /*defer=*/true);
        !s.ok()) {
      store_.DropDeferredSeals();  // the caller's Rollback gives their blocks back
      failed_ = e.seq;
      return s;
    }
  }
  Status s = store_.PrepareScratch(std::max(1, pool.size()));
  if (s.ok()) s = store_.EncodeDeferredSeals(pool);
  if (!s.ok()) {
    store_.DropDeferredSeals();
    return s;
  }
  // What the appends left, each sequence on one thread: the views of the layer's blocks, the new
  // rows stored, the windows' earlier rows decoded into the native rows (most of an append's work;
  // appends are serial).
  pool.ParallelFor(entries_.size(), 1, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) {
      const BatchRows& r = entries_[i];
      r.seq->FinishAppend(layer, r.n, k + r.row0 * kv_dim, v + r.row0 * kv_dim);
    }
  });
  AttendRows(store_, layer, entries_, q, out, pool);
  return Status::Ok();
}

}  // namespace chorus
