// KvBatch: append per sequence, then attention grouped by prefix with stacked queries.
#include "kv/kv_batch.h"

#include <algorithm>
#include <map>

namespace chorus {

KvBatch::KvBatch(const KvStore& store) : store_(store), shape_(store.options().shape) {}

void KvBatch::Clear() {
  entries_.clear();
  positions_.clear();
}

void KvBatch::Add(KvSequence* seq, size_t n) {
  entries_.push_back({seq, positions_.size(), n});
  for (size_t t = 0; t < n; ++t) positions_.push_back(seq->Position(t));
}

void KvBatch::Commit(size_t n) {
  for (const Entry& e : entries_) e.seq->Commit(e.n);
}

Status KvBatch::AppendAndAttend(size_t layer, size_t n, const float* k, const float* v, const float* q, float* out,
                                ThreadPool& pool) {
  if (n != rows()) return Status::Error("KvBatch: {} rows given, {} planned", n, rows());
  const size_t kv_dim = shape_.kv_dim(), q_dim = shape_.q_dim(), hd = shape_.head_dim;
  const size_t group = shape_.n_head / shape_.n_head_kv;
  for (const Entry& e : entries_) {
    store_.policy().Observe(Observation{.seq_id = e.seq->id(), .layer = layer, .n = e.n, .q = q + e.row0 * q_dim,
                                        .k = k + e.row0 * kv_dim, .v = v + e.row0 * kv_dim, .q_dim = q_dim,
                                        .kv_dim = kv_dim});
    CHORUS_RETURN_IF_ERROR(e.seq->Append(layer, e.n, k + e.row0 * kv_dim, v + e.row0 * kv_dim));
  }
  if (attn_.size() < static_cast<size_t>(pool.size())) {
    attn_.clear();
    for (int i = 0; i < pool.size(); ++i) attn_.push_back(std::make_unique<BlockAttention>(store_.geometry()));
  }
  // Rows grouped by prefix: (row, entry index) lists.
  std::map<const KvSequence*, std::vector<std::pair<size_t, size_t>>> by_prefix;
  for (size_t ei = 0; ei < entries_.size(); ++ei)
    for (size_t t = 0; t < entries_[ei].n; ++t) by_prefix[entries_[ei].seq->prefix()].push_back({t, ei});
  for (const auto& [prefix, rows] : by_prefix) {
    // Units: (kv head, chunk of rows); each thread reads the prefix once for its chunk.
    const size_t chunks = std::min<size_t>(rows.size(), std::max<size_t>(1, pool.size()));
    const size_t units = shape_.n_head_kv * chunks;
    pool.Run([&](int ti, int nt) {
      BlockAttention& att = *attn_[ti];
      std::vector<float> stacked;  // (rows in chunk × group, hd)
      for (size_t u = ti; u < units; u += nt) {
        const auto hk = static_cast<uint32_t>(u % shape_.n_head_kv);
        const size_t c = u / shape_.n_head_kv;
        const size_t r0 = rows.size() * c / chunks, r1 = rows.size() * (c + 1) / chunks;
        stacked.resize((r1 - r0) * group * hd);
        for (size_t r = r0; r < r1; ++r) {
          const Entry& e = entries_[rows[r].second];
          const float* src = q + (e.row0 + rows[r].first) * q_dim + hk * group * hd;
          std::copy_n(src, group * hd, stacked.data() + (r - r0) * group * hd);
        }
        att.Begin(stacked.data(), (r1 - r0) * group);
        // Sliding-window layers: the prefix from the chunk's latest window edge on is read once for
        // all; what lies before it is folded per row with the row's own edge (first, as alone).
        size_t edge = 0;
        for (size_t r = r0; r < r1; ++r) edge = std::max(edge, entries_[rows[r].second].seq->VisibleFrom(layer, rows[r].first));
        if (edge > 0) {
          for (size_t r = r0; r < r1; ++r) {
            const Entry& e = entries_[rows[r].second];
            e.seq->AddPrefix(att, layer, hk, (r - r0) * group, group,
                             SegmentRange{.lo = e.seq->VisibleFrom(layer, rows[r].first), .end = edge});
          }
        }
        const Entry& first = entries_[rows[r0].second];
        first.seq->AddPrefix(att, layer, hk, 0, (r1 - r0) * group, SegmentRange{.begin = edge});  // shared: once for all
        for (size_t r = r0; r < r1; ++r) {
          const Entry& e = entries_[rows[r].second];
          e.seq->AddOwn(att, rows[r].first, hk, (r - r0) * group, group);
          att.Finish(out + (e.row0 + rows[r].first) * q_dim + hk * group * hd, (r - r0) * group, group);
        }
      }
    });
  }
  return Status::Ok();
}

}  // namespace chorus
