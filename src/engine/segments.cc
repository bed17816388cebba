// Segments: finding cached runs of a prompt at other offsets and planning their repair (segments.h).
#include "engine/segments.h"

#include <algorithm>
#include <cmath>

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

}  // namespace

SegmentPlan PlanSegments(std::span<const int32_t> prompt, size_t from, const PrefixCache& cache, BlockPool& pool,
                         uint64_t content_salt, size_t n_layer, const SegmentRepair& repair) {
  std::vector<SegmentRun> runs;
  const size_t end = prompt.empty() ? 0 : prompt.size() - 1;  // the last token is always computed
  size_t holes = 0;  // hole rows of the runs planned so far: the sequence's rows are positions + holes
  for (size_t w = from; w + kBlockTokens <= end;) {
    const auto hit = cache.FindContent(WindowKey(prompt, w, content_salt));
    if (!hit || !AllLive(*hit->ids)) {
      ++w;
      continue;
    }
    // The run: consecutive blocks of the same source, at consecutive positions there.
    std::vector<const std::vector<BlockId>*> blocks = {hit->ids};
    std::vector<uint64_t> keys = {hit->key};
    while (w + (blocks.size() + 1) * kBlockTokens <= end) {
      const auto next = cache.FindContent(WindowKey(prompt, w + blocks.size() * kBlockTokens, content_salt));
      if (!next || next->first_pos != hit->first_pos + blocks.size() * kBlockTokens || !AllLive(*next->ids)) break;
      blocks.push_back(next->ids);
      keys.push_back(next->key);
    }
    const size_t m = blocks.size(), span = m * kBlockTokens;
    // Attach where the rows reach a block boundary at or past the repaired head: rows there are
    // w + 32·i + skip + holes, so skip is fixed by the alignment and i by the repair.
    const size_t want = std::max(repair.min_tokens, size_t(std::ceil(repair.fraction * double(span))));
    const size_t skip = (kBlockTokens - (w + holes) % kBlockTokens) % kBlockTokens;
    const size_t first = want <= skip ? 0 : (want - skip + kBlockTokens - 1) / kBlockTokens;
    if (first < m) {
      SegmentRun r{.at = w + first * kBlockTokens + skip,
                   .tokens = (m - first) * kBlockTokens - skip,
                   .repaired = first * kBlockTokens + skip,
                   .shift = static_cast<int32_t>(int64_t(w) - int64_t(hit->first_pos)),
                   .skip = skip};
      r.tables.assign(n_layer, {});
      for (size_t j = first; j < m; ++j) {
        for (size_t l = 0; l < n_layer; ++l) r.tables[l].push_back((*blocks[j])[l]);
        r.keys.push_back(keys[j]);
      }
      holes += skip;
      runs.push_back(std::move(r));
    }
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
