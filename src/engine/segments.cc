// Segments: finding cached runs of a prompt at other offsets and planning their repair (segments.h).
#include "engine/segments.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <utility>

namespace chorus {

SegmentPlan::SegmentPlan(BlockPool* pool, std::vector<SegmentRun> runs) : pool_(pool), runs_(std::move(runs)) {
  for (const SegmentRun& r : runs_)
    for (const auto& t : r.tables)
      for (BlockId id : t) pool_->Ref(id);
}

SegmentPlan& SegmentPlan::operator=(SegmentPlan&& o) noexcept {
  if (this != &o) {
    Clear();
    pool_ = o.pool_;
    runs_ = std::move(o.runs_);
    next_ = o.next_;
    o.runs_.clear();
    o.next_ = 0;
  }
  return *this;
}

void SegmentPlan::Unref(size_t i) {
  for (auto& t : runs_[i].tables) {
    for (BlockId id : t) pool_->Unref(id);
    t.clear();
  }
}

void SegmentPlan::Advance() {
  Unref(next_);
  ++next_;
}

void SegmentPlan::Clear() {
  for (; next_ < runs_.size(); ++next_) Unref(next_);
}

size_t SegmentPlan::hole_allowance() const { return runs_.size() * kBlockTokens; }

size_t SegmentPlan::blocks() const {
  size_t n = 0;
  for (size_t i = next_; i < runs_.size(); ++i) n += runs_[i].tables.empty() ? 0 : runs_[i].tables[0].size();
  return n;
}

size_t SegmentPlan::reused_tokens() const {
  size_t n = 0;
  for (const SegmentRun& r : runs_) n += r.tokens;
  return n;
}

size_t SegmentPlan::repaired_tokens() const {
  size_t n = 0;
  for (const SegmentRun& r : runs_) n += r.repaired;
  return n;
}

namespace {

uint64_t WindowKey(std::span<const int32_t> prompt, size_t w, uint64_t salt) {
  return PrefixCache::ContentKey(prompt.subspan(w, kBlockTokens), salt);
}

bool AllLive(const std::vector<BlockId>& ids) {
  return std::none_of(ids.begin(), ids.end(), [](BlockId id) { return id == kNoBlock; });
}

// A run found by content: consecutive blocks of one source, at consecutive positions there.
struct Found {
  size_t first_pos = 0;
  std::vector<const std::vector<BlockId>*> blocks;
  std::vector<uint64_t> keys;
};

}  // namespace

SegmentPlan PlanSegments(std::span<const int32_t> prompt, size_t from, uint64_t parent, const PrefixCache& cache,
                         BlockPool& pool, uint64_t salt, uint64_t public_salt, size_t n_layer,
                         const SegmentRepair& repair) {
  std::vector<SegmentRun> runs;
  const size_t end = prompt.empty() ? 0 : prompt.size() - 1;  // the last token is always computed
  size_t holes = 0;  // hole rows of the runs planned so far: the sequence's rows are positions + holes
  // The continuation: block by block, the one whose tokens (after its hole) come next in the prompt.
  size_t w = from;
  for (uint64_t key = parent;;) {
    std::optional<PrefixCache::ContinuationHit> hit;
    size_t skip = 0, n = 0;
    uint64_t next = 0;
    for (; skip < kBlockTokens && !hit; ++skip) {
      n = kBlockTokens - skip;
      if (w + n > end) continue;
      next = PrefixCache::ContinuationKey(key, prompt.subspan(w, n), skip, salt);
      hit = cache.FindContinuation(next);
      if (hit && (hit->skip != skip || !AllLive(*hit->ids))) hit.reset();
    }
    if (!hit) break;
    --skip;
    SegmentRun* r = runs.empty() ? nullptr : &runs.back();
    if (!r || skip != 0 || hit->shift != r->shift) {
      runs.push_back({.at = w, .shift = hit->shift, .skip = skip});
      r = &runs.back();
      r->tables.assign(n_layer, {});
    }
    for (size_t l = 0; l < n_layer; ++l) r->tables[l].push_back((*hit->ids)[l]);
    r->tokens += n;
    r->keys.push_back(next);
    r->sources.push_back(0);
    holes += skip;
    w += n;
    key = next;
  }
  // Content runs. A span is text reused without a break: a run, and the runs that start within a
  // block of where the previous one ends (the same document, its blocks from other sources: only
  // the gap and the alignment are recomputed there). Each span's repair is its fraction of the
  // whole span, taken from its head, across runs if the first is shorter.
  const auto run_at = [&](size_t at) {
    Found f;
    uint64_t s = salt;  // the run's scope: its own, else the public one
    auto hit = cache.FindContent(WindowKey(prompt, at, s));
    if (!hit && public_salt != salt) hit = cache.FindContent(WindowKey(prompt, at, s = public_salt));
    if (!hit || !AllLive(*hit->ids)) return f;
    f.first_pos = hit->first_pos;
    f.blocks = {hit->ids};
    f.keys = {hit->key};
    while (at + (f.blocks.size() + 1) * kBlockTokens <= end) {
      // The source's own next block first (its chain), else whatever block the content names.
      const auto window = prompt.subspan(at + f.blocks.size() * kBlockTokens, kBlockTokens);
      const uint64_t chained = PrefixCache::ChainKey(f.keys.back(), window, s);
      if (const std::vector<BlockId>* ids = cache.Blocks(chained); ids && AllLive(*ids)) {
        f.blocks.push_back(ids);
        f.keys.push_back(chained);
        continue;
      }
      const auto next = cache.FindContent(WindowKey(prompt, at + f.blocks.size() * kBlockTokens, s));
      if (!next || next->first_pos != hit->first_pos + f.blocks.size() * kBlockTokens || !AllLive(*next->ids)) break;
      f.blocks.push_back(next->ids);
      f.keys.push_back(next->key);
    }
    return f;
  };
  const auto next_run = [&](size_t after) {  // the first run starting in [after, after + 32), or none
    for (size_t at = after; at < after + kBlockTokens && at + kBlockTokens <= end; ++at)
      if (Found f = run_at(at); !f.blocks.empty()) return std::pair{at, std::move(f)};
    return std::pair{SIZE_MAX, Found{}};
  };
  size_t prev_end = runs.empty() ? SIZE_MAX : w;  // a continuation: what follows it continues its text
  size_t owed = 0;                                // repair tokens the current span still needs
  size_t mark = w;                                // where the tokens this request recomputes in the current span begin
  while (w + kBlockTokens <= end) {
    Found f = run_at(w);
    if (f.blocks.empty()) {
      ++w;
      continue;
    }
    const size_t m = f.blocks.size(), span = m * kBlockTokens;
    if (w >= prev_end && w - prev_end < kBlockTokens) {
      owed -= std::min(owed, w - prev_end);  // the gap is recomputed
    } else {
      mark = w;
      size_t whole = span;  // the span across the runs that continue it
      for (size_t e = w + span;;) {
        auto [at, g] = next_run(e);
        if (g.blocks.empty()) break;
        e = at + g.blocks.size() * kBlockTokens;
        whole = e - w;
      }
      owed = std::max(repair.min_tokens, size_t(std::ceil(repair.fraction * double(whole))));
    }
    // Attach where the rows reach a block boundary at or past the repaired head: rows there are
    // w + 32·i + skip + holes, so skip is fixed by the alignment and i by the repair.
    const size_t skip = (kBlockTokens - (w + holes) % kBlockTokens) % kBlockTokens;
    const size_t first = owed <= skip ? 0 : (owed - skip + kBlockTokens - 1) / kBlockTokens;
    if (first < m) {
      SegmentRun r{.at = w + first * kBlockTokens + skip,
                   .tokens = (m - first) * kBlockTokens - skip,
                   .repaired = w + first * kBlockTokens + skip - mark,
                   .shift = static_cast<int32_t>(int64_t(w) - int64_t(f.first_pos)),
                   .skip = skip};
      r.tables.assign(n_layer, {});
      for (size_t j = first; j < m; ++j) {
        for (size_t l = 0; l < n_layer; ++l) r.tables[l].push_back((*f.blocks[j])[l]);
        r.keys.push_back(f.keys[j]);
        r.sources.push_back(f.keys[j]);
      }
      holes += skip;
      runs.push_back(std::move(r));
      owed = 0;
      mark = w + span;
    } else {
      owed -= std::min(owed, span);  // all of this run is recomputed: the repair goes on into the next
    }
    prev_end = w + span;
    w += span;
  }
  return SegmentPlan(&pool, std::move(runs));
}

bool AnyContentPending(std::span<const int32_t> prompt, size_t from, const PrefixCache& cache, uint64_t content_salt) {
  const size_t end = prompt.empty() ? 0 : prompt.size() - 1;
  for (size_t w = from; w + kBlockTokens <= end; ++w)
    if (cache.IsContentPending(WindowKey(prompt, w, content_salt))) return true;
  return false;
}

}  // namespace chorus
