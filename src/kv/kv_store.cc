// KvStore / KvSequence: sealing blocks through the policy and attending over blocks + window.
#include "kv/kv_store.h"

#include <algorithm>

#include "util/check.h"
#include "util/fp16.h"  // F32ToF16, F16ToF32

namespace chorus {

KvStore::KvStore(const KvStoreOptions& options, PrecisionPolicy* policy)
    : options_(options), policy_(policy), pool_(options.budget_bytes) {
  CHORUS_CHECK(policy_ != nullptr);
  CHORUS_CHECK(options_.shape.n_head_kv > 0 && options_.shape.n_head % options_.shape.n_head_kv == 0);
  CHORUS_CHECK(options_.layer_window.empty() || options_.layer_window.size() == options_.n_layer);
  seal_k_.Resize(kBlockTokens * options_.shape.kv_dim());
  seal_v_.Resize(kBlockTokens * options_.shape.kv_dim());
}

KvStore::~KvStore() { CHORUS_CHECK(live_.empty()); }

KvGeometry KvStore::geometry() const {
  return KvGeometry{static_cast<uint32_t>(options_.shape.n_head_kv), static_cast<uint32_t>(options_.shape.head_dim)};
}

std::unique_ptr<KvSequence> KvStore::NewSequence(size_t capacity, std::shared_ptr<const KvSequence> prefix) {
  std::unique_ptr<KvSequence> s(new KvSequence(*this, next_seq_id_++, capacity));
  if (prefix) {
    CHORUS_CHECK(prefix->frozen_ && &prefix->store_ == this);
    s->base_pos_ = prefix->base_pos_ + prefix->size_;
    s->prefix_ = std::move(prefix);
  }
  live_.insert(s.get());
  return s;
}

KvUsage KvStore::Usage() const {
  KvUsage u;
  u.block_bytes = pool_.bytes_in_use();
  u.blocks = pool_.live_blocks();
  for (const KvSequence* s : live_) {
    u.window_bytes += s->window_bytes();
    u.table_bytes += s->table_bytes();
    u.tokens += s->size();
  }
  return u;
}

KvSequence::KvSequence(KvStore& store, uint64_t id, size_t capacity)
    : store_(store), id_(id), capacity_(capacity) {
  const size_t L = store.options_.n_layer;
  tables_.resize(L);
  dropped_.assign(L, 0);
  prefix_views_.resize(L);
  win_k_.resize(L);  // grown on demand, up to 32 rows: a short sequence holds only what it uses
  win_v_.resize(L);
}

void KvSequence::Commit(size_t n) {
  size_ += n;
  nat_k_.Resize(0);
  nat_v_.Resize(0);
  natw_k_.Resize(0);
  natw_v_.Resize(0);
  FreeOutOfWindow();
}

size_t KvSequence::Window(size_t layer) const {
  const auto& w = store_.options_.layer_window;
  return layer < w.size() ? w[layer] : 0;
}

size_t KvSequence::VisibleFrom(size_t layer, size_t t) const {
  const size_t w = Window(layer), p = base_pos_ + size_ + t;
  return w > 0 && p + 1 > w ? p + 1 - w : 0;
}

void KvSequence::FreeOutOfWindow() {
  for (size_t l = 0; l < tables_.size(); ++l) {
    const size_t lo = VisibleFrom(l, 0);  // the next token's window; later tokens see less
    std::vector<BlockId>& t = tables_[l];
    size_t drop = 0;
    while (drop < t.size() && base_pos_ + (dropped_[l] + drop + 1) * kBlockTokens <= lo) ++drop;
    if (drop == 0) continue;
    for (size_t i = 0; i < drop; ++i) store_.pool_.Unref(t[i]);
    t.erase(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(drop));
    dropped_[l] += drop;
    prefix_views_[l].clear();  // rebuilt from the live blocks by the next reader
  }
}

void KvSequence::Freeze() {
  frozen_ = true;
  Commit(0);  // never appended to again
  const KvStoreOptions& o = store_.options_;
  if (o.window == WindowFormat::kF16) return;  // readers attend the stored f16 rows
  tail_k_.resize(tables_.size());
  tail_v_.resize(tables_.size());
  for (size_t l = 0; l < tables_.size(); ++l) {
    const size_t n = window_tokens(l), kv_dim = o.shape.kv_dim();
    tail_k_[l].Resize(n * kv_dim);
    tail_v_[l].Resize(n * kv_dim);
    DecodeWindowRows(o.window, o.shape.n_head_kv, o.shape.head_dim, win_k_[l].data(), n, tail_k_[l].data());
    DecodeWindowRows(o.window, o.shape.n_head_kv, o.shape.head_dim, win_v_[l].data(), n, tail_v_[l].data());
    win_k_[l].Resize(0);  // never appended to again: the decoded rows are all that is read
    win_v_[l].Resize(0);
  }
}

const uint16_t* KvSequence::TailRows(size_t layer, bool keys) const {
  if (store_.options_.window == WindowFormat::kF16)
    return reinterpret_cast<const uint16_t*>((keys ? win_k_ : win_v_)[layer].data());
  return (keys ? tail_k_ : tail_v_)[layer].data();
}

KvSequence::~KvSequence() {
  for (auto& t : tables_)
    for (BlockId b : t) store_.pool_.Unref(b);
  store_.live_.erase(this);
}

size_t KvSequence::window_bytes() const {
  size_t b = 0;
  for (size_t l = 0; l < win_k_.size(); ++l) b += win_k_[l].size() + win_v_[l].size();
  for (size_t l = 0; l < tail_k_.size(); ++l) b += (tail_k_[l].size() + tail_v_[l].size()) * sizeof(uint16_t);
  return b + (nat_k_.size() + nat_v_.size()) * sizeof(uint16_t) + natw_k_.size() + natw_v_.size();
}

size_t KvSequence::table_bytes() const {
  size_t b = tables_.capacity() * sizeof(tables_[0]);
  for (const auto& t : tables_) b += t.capacity() * sizeof(BlockId);
  return b;
}

Status KvSequence::Seal(size_t layer, size_t n_full, const uint16_t* nat_k, const uint16_t* nat_v) {
  const KvGeometry g = store_.geometry();
  const size_t kv_dim = store_.options_.shape.kv_dim();
  BlockPool& pool = store_.pool_;
  std::vector<BlockId> made;
  for (size_t b = 0; b < n_full; ++b) {
    const uint16_t* sk = nat_k + b * kBlockTokens * kv_dim;
    const uint16_t* sv = nat_v + b * kBlockTokens * kv_dim;
    for (size_t i = 0; i < kBlockTokens * kv_dim; ++i) {
      store_.seal_k_[i] = F16ToF32(sk[i]);
      store_.seal_v_[i] = F16ToF32(sv[i]);
    }
    const size_t index = sealed_blocks(layer) + made.size();
    BlockInfo info{.seq_id = id_, .layer = layer, .block_index = index, .first_pos = base_pos_ + index * kBlockTokens,
                   .k = store_.seal_k_.data(), .v = store_.seal_v_.data(), .kv_dim = kv_dim};
    const BlockFormats f = store_.policy_->FormatFor(info);
    Status st = CheckKvFormat(f.k, KvSide::kKey, g);
    if (st.ok()) st = CheckKvFormat(f.v, KvSide::kValue, g);
    Result<BlockId> id = st.ok() ? pool.Allocate(f.k, KvBlockBytes(f.k, KvSide::kKey, g), f.v,
                                                 KvBlockBytes(f.v, KvSide::kValue, g))
                                 : Result<BlockId>(st);
    if (id.ok()) st = EncodeKvBlock(f.k, KvSide::kKey, g, store_.seal_k_.data(), pool.mutable_k(*id), f.k_params);
    if (id.ok() && st.ok()) st = EncodeKvBlock(f.v, KvSide::kValue, g, store_.seal_v_.data(), pool.mutable_v(*id), f.v_params);
    if (id.ok()) made.push_back(*id);
    if (!id.ok() || !st.ok()) {
      for (BlockId m : made) pool.Unref(m);  // leave the sequence as it was
      return id.ok() ? st : id.status();
    }
  }
  tables_[layer].insert(tables_[layer].end(), made.begin(), made.end());
  return Status::Ok();
}

Status KvSequence::Append(size_t layer, size_t n, const float* k, const float* v) {
  if (frozen_) return Status::Error("a shared context is read-only: no tokens can be appended to it");
  if (size_ + n > capacity_)
    return Status::Error("context overflow: {} cached + {} new tokens exceed the context of {} tokens",
                         base_pos_ + size_, n, base_pos_ + capacity_);
  const KvStoreOptions& o = store_.options_;
  const size_t kv_dim = o.shape.kv_dim(), H = o.shape.n_head_kv, hd = o.shape.head_dim;
  const WindowFormat wf = o.window;
  const size_t rb = WindowRowBytes(wf, H, hd);
  const size_t base = sealed_blocks(layer) * kBlockTokens;  // own index of the first native row
  const size_t w = size_ - base;                             // tokens in the window before this batch
  const size_t rows = w + n;
  // Native rows [base, size_ + n): the window, then the new tokens rounded through the window's
  // format (fp16, or q8 then fp16), so every reader sees what the window will hold.
  if (nat_k_.size() != rows * kv_dim) {  // exactly the rows in use: a finished prefill's rows are given back
    nat_k_.Resize(rows * kv_dim);
    nat_v_.Resize(rows * kv_dim);
  }
  DecodeWindowRows(wf, H, hd, win_k_[layer].data(), w, nat_k_.data());
  DecodeWindowRows(wf, H, hd, win_v_[layer].data(), w, nat_v_.data());
  uint16_t *nk = nat_k_.data() + w * kv_dim, *nv = nat_v_.data() + w * kv_dim;
  const uint8_t *stored_k = reinterpret_cast<const uint8_t*>(nat_k_.data()),
                *stored_v = reinterpret_cast<const uint8_t*>(nat_v_.data());
  if (wf == WindowFormat::kF16) {
    EncodeWindowRows(wf, H, hd, k, n, reinterpret_cast<uint8_t*>(nk), nk);
    EncodeWindowRows(wf, H, hd, v, n, reinterpret_cast<uint8_t*>(nv), nv);
  } else {
    if (natw_k_.size() != rows * rb) {
      natw_k_.Resize(rows * rb);
      natw_v_.Resize(rows * rb);
    }
    std::copy_n(win_k_[layer].data(), w * rb, natw_k_.data());
    std::copy_n(win_v_[layer].data(), w * rb, natw_v_.data());
    EncodeWindowRows(wf, H, hd, k, n, natw_k_.data() + w * rb, nk);
    EncodeWindowRows(wf, H, hd, v, n, natw_v_.data() + w * rb, nv);
    stored_k = natw_k_.data();
    stored_v = natw_v_.data();
  }
  nat_base_ = base;
  // Seal every block that is now complete.
  const size_t n_full = rows / kBlockTokens;
  CHORUS_RETURN_IF_ERROR(Seal(layer, n_full, nat_k_.data(), nat_v_.data()));
  const size_t tail = rows - n_full * kBlockTokens;
  // The window holds its tokens rounded up to kWindowGranule: it grows while a block fills and
  // shrinks when the block is sealed, so an agent's native window costs what it holds (measured
  // bytes), not a whole block, and reallocates at most once per kWindowGranule tokens.
  const size_t cap = (tail + kWindowGranule - 1) / kWindowGranule * kWindowGranule * rb;
  if (win_k_[layer].size() != cap) {
    win_k_[layer].Resize(cap);  // contents are rewritten just below
    win_v_[layer].Resize(cap);
  }
  std::copy_n(stored_k + n_full * kBlockTokens * rb, tail * rb, win_k_[layer].data());
  std::copy_n(stored_v + n_full * kBlockTokens * rb, tail * rb, win_v_[layer].data());
  // Views of this layer's blocks (and, once, of the frozen prefix's), for the attention that
  // follows — built here, serially, because the attention runs on several threads.
  const BlockPool& bp = store_.pool_;
  if (prefix_) {
    std::vector<BlockView>& pv = prefix_->prefix_views_[layer];
    if (pv.size() != prefix_->tables_[layer].size()) {
      pv.clear();
      for (BlockId id : prefix_->tables_[layer]) {
        const BlockMeta& m = bp.meta(id);
        pv.push_back({bp.k_data(id), bp.v_data(id), m.k_format, m.v_format});
      }
    }
  }
  views_.clear();
  views_first_ = dropped_[layer];
  views_window_ = Window(layer);
  for (BlockId id : tables_[layer]) {
    const BlockMeta& m = bp.meta(id);
    views_.push_back({bp.k_data(id), bp.v_data(id), m.k_format, m.v_format});
  }
  return Status::Ok();
}

Status KvSequence::ReorderByFormat() {
  if (!frozen_) return Status::Error("only a frozen (shared) context can be reordered: its readers see all of it");
  const BlockPool& bp = store_.pool_;
  for (size_t l = 0; l < tables_.size(); ++l) {
    if (Window(l) > 0) continue;  // a sliding window masks by position: keep its blocks in order
    std::stable_sort(tables_[l].begin(), tables_[l].end(), [&](BlockId a, BlockId b) {
      const BlockMeta &ma = bp.meta(a), &mb = bp.meta(b);
      return std::pair(ma.k_format, ma.v_format) < std::pair(mb.k_format, mb.v_format);
    });
    prefix_views_[l].clear();  // rebuilt from the new order on the next Append of a reader
  }
  return Status::Ok();
}

namespace {

// Folds the blocks [from, to) of a table whose block i starts at position base + 32·i and whose
// live views begin at block `first`, restricted to `r` (a block partly before r.lo is masked).
void FoldBlocks(BlockAttention& att, std::span<const BlockView> views, size_t first, size_t base, size_t from,
                size_t to, uint32_t kv_head, size_t q0, size_t nq, const SegmentRange& r) {
  auto start = [&](size_t i) { return base + i * kBlockTokens; };
  if (r.lo > base) from = std::max(from, (r.lo - base) / kBlockTokens);  // blocks ending after lo
  if (r.begin > base) from = std::max(from, (r.begin - base + kBlockTokens - 1) / kBlockTokens);
  if (r.end <= base) return;
  if (r.end != SIZE_MAX) to = std::min(to, (r.end - base + kBlockTokens - 1) / kBlockTokens);
  if (from >= to) return;
  CHORUS_CHECK(from >= first);  // a window never reaches a freed block (FreeOutOfWindow)
  const size_t skip = r.lo > start(from) ? r.lo - start(from) : 0;
  att.AddBlocks(views.subspan(from - first, to - from), kv_head, q0, nq, skip);
}

}  // namespace

void KvSequence::AddPrefix(BlockAttention& att, size_t layer, uint32_t kv_head, size_t q0, size_t nq,
                           const SegmentRange& range) const {
  if (!prefix_) return;
  const KvSequence& P = *prefix_;
  const size_t kv_dim = store_.options_.shape.kv_dim(), hd = store_.options_.shape.head_dim;
  const std::vector<BlockView>& pv = P.prefix_views_[layer];  // built serially by Append
  const size_t first = P.dropped_[layer], sealed = P.sealed_blocks(layer);
  FoldBlocks(att, pv, first, P.base_pos_, 0, sealed, kv_head, q0, nq, range);
  // The native tail is one segment: its first position decides whether `range` selects it.
  const size_t tail = P.window_tokens(layer), tail_pos = P.base_pos_ + sealed * kBlockTokens;
  if (tail == 0 || tail_pos < range.begin || tail_pos >= range.end || tail_pos + tail <= range.lo) return;
  const size_t skip = range.lo > tail_pos ? range.lo - tail_pos : 0;
  att.AddNative(P.TailRows(layer, true) + skip * kv_dim + kv_head * hd,
                P.TailRows(layer, false) + skip * kv_dim + kv_head * hd, kv_dim, tail - skip, q0, nq);
}

void KvSequence::AddOwnBlocks(BlockAttention& att, uint32_t kv_head, size_t q0, size_t nq, size_t to_block,
                              const SegmentRange& range) const {
  FoldBlocks(att, views_, views_first_, base_pos_, 0, to_block, kv_head, q0, nq, range);
}

void KvSequence::AddOwn(BlockAttention& att, size_t t, uint32_t kv_head, size_t q0, size_t nq,
                        size_t from_block) const {
  const size_t kv_dim = store_.options_.shape.kv_dim(), hd = store_.options_.shape.head_dim;
  const size_t p = size_ + t;  // own index of the token
  const size_t nb = p / kBlockTokens;
  const size_t abs = base_pos_ + p;
  const size_t lo = views_window_ > 0 && abs + 1 > views_window_ ? abs + 1 - views_window_ : 0;
  FoldBlocks(att, views_, views_first_, base_pos_, from_block, nb, kv_head, q0, nq, SegmentRange{.lo = lo});
  const size_t row_pos = base_pos_ + nb * kBlockTokens;  // the native rows of p's block
  const size_t skip = lo > row_pos ? lo - row_pos : 0;
  const size_t row0 = nb * kBlockTokens - nat_base_ + skip;
  att.AddNative(nat_k_.data() + row0 * kv_dim + kv_head * hd, nat_v_.data() + row0 * kv_dim + kv_head * hd, kv_dim,
                p - nb * kBlockTokens + 1 - skip, q0, nq);
}

Status KvSequence::AppendAndAttend(size_t layer, size_t n, const float* k, const float* v, const float* q,
                                   float* out, ThreadPool& pool) {
  const AttentionShape& shape = store_.options_.shape;
  store_.policy_->Observe(Observation{.seq_id = id_, .layer = layer, .n = n, .q = q, .k = k, .v = v,
                                      .q_dim = shape.q_dim(), .kv_dim = shape.kv_dim()});
  CHORUS_RETURN_IF_ERROR(Append(layer, n, k, v));
  const AttentionShape& sh = store_.options_.shape;
  const size_t q_dim = sh.q_dim(), hd = sh.head_dim, group = sh.n_head / sh.n_head_kv;
  if (store_.attn_.size() < static_cast<size_t>(pool.size())) {
    store_.attn_.clear();
    for (int i = 0; i < pool.size(); ++i) store_.attn_.push_back(std::make_unique<BlockAttention>(store_.geometry()));
    store_.stack_q_.assign(pool.size(), {});
  }
  // Token at own index p sees the prefix, its sealed blocks [0, p/32) compressed and rows
  // [32·(p/32), p] native — on a sliding-window layer only from VisibleFrom(layer, t) on. The
  // queries of up to kStackTokens consecutive tokens are stacked per KV head: what every one of
  // them sees whole (segments from the last token's window edge up to the blocks the first token
  // sees) is read once for the stack; each token first adds what lies before that edge (masked by
  // its own edge), then the rest. Every query meets the same segments with the same masks in the
  // same order as alone, and the kernels give a stacked query its own bits, so the result does
  // not depend on the stacking.
  constexpr size_t kStackTokens = 32;
  const size_t chunks = (n + kStackTokens - 1) / kStackTokens;
  const size_t units = chunks * sh.n_head_kv;
  pool.Run([&](int ti, int nt) {
    BlockAttention& att = *store_.attn_[ti];
    std::vector<float>& qs = store_.stack_q_[ti];
    for (size_t u = ti; u < units; u += nt) {
      const size_t t0 = (u / sh.n_head_kv) * kStackTokens, t1 = std::min(n, t0 + kStackTokens);
      const auto hk = static_cast<uint32_t>(u % sh.n_head_kv);
      const size_t nq = (t1 - t0) * group;
      qs.resize(nq * hd);
      for (size_t t = t0; t < t1; ++t)
        std::copy_n(q + t * q_dim + hk * group * hd, group * hd, qs.data() + (t - t0) * group * hd);
      att.Begin(qs.data(), nq);
      const size_t common = (size_ + t0) / kBlockTokens;  // own blocks every token of the stack sees
      const size_t edge = VisibleFrom(layer, t1 - 1);      // the stack's latest window edge
      if (edge > 0) {
        for (size_t t = t0; t < t1; ++t) {
          const SegmentRange before{.lo = VisibleFrom(layer, t), .end = edge};
          AddPrefix(att, layer, hk, (t - t0) * group, group, before);
          AddOwnBlocks(att, hk, (t - t0) * group, group, common, before);
        }
      }
      AddPrefix(att, layer, hk, 0, nq, SegmentRange{.begin = edge});
      AddOwnBlocks(att, hk, 0, nq, common, SegmentRange{.begin = edge});
      for (size_t t = t0; t < t1; ++t) {
        AddOwn(att, t, hk, (t - t0) * group, group, common);
        att.Finish(out + t * q_dim + hk * group * hd, (t - t0) * group, group);
      }
    }
  });
  return Status::Ok();
}

}  // namespace chorus
