// KvBatch and AttendRows: append per sequence, then attention grouped by shared leading blocks
// with stacked queries (see kv_batch.h).
#include "kv/kv_batch.h"

#include <algorithm>
#include <map>
#include <span>
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
  std::vector<Segment> segs;
};
// What one thread attends: segments [s0, s1) of a chunk, one KV head.
struct Unit {
  size_t chunk;
  uint32_t head;
  size_t s0, s1;
};

// Work of each thread. A prefill stack (one sequence's consecutive tokens) is one unit per KV head,
// dealt round-robin. Decode packs are cut by rows: their (pack, KV head, row) items in order are
// split into `threads` equal contiguous spans, so a KV head's shared blocks are decoded by as few
// threads as balance allows (15 agents, 3 KV heads, 2 threads: 4 decodes of each shared block
// instead of 6 for two packs) and a head's whole stack of queries meets each decoded tile. Which
// unit a row lands in does not change its result (its blocks meet it in the same order).
std::vector<std::vector<Unit>> PlanUnits(const std::vector<Chunk>& chunks, size_t n_head_kv, size_t threads) {
  std::vector<std::vector<Unit>> plan(threads);
  size_t rr = 0, items = 0;
  for (size_t c = 0; c < chunks.size(); ++c) {
    if (chunks[c].pack) {
      items += chunks[c].segs.size() * n_head_kv;
      continue;
    }
    for (size_t h = 0; h < n_head_kv; ++h, ++rr)
      plan[rr % threads].push_back({c, static_cast<uint32_t>(h), 0, chunks[c].segs.size()});
  }
  size_t item = 0;  // running index over the packs' items
  for (size_t c = 0; c < chunks.size(); ++c) {
    if (!chunks[c].pack) continue;
    const size_t rows = chunks[c].segs.size();
    for (size_t h = 0; h < n_head_kv; ++h, item += rows) {
      for (size_t t = 0; t < threads; ++t) {  // thread t: items [items·t/T, items·(t+1)/T)
        const size_t lo = std::max(items * t / threads, item), hi = std::min(items * (t + 1) / threads, item + rows);
        if (lo < hi) plan[t].push_back({c, static_cast<uint32_t>(h), lo - item, hi - item});
      }
    }
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
  while (n < va.size() && n < vb.size() && va[n].k == vb[n].k && va[n].v == vb[n].v) ++n;
  return n;
}

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
  const std::vector<std::vector<Unit>> plan = PlanUnits(chunks, sh.n_head_kv, threads);
  pool.Run([&](int ti, int) {
    BlockAttention& att = store.attention(ti);
    std::vector<float>& qs = store.stack(ti);  // reserved for kStackTokens rows × group: never grows
    for (const Unit& u : plan[ti]) {
      const std::span<const Segment> segs = std::span(chunks[u.chunk].segs).subspan(u.s0, u.s1 - u.s0);
      const size_t common = chunks[u.chunk].common;
      const uint32_t hk = u.head;
      size_t nq = 0;
      for (const Segment& s : segs) nq += (s.t1 - s.t0) * group;
      qs.resize(nq * hd);
      float* dst = qs.data();
      for (const Segment& s : segs)
        for (size_t t = s.t0; t < s.t1; ++t, dst += group * hd)
          std::copy_n(q + (entries[s.entry].row0 + t) * q_dim + hk * group * hd, group * hd, dst);
      att.Begin(qs.data(), nq);
      // Sliding-window layers: the unit's latest window edge. What lies before it is folded per
      // row with the row's own edge first; from it on, blocks are folded once for the stack. On
      // global layers the edge is 0. Every row meets its blocks in order, each once, with its own
      // mask — as alone.
      size_t edge = 0;
      for (const Segment& s : segs) edge = std::max(edge, entries[s.entry].seq->VisibleFrom(layer, s.t1 - 1));
      if (edge > 0) {
        size_t q0 = 0;
        for (const Segment& s : segs) {
          const KvSequence& seq = *entries[s.entry].seq;
          const size_t seen = (seq.size() + s.t0) / kBlockTokens;
          for (size_t t = s.t0; t < s.t1; ++t, q0 += group)
            seq.AddOwnBlocks(att, hk, q0, group, seen, SegmentRange{.lo = seq.VisibleFrom(layer, t), .end = edge});
        }
      }
      // The shared run: once for every stacked query.
      entries[segs[0].entry].seq->AddOwnBlocks(att, hk, 0, nq, common, SegmentRange{.begin = edge});
      size_t q0 = 0;
      for (const Segment& s : segs) {
        const KvSequence& seq = *entries[s.entry].seq;
        const size_t ns = (s.t1 - s.t0) * group;
        const size_t seen = (seq.size() + s.t0) / kBlockTokens;  // blocks every token of the stack sees
        // Blocks [common, seen), from the edge on, once for the stack (FoldBlocks skips [0, common)
        // through the range's begin).
        if (seen > common)
          seq.AddOwnBlocks(att, hk, q0, ns, seen, SegmentRange{.begin = std::max(edge, common * kBlockTokens)});
        for (size_t t = s.t0; t < s.t1; ++t) {
          const size_t qi = q0 + (t - s.t0) * group;
          seq.AddOwn(att, t, hk, qi, group, seen);
          att.Finish(out + (entries[s.entry].row0 + t) * q_dim + hk * group * hd, qi, group);
        }
        q0 += ns;
      }
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
  for (const BatchRows& e : entries_) {
    store_.policy().Observe(Observation{.seq_id = e.seq->id(), .layer = layer, .n = e.n, .q = q + e.row0 * q_dim,
                                        .k = k + e.row0 * kv_dim, .v = v + e.row0 * kv_dim, .q_dim = q_dim,
                                        .kv_dim = kv_dim});
    if (Status s = e.seq->Append(layer, e.n, k + e.row0 * kv_dim, v + e.row0 * kv_dim); !s.ok()) {
      failed_ = e.seq;
      return s;
    }
  }
  CHORUS_RETURN_IF_ERROR(store_.PrepareScratch(std::max(1, pool.size())));
  AttendRows(store_, layer, entries_, q, out, pool);
  return Status::Ok();
}

}  // namespace chorus
