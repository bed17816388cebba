// KvStore / KvSequence: sealing blocks through the policy, attending over blocks + window, and
// counting every byte against the budget as it is allocated.
#include "kv/kv_store.h"

#include <cstring>

#include <algorithm>

#include "kv/kv_batch.h"  // AttendRows
#include "util/check.h"
#include "util/fp16.h"  // F32ToF16, F16ToF32
#include "util/timer.h"

namespace chorus {

KvStore::KvStore(const KvStoreOptions& options, PrecisionPolicy* policy)
    : options_(options), policy_(policy) {
  CHORUS_CHECK(policy_ != nullptr);
  CHORUS_CHECK(options_.shape.n_head_kv > 0 && options_.shape.n_head % options_.shape.n_head_kv == 0);
  CHORUS_CHECK(options_.layer_window.empty() || options_.layer_window.size() == options_.n_layer);
  seal_k_.Resize(kBlockTokens * options_.shape.kv_dim());
  seal_v_.Resize(kBlockTokens * options_.shape.kv_dim());
  counted_ = seal_k_.bytes() + seal_v_.bytes();
  // A budget smaller than the scratch makes this fail; the first attention then says so.
  (void)PrepareScratch(std::max<size_t>(1, options_.threads));
  NoteHeld();
}

KvStore::~KvStore() { CHORUS_CHECK(live_.empty()); }

KvGeometry KvStore::geometry() const {
  return KvGeometry{static_cast<uint32_t>(options_.shape.n_head_kv), static_cast<uint32_t>(options_.shape.head_dim)};
}

size_t KvStore::ScratchBytes() const {
  size_t b = seal_k_.bytes() + seal_v_.bytes() + attn_.capacity() * sizeof(attn_[0]) +
             stack_q_.capacity() * sizeof(stack_q_[0]) + seal_more_.capacity() * sizeof(seal_more_[0]);
  for (const auto& s : seal_more_) b += s.bytes();
  for (const auto& a : attn_) b += a->bytes();
  for (const auto& q : stack_q_) b += q.capacity() * sizeof(float);
  return b + parts_.capacity() * sizeof(float);
}

Status KvStore::PrepareScratch(size_t threads) {
  if (attn_.size() >= threads) return Status::Ok();
  const size_t group = options_.shape.n_head / options_.shape.n_head_kv;
  const size_t max_q = kStackTokens * group;
  const size_t before = ScratchBytes();
  // Guard the budget with the projection's bytes, then count what was really allocated.
  const size_t part_floats =
      parts_.empty() ? kPartSlots * options_.shape.n_head * BlockAttention::PartStateFloats(options_.shape.head_dim) : 0;
  // seal pairs for threads 1.. (thread 0 encodes in seal_k_ / seal_v_)
  const size_t seal_floats = 2 * kBlockTokens * options_.shape.kv_dim();
  const size_t more_seals = threads - 1 - seal_more_.size();
  const size_t more = (threads - attn_.size()) * (BlockAttention::BytesFor(geometry(), max_q) +
                                                  max_q * options_.shape.head_dim * sizeof(float) +
                                                  sizeof(attn_[0]) + sizeof(stack_q_[0])) +
                      more_seals * (AlignedBytes(seal_floats * sizeof(float)) + sizeof(seal_more_[0])) +
                      part_floats * sizeof(float);
  CHORUS_RETURN_IF_ERROR(Reserve(more, "attention scratch"));
  if (part_floats > 0) parts_.resize(part_floats);
  attn_.reserve(threads);
  stack_q_.reserve(threads);
  seal_more_.reserve(threads - 1);
  while (seal_more_.size() + 1 < threads) seal_more_.emplace_back(seal_floats);
  while (attn_.size() < threads) {
    attn_.push_back(std::make_unique<BlockAttention>(geometry()));
    attn_.back()->Reserve(max_q);
    stack_q_.emplace_back().reserve(max_q * options_.shape.head_dim);
  }
  counted_ = counted_ - more + (ScratchBytes() - before);
  NoteHeld();
  return Status::Ok();
}

Status KvStore::EncodeDeferredSeals(ThreadPool& pool) {
  defer_seals_ = false;
  if (pending_.empty()) return Status::Ok();
  CHORUS_CHECK(seal_more_.size() + 1 >= static_cast<size_t>(std::max(1, pool.size())));  // PrepareScratch first
  const Timer timer;
  const KvGeometry g = geometry();
  const size_t n = kBlockTokens * options_.shape.kv_dim();
  std::vector<Status> status(pending_.size(), Status::Ok());
  // Blocks dealt round-robin: each thread converts its blocks to f32 in its own scratch and encodes
  // them (the same bits as an immediate seal: one block's encoding does not depend on another's).
  pool.Run([&](int ti, int nt) {
    float* k = ti == 0 ? seal_k_.data() : seal_more_[ti - 1].data();
    float* v = ti == 0 ? seal_v_.data() : seal_more_[ti - 1].data() + n;
    for (size_t i = static_cast<size_t>(ti); i < pending_.size(); i += static_cast<size_t>(nt)) {
      const PendingSeal& s = pending_[i];
      for (size_t j = 0; j < n; ++j) {
        k[j] = F16ToF32(s.k[j]);
        v[j] = F16ToF32(s.v[j]);
      }
      status[i] = EncodeKvBlock(s.f.k, KvSide::kKey, g, k, pool_.mutable_k(s.id), s.f.k_params);
      if (status[i].ok()) status[i] = EncodeKvBlock(s.f.v, KvSide::kValue, g, v, pool_.mutable_v(s.id), s.f.v_params);
    }
  });
  std::vector<PendingSeal>().swap(pending_);  // a step's transient list, like AttendRows' plan
  seal_stats_.seconds += timer.Seconds();
  for (const Status& s : status)
    if (!s.ok()) return s;
  return Status::Ok();
}

Status KvStore::CheckRoom(size_t more, const char* what) const {
  const size_t budget = options_.budget_bytes;
  if (budget != 0 && held() + more > budget)
    return Status::Error("KV budget exhausted: {} needs {} more bytes, {} of the {}-byte budget are free", what, more,
                         held() > budget ? 0 : budget - held(), budget);
  return Status::Ok();
}

Status KvStore::Reserve(size_t more, const char* what) {
  CHORUS_RETURN_IF_ERROR(CheckRoom(more, what));
  counted_ += more;
  NoteHeld();
  return Status::Ok();
}

Result<BlockId> KvStore::AdoptBlock(KvFormat k_format, std::span<const uint8_t> k, KvFormat v_format,
                                    std::span<const uint8_t> v) {
  CHORUS_RETURN_IF_ERROR(CheckRoom(pool_.AllocationCost(k.size(), v.size()), "a fetched block"));
  CHORUS_ASSIGN_OR_RETURN(const BlockId id, pool_.Allocate(k_format, k.size(), v_format, v.size()));
  NoteHeld();
  std::memcpy(pool_.mutable_k(id), k.data(), k.size());
  std::memcpy(pool_.mutable_v(id), v.data(), v.size());
  return id;
}

size_t BorrowedBlocks::blocks() const {
  if (tables.empty()) return 0;
  return (first.empty() ? 0 : first[0]) + tables[0].size();
}

std::unique_ptr<KvSequence> KvStore::NewSequence(size_t capacity, const BorrowedBlocks& borrowed) {
  std::unique_ptr<KvSequence> s(new KvSequence(*this, next_seq_id_++, capacity));
  if (!borrowed.tables.empty()) {
    CHORUS_CHECK(borrowed.tables.size() == options_.n_layer);
    CHORUS_CHECK(borrowed.first.empty() || borrowed.first.size() == options_.n_layer);
    const size_t n = borrowed.blocks();
    CHORUS_CHECK(n * kBlockTokens <= capacity);
    for (size_t l = 0; l < options_.n_layer; ++l) {
      const size_t first = borrowed.first.empty() ? 0 : borrowed.first[l];
      CHORUS_CHECK(first + borrowed.tables[l].size() == n);
      // A windowed layer's first computed token (at 32·n) must find every block it sees.
      CHORUS_CHECK(first <= FirstVisibleBlock(l, n * kBlockTokens));
      s->tables_[l].assign(borrowed.tables[l].begin(), borrowed.tables[l].end());  // reserved: no reallocation
      s->dropped_[l] = first;
      for (BlockId id : borrowed.tables[l]) pool_.Ref(id);
    }
    s->borrowed_ = n;
    s->size_ = n * kBlockTokens;
  }
  live_.insert(s.get());
  return s;
}

size_t KvStore::FirstVisibleBlock(size_t layer, size_t pos) const {
  const size_t w = layer < options_.layer_window.size() ? options_.layer_window[layer] : 0;
  return w > 0 && pos + 1 > w ? (pos + 1 - w) / kBlockTokens : 0;
}

void SortBlocksByFormat(std::vector<std::vector<BlockId>>& tables, const BlockPool& pool,
                        std::span<const uint32_t> layer_window) {
  for (size_t l = 0; l < tables.size(); ++l) {
    if (l < layer_window.size() && layer_window[l] > 0) continue;  // windows mask by position
    std::stable_sort(tables[l].begin(), tables[l].end(), [&](BlockId a, BlockId b) {
      const BlockMeta &ma = pool.meta(a), &mb = pool.meta(b);
      return std::pair(ma.k_format, ma.v_format) < std::pair(mb.k_format, mb.v_format);
    });
  }
}

KvUsage KvStore::Usage() const {
  KvUsage u;
  u.block_bytes = pool_.bytes();
  u.blocks = pool_.live_blocks();
  u.scratch_bytes = ScratchBytes();
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
  for (auto& t : tables_) t.reserve(capacity / kBlockTokens);  // never reallocated: bytes known up front
  views_.reserve(capacity / kBlockTokens);
  dropped_.assign(L, 0);
  win_k_.resize(L);  // grown on demand, up to 32 rows: a short sequence holds only what it uses
  win_v_.resize(L);
  undo_.resize(L);
  // Fixed bookkeeping (tables, views, the object): counted without a budget check — admission
  // projects it (kv_footprint.h); everything that grows later is checked.
  counted_bookkeeping_ = table_bytes();
  store.Charge(counted_bookkeeping_);
}

template <typename T>
Status KvSequence::Fit(AlignedBuffer<T>& b, size_t n, const char* what) {
  if (b.size() == n) return Status::Ok();
  const size_t old_bytes = b.bytes(), new_bytes = AlignedBytes(n * sizeof(T));
  if (new_bytes > old_bytes) CHORUS_RETURN_IF_ERROR(store_.Reserve(new_bytes - old_bytes, what));
  else store_.Release(old_bytes - new_bytes);
  b.Resize(n);  // frees the old memory first: never both at once
  return Status::Ok();
}

template <typename T>
void KvSequence::Drop(AlignedBuffer<T>& b) {
  store_.Release(b.bytes());
  b.Resize(0);
}

void KvSequence::DropBatchRows() {
  Drop(nat_k_);
  Drop(nat_v_);
  Drop(natw_k_);
  Drop(natw_v_);
}

void KvSequence::Commit(size_t n) {
  size_ += n;
  DropBatchRows();
  for (Undo& u : undo_) {
    if (!u.active) continue;
    Drop(u.k);
    Drop(u.v);
    u = Undo{};
  }
  FreeOutOfWindow();
}

void KvSequence::Rollback() {
  for (size_t l = 0; l < undo_.size(); ++l) RollbackLayer(l);
  DropBatchRows();
}

void KvSequence::RollbackLayer(size_t l) {
  Undo& u = undo_[l];
  if (!u.active) return;
  const BlockPool& bp = store_.pool_;
  std::vector<BlockId>& t = tables_[l];
  for (size_t i = u.table_size; i < t.size(); ++i) {
    const BlockMeta& m = bp.meta(t[i]);
    const size_t index = dropped_[l] + i;
    BlockInfo info{.seq_id = id_, .layer = l, .block_index = index, .first_pos = index * kBlockTokens,
                   .kv_dim = store_.options_.shape.kv_dim()};
    store_.policy_->Unseal(info, BlockFormats{.k = m.k_format, .v = m.v_format});
    store_.pool_.Unref(t[i]);
  }
  t.resize(u.table_size);
  if (u.window_moved) {
    Drop(win_k_[l]);
    Drop(win_v_[l]);
    win_k_[l] = std::move(u.k);  // the rows before the batch, still counted (u.k is now empty)
    win_v_[l] = std::move(u.v);
  }
  u = Undo{};
}

size_t KvSequence::Window(size_t layer) const {
  const auto& w = store_.options_.layer_window;
  return layer < w.size() ? w[layer] : 0;
}

size_t KvSequence::WindowEdge(size_t w, size_t row) const {
  if (w == 0) return 0;
  size_t before = 0;  // hole rows before `row`
  for (const Run& u : runs_)
    if (row >= u.first * kBlockTokens + u.skip) before += u.skip;
  const size_t p = row - before;
  if (p + 1 <= w) return 0;
  size_t r = p + 1 - w;  // the first position seen, as a row: past every hole before it
  for (const Run& u : runs_) {
    if (r < u.first * kBlockTokens) break;
    r += u.skip;
  }
  return r;
}

size_t KvSequence::VisibleFrom(size_t layer, size_t t) const { return WindowEdge(Window(layer), size_ + t); }

size_t KvSequence::attached_rows() const {
  size_t rows = 0;
  for (const Run& u : runs_) rows += u.blocks * kBlockTokens;
  return rows;
}

bool KvSequence::attached(size_t j) const {
  for (const Run& u : runs_)
    if (j >= u.first && j < u.first + u.blocks) return true;
  return false;
}

Status KvSequence::Attach(const AttachedBlocks& run) {
  const size_t L = tables_.size();
  CHORUS_CHECK(run.tables.size() == L && run.skip < kBlockTokens);
  const size_t m = run.tables[0].size();
  if (m == 0) return Status::Ok();
  for (size_t l = 0; l < L; ++l) {
    CHORUS_CHECK(run.tables[l].size() == m);
    CHORUS_CHECK(sealed_blocks(l) * kBlockTokens == size_);  // on a block boundary, windows empty
    CHORUS_CHECK(!undo_[l].active);                          // no batch in flight
  }
  if (size_ + m * kBlockTokens > capacity_)
    return Status::Error("attaching {} blocks after {} rows passes the sequence's capacity of {} rows", m, size_,
                         capacity_);
  if (run.shift != 0 && store_.options_.layer_rope.size() != L)
    return Status::Error("blocks at another offset need every layer's RoPE (KvStoreOptions::layer_rope)");
  if (runs_.size() == runs_.capacity()) {  // bookkeeping grows here, counted like the rest of the table
    const size_t cap = std::max<size_t>(4, 2 * runs_.capacity()), more = (cap - runs_.capacity()) * sizeof(Run);
    CHORUS_RETURN_IF_ERROR(store_.Reserve(more, "attached runs"));
    runs_.reserve(cap);
    counted_bookkeeping_ += more;
  }
  for (size_t l = 0; l < L; ++l)
    for (BlockId id : run.tables[l]) {
      CHORUS_CHECK(id != kNoBlock);
      store_.pool_.Ref(id);
      tables_[l].push_back(id);  // reserved for capacity / 32 blocks: no reallocation
    }
  runs_.push_back({size_ / kBlockTokens, m, run.shift, static_cast<uint32_t>(run.skip)});
  size_ += m * kBlockTokens;
  holes_ += run.skip;
  FreeOutOfWindow();
  return Status::Ok();
}

void KvSequence::FreeOutOfWindow() {
  const size_t next = std::min(size_, keep_from_);  // the earliest token still to be computed
  for (size_t l = 0; l < tables_.size(); ++l) {
    const size_t lo = WindowEdge(Window(l), next);  // later tokens see less
    std::vector<BlockId>& t = tables_[l];
    size_t drop = 0;
    while (drop < t.size() && (dropped_[l] + drop + 1) * kBlockTokens <= lo) ++drop;
    if (drop == 0) continue;
    for (size_t i = 0; i < drop; ++i) store_.pool_.Unref(t[i]);
    t.erase(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(drop));
    dropped_[l] += drop;
  }
}

KvSequence::~KvSequence() {
  Rollback();  // a batch that never committed: its blocks go back like the others
  for (auto& t : tables_)
    for (BlockId b : t) store_.pool_.Unref(b);
  store_.Release(window_bytes() + counted_bookkeeping_);
  store_.live_.erase(this);
}

size_t KvSequence::window_bytes() const {
  size_t b = nat_k_.bytes() + nat_v_.bytes() + natw_k_.bytes() + natw_v_.bytes();
  for (size_t l = 0; l < win_k_.size(); ++l) b += win_k_[l].bytes() + win_v_[l].bytes();
  for (const Undo& u : undo_) b += u.k.bytes() + u.v.bytes();
  return b;
}

size_t KvSequence::table_bytes() const {
  size_t b = sizeof(*this) + tables_.capacity() * sizeof(tables_[0]) + views_.capacity() * sizeof(BlockView) +
             dropped_.capacity() * sizeof(size_t) + (win_k_.capacity() + win_v_.capacity()) * sizeof(win_k_[0]) +
             undo_.capacity() * sizeof(undo_[0]) + runs_.capacity() * sizeof(Run);
  for (const auto& t : tables_) b += t.capacity() * sizeof(BlockId);
  return b;
}

size_t KvSequence::TableBytesFor(const KvStoreOptions& o, size_t capacity) {
  const size_t L = o.n_layer, nb = capacity / kBlockTokens;
  return sizeof(KvSequence) + L * sizeof(std::vector<BlockId>) + nb * sizeof(BlockView) + L * sizeof(size_t) +
         2 * L * sizeof(AlignedBuffer<uint8_t>) + L * sizeof(Undo) + L * nb * sizeof(BlockId);
}

Status KvSequence::Seal(size_t layer, size_t n_full, const uint16_t* nat_k, const uint16_t* nat_v) {
  const KvGeometry g = store_.geometry();
  const size_t kv_dim = store_.options_.shape.kv_dim();
  BlockPool& pool = store_.pool_;
  if (n_full == 0) return Status::Ok();
  const Timer timer;
  struct Count {  // every return below counts the blocks sealed and the time
    KvStore::SealStats& stats;
    const Timer& timer;
    uint64_t blocks = 0;
    ~Count() { stats.blocks += blocks, stats.seconds += timer.Seconds(); }
  } count{store_.seal_stats_, timer};
  for (size_t b = 0; b < n_full; ++b) {
    const uint16_t* sk = nat_k + b * kBlockTokens * kv_dim;
    const uint16_t* sv = nat_v + b * kBlockTokens * kv_dim;
    for (size_t i = 0; i < kBlockTokens * kv_dim; ++i) {
      store_.seal_k_[i] = F16ToF32(sk[i]);
      store_.seal_v_[i] = F16ToF32(sv[i]);
    }
    const size_t index = sealed_blocks(layer);
    BlockInfo info{.seq_id = id_, .layer = layer, .block_index = index, .first_pos = index * kBlockTokens,
                   .k = store_.seal_k_.data(), .v = store_.seal_v_.data(), .kv_dim = kv_dim};
    const BlockFormats f = store_.policy_->FormatFor(info);
    Status st = CheckKvFormat(f.k, KvSide::kKey, g);
    if (st.ok()) st = CheckKvFormat(f.v, KvSide::kValue, g);
    const size_t kb = st.ok() ? KvBlockBytes(f.k, KvSide::kKey, g) : 0;
    const size_t vb = st.ok() ? KvBlockBytes(f.v, KvSide::kValue, g) : 0;
    if (st.ok()) st = store_.CheckRoom(pool.AllocationCost(kb, vb), "a sealed block");  // the pool counts itself
    if (st.ok() && ++store_.block_allocations_ == store_.options_.fail_block_allocation)
      st = Status::Error("KV budget exhausted: block allocation #{} fails (injected for testing)",
                         store_.options_.fail_block_allocation);
    if (st.ok()) {
      Result<BlockId> id = pool.Allocate(f.k, kb, f.v, vb);
      if (!id.ok()) {
        st = id.status();
      } else {
        tables_[layer].push_back(*id);  // reserved: no reallocation
        store_.NoteHeld();
        if (store_.defer_seals_) {
          store_.pending_.push_back({*id, f, sk, sv});
        } else {
          st = EncodeKvBlock(f.k, KvSide::kKey, g, store_.seal_k_.data(), pool.mutable_k(*id), f.k_params);
          if (st.ok())
            st = EncodeKvBlock(f.v, KvSide::kValue, g, store_.seal_v_.data(), pool.mutable_v(*id), f.v_params);
        }
      }
    }
    if (!st.ok()) {
      store_.policy_->Unseal(info, f);  // the policy counted this block when it chose its formats
      if (sealed_blocks(layer) > index) {
        pool.Unref(tables_[layer].back());
        tables_[layer].pop_back();
      }
      return st;  // blocks sealed before this one stay until Rollback (the undo has the layer)
    }
    ++count.blocks;
  }
  return Status::Ok();
}

Status KvSequence::Append(size_t layer, size_t n, const float* k, const float* v, bool defer) {
  if (size_ + n > capacity_)
    return Status::Error("context overflow: {} cached + {} new tokens exceed the context of {} tokens", size_, n,
                         capacity_);
  Undo& u = undo_[layer];
  if (u.active) return Status::Error("KV layer {} appended twice in one batch (Commit or Rollback first)", layer);
  const KvStoreOptions& o = store_.options_;
  const size_t kv_dim = o.shape.kv_dim(), H = o.shape.n_head_kv, hd = o.shape.head_dim;
  const WindowFormat wf = o.window;
  const size_t rb = WindowRowBytes(wf, H, hd);
  const size_t base = sealed_blocks(layer) * kBlockTokens;  // index of the first native row
  const size_t w = size_ - base;                             // tokens in the window before this batch
  const size_t rows = w + n;
  // Native rows [base, size_ + n): the window, then the new tokens rounded through the window's
  // format (fp16, or q8 then fp16), so every reader sees what the window will hold. Exactly the
  // rows in use: a finished prefill's rows are given back. Nothing of the layer has changed if
  // this fails.
  CHORUS_RETURN_IF_ERROR(Fit(nat_k_, rows * kv_dim, "the batch's native key rows"));
  CHORUS_RETURN_IF_ERROR(Fit(nat_v_, rows * kv_dim, "the batch's native value rows"));
  uint16_t *nk = nat_k_.data() + w * kv_dim, *nv = nat_v_.data() + w * kv_dim;
  // The same below: the seals, and the window's size (its tokens rounded up to kWindowGranule).
  const size_t n_full = rows / kBlockTokens;
  const size_t tail = rows - n_full * kBlockTokens;
  const size_t cap = (tail + kWindowGranule - 1) / kWindowGranule * kWindowGranule * rb;
  if (defer && n_full == 0 && win_k_[layer].size() == cap && win_v_[layer].size() == cap) {
    // In place: rows [0, w) stay as they are (Rollback has nothing to restore); FinishAppend stores
    // the new rows after them and decodes rows [0, w) into the native rows.
    nat_base_ = base;
    u.active = true;
    u.table_size = tables_[layer].size();
    u.decode_deferred = true;
    u.decode_rows = static_cast<uint32_t>(w);
    return Status::Ok();
  }
  if (wf != WindowFormat::kF16) {
    CHORUS_RETURN_IF_ERROR(Fit(natw_k_, rows * rb, "the batch's stored key rows"));
    CHORUS_RETURN_IF_ERROR(Fit(natw_v_, rows * rb, "the batch's stored value rows"));
  }
  DecodeWindowRows(wf, H, hd, win_k_[layer].data(), w, nat_k_.data());
  DecodeWindowRows(wf, H, hd, win_v_[layer].data(), w, nat_v_.data());
  const uint8_t *stored_k = reinterpret_cast<const uint8_t*>(nat_k_.data()),
                *stored_v = reinterpret_cast<const uint8_t*>(nat_v_.data());
  if (wf == WindowFormat::kF16) {
    EncodeWindowRows(wf, H, hd, k, n, reinterpret_cast<uint8_t*>(nk), nk);
    EncodeWindowRows(wf, H, hd, v, n, reinterpret_cast<uint8_t*>(nv), nv);
  } else {
    std::copy_n(win_k_[layer].data(), w * rb, natw_k_.data());
    std::copy_n(win_v_[layer].data(), w * rb, natw_v_.data());
    EncodeWindowRows(wf, H, hd, k, n, natw_k_.data() + w * rb, nk);
    EncodeWindowRows(wf, H, hd, v, n, natw_v_.data() + w * rb, nv);
    stored_k = natw_k_.data();
    stored_v = natw_v_.data();
  }
  nat_base_ = base;
  // From here the layer changes: Rollback restores it from what the undo records.
  u.active = true;
  u.table_size = tables_[layer].size();
  // Seal every block that is now complete. The window holds its tokens rounded up to
  // kWindowGranule: it grows while a block fills and shrinks when the block is sealed, so an
  // agent's native window costs what it holds (measured bytes), not a whole block, and reallocates
  // at most once per kWindowGranule tokens.
  if (n_full > 0) {
    // A seal replaces the window: its old rows are kept for Rollback until Commit (a decode step's
    // new window is empty, so this costs nothing more than the window already held).
    u.window_moved = true;
    u.k = std::move(win_k_[layer]);
    u.v = std::move(win_v_[layer]);
    win_k_[layer] = AlignedBuffer<uint8_t>();
    win_v_[layer] = AlignedBuffer<uint8_t>();
  }
  // Without a seal the window keeps rows [0, w) as they were: an in-place append, or a regrown
  // buffer rewritten from the batch's stored rows (which hold them) — Rollback has nothing to restore.
  Status st = n_full > 0 ? Seal(layer, n_full, nat_k_.data(), nat_v_.data()) : Status::Ok();
  if (st.ok()) st = Fit(win_k_[layer], cap, "the key window");
  if (st.ok()) st = Fit(win_v_[layer], cap, "the value window");
  if (!st.ok()) {
    // A regrown window (no seal) lost its contents: its rows [0, w) are the batch's stored rows.
    if (n_full == 0 && win_k_[layer].size() == cap) std::copy_n(stored_k, w * rb, win_k_[layer].data());
    RollbackLayer(layer);  // this layer as it was; earlier layers wait for Rollback
    return st;
  }
  std::copy_n(stored_k + n_full * kBlockTokens * rb, tail * rb, win_k_[layer].data());
  std::copy_n(stored_v + n_full * kBlockTokens * rb, tail * rb, win_v_[layer].data());
  if (!defer) SetViews(layer);
  return Status::Ok();
}

void KvSequence::FinishAppend(size_t layer, size_t n, const float* k, const float* v) {
  Undo& u = undo_[layer];
  if (u.decode_deferred) {
    const KvStoreOptions& o = store_.options_;
    const size_t H = o.shape.n_head_kv, hd = o.shape.head_dim, kv_dim = o.shape.kv_dim(), w = u.decode_rows;
    const size_t rb = WindowRowBytes(o.window, H, hd);
    EncodeWindowRows(o.window, H, hd, k, n, win_k_[layer].data() + w * rb, nat_k_.data() + w * kv_dim);
    EncodeWindowRows(o.window, H, hd, v, n, win_v_[layer].data() + w * rb, nat_v_.data() + w * kv_dim);
    DecodeWindowRows(o.window, H, hd, win_k_[layer].data(), w, nat_k_.data());
    DecodeWindowRows(o.window, H, hd, win_v_[layer].data(), w, nat_v_.data());
    u.decode_deferred = false;
  }
  SetViews(layer);
}

// Views of a layer's live blocks, for the attention that follows: built by Append or FinishAppend,
// before the attention's threads read them.
void KvSequence::SetViews(size_t layer) {
  const BlockPool& bp = store_.pool_;
  views_.clear();
  views_first_ = dropped_[layer];
  views_window_ = Window(layer);
  views_rope_ = layer < store_.options_.layer_rope.size() ? &store_.options_.layer_rope[layer] : nullptr;
  for (BlockId id : tables_[layer]) {
    const BlockMeta& m = bp.meta(id);
    views_.push_back({bp.k_data(id), bp.v_data(id), m.k_format, m.v_format});
  }
  for (const Run& u : runs_)
    for (size_t j = std::max(u.first, views_first_); j < u.first + u.blocks; ++j) {
      BlockView& bv = views_[j - views_first_];
      bv.shift = u.shift;
      if (j == u.first) bv.skip = static_cast<uint8_t>(u.skip);
    }
}

namespace {

// Folds the blocks [from, to) of a table whose block i starts at position base + 32·i and whose
// live views begin at block `first`, restricted to `r` (a block partly before r.lo is masked).
void FoldBlocks(BlockAttention& att, std::span<const BlockView> views, size_t first, size_t base, size_t from,
                size_t to, uint32_t kv_head, size_t q0, size_t nq, const SegmentRange& r, const KeyRope* rope) {
  auto start = [&](size_t i) { return base + i * kBlockTokens; };
  if (r.lo > base) from = std::max(from, (r.lo - base) / kBlockTokens);  // blocks ending after lo
  if (r.begin > base) from = std::max(from, (r.begin - base + kBlockTokens - 1) / kBlockTokens);
  if (r.end <= base) return;
  if (r.end != SIZE_MAX) to = std::min(to, (r.end - base + kBlockTokens - 1) / kBlockTokens);
  if (from >= to) return;
  CHORUS_CHECK(from >= first);  // a window never reaches a freed block (FreeOutOfWindow)
  const size_t skip = r.lo > start(from) ? r.lo - start(from) : 0;
  att.AddBlocks(views.subspan(from - first, to - from), kv_head, q0, nq, skip, rope);
}

}  // namespace

void KvSequence::AddOwnBlocks(BlockAttention& att, uint32_t kv_head, size_t q0, size_t nq, size_t to_block,
                              const SegmentRange& range) const {
  FoldBlocks(att, views_, views_first_, 0, 0, to_block, kv_head, q0, nq, range, views_rope_);
}

void KvSequence::AddOwn(BlockAttention& att, size_t t, uint32_t kv_head, size_t q0, size_t nq,
                        size_t from_block, size_t part_begin, size_t part_end) const {
  const size_t kv_dim = store_.options_.shape.kv_dim(), hd = store_.options_.shape.head_dim;
  const size_t p = size_ + t;  // the token's row (its position plus the hole rows before it)
  const size_t nb = p / kBlockTokens;
  const size_t lo = WindowEdge(views_window_, p);
  FoldBlocks(att, views_, views_first_, 0, from_block, nb, kv_head, q0, nq,
             SegmentRange{.lo = lo, .begin = part_begin, .end = part_end}, views_rope_);
  const size_t row_pos = nb * kBlockTokens;  // the native rows of p's block
  if (row_pos < part_begin || row_pos >= part_end) return;
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
  if (Status s = store_.PrepareScratch(std::max(1, pool.size())); !s.ok()) {
    RollbackLayer(layer);
    return s;
  }
  const BatchRows rows{this, 0, n};
  AttendRows(store_, layer, std::span<const BatchRows>(&rows, 1), q, out, pool);
  return Status::Ok();
}

}  // namespace chorus
