// ComixPolicy: units, online statistics, budget projection and the allocation in force.
#include "policy/comix_policy.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "kv/block_pool.h"  // BlockPool::BlockCost

namespace chorus {
namespace {

constexpr size_t kMaxEvents = 4096;
constexpr int kCurveBits[] = {2, 3, 4, 8};  // an average-bits target is interpolated between these
constexpr double kRelevanceLevels = 8;      // relevance is grouped into eighths (one run per level change)

size_t SideBytesOf(const ComixOptions& o, int bits, KvSide side) {
  return KvBlockBytes(ComixFormat(o.family, bits), side, {uint32_t(o.n_head_kv), uint32_t(o.head_dim)});
}
size_t BlockBytesOf(const ComixOptions& o, int k_bits, int v_bits) {
  return BlockPool::BlockCost(SideBytesOf(o, k_bits, KvSide::kKey), SideBytesOf(o, v_bits, KvSide::kValue));
}
// Bytes of one block at the uniform `avg` bits, interpolated between the 2/3/4/q8 block costs.
double TargetBlockBytes(const ComixOptions& o, double avg) {
  for (size_t i = 0; i + 1 < std::size(kCurveBits); ++i) {
    const int b0 = kCurveBits[i], b1 = kCurveBits[i + 1];
    if (avg <= b1 || i + 2 == std::size(kCurveBits)) {
      const double t = (avg - b0) / double(b1 - b0);
      return (1 - t) * double(BlockBytesOf(o, b0, b0)) + t * double(BlockBytesOf(o, b1, b1));
    }
  }
  return 0;
}
// The smallest average-bits target whose uniform block costs at least `bytes` (bisection on the curve).
double AvgBitsFor(const ComixOptions& o, double bytes) {
  double lo = 2, hi = 8;
  for (int i = 0; i < 60; ++i) (TargetBlockBytes(o, (lo + hi) / 2) < bytes ? lo : hi) = (lo + hi) / 2;
  return hi;
}
std::string TierList(const std::vector<int>& t) {
  std::string s;
  for (int b : t) s += fmt::format("{}{}", s.empty() ? "" : ",", b);
  return s;
}

}  // namespace

std::vector<int> ComixPolicy::SideTiersOf(const ComixOptions& o, KvSide side) {
  std::vector<int> t;
  for (int b : o.tiers)
    if (side == KvSide::kValue || b >= o.min_k_bits) t.push_back(b);
  return t;
}

size_t ComixPolicy::RunOf(const Unit& u, size_t block) const {
  return size_t(std::upper_bound(u.run_start.begin(), u.run_start.end(), block) - u.run_start.begin()) - 1;
}

size_t ComixPolicy::RunLeft(const Unit& u, size_t run, size_t done) const {
  const size_t end = run + 1 < u.run_start.size() ? u.run_start[run + 1] : BlocksTotal(u);
  const size_t begin = std::max(u.run_start[run], done);
  return end > begin ? end - begin : 0;
}

KvStoreOptions ComixPolicy::StoreOptions(const ComixOptions& o) {
  return KvStoreOptions{.n_layer = o.n_layer,
                        .shape = {.n_head = o.n_head, .n_head_kv = o.n_head_kv, .head_dim = o.head_dim},
                        .budget_bytes = o.budget_bytes, .window = o.window, .threads = o.threads};
}

ComixPolicy::ComixPolicy(const ComixOptions& options) : options_(options), footprint_(StoreOptions(options)) {
  // Items price K and V sides separately; a block's payload is their sum rounded up to 64 bytes.
  for (int kb : {2, 3, 4, 16})
    for (int vb : {2, 3, 4, 16}) {
      const size_t k = kb == 16 ? KvBlockBytes(KvFormat::kF16, KvSide::kKey, {uint32_t(options.n_head_kv), uint32_t(options.head_dim)}) : SideBytes(kb, KvSide::kKey);
      const size_t v = vb == 16 ? KvBlockBytes(KvFormat::kF16, KvSide::kValue, {uint32_t(options.n_head_kv), uint32_t(options.head_dim)}) : SideBytes(vb, KvSide::kValue);
      block_round_ = std::max(block_round_, BlockPool::BlockCost(k, v) - (k + v));
    }
}

size_t ComixPolicy::SideBytes(int bits, KvSide side) const { return SideBytesOf(options_, bits, side); }

size_t ComixPolicy::BlockBytes(int k_bits, int v_bits) const { return BlockBytesOf(options_, k_bits, v_bits); }

size_t ComixPolicy::MinimumBudget(const ComixOptions& o) {
  const KvFootprint fp(StoreOptions(o));
  const std::vector<int> kt = SideTiersOf(o, KvSide::kKey), vt = SideTiersOf(o, KvSide::kValue);
  const KvFormat fk = ComixFormat(o.family, kt.empty() ? 2 : kt[0]), fv = ComixFormat(o.family, vt.empty() ? 2 : vt[0]);
  return fp.Overhead(o.threads) + fp.PrefillExtra(o.prefill_tokens) + BlockPool().SlackAllowance() +
         fp.Decoding(kBlockTokens) + o.n_layer * fp.Block(fk, fv);
}

Status ComixPolicy::Validate(const ComixOptions& o) {
  if (o.n_layer == 0 || o.head_dim == 0 || o.n_head_kv == 0) return Status::Error("comix: empty model geometry");
  if (o.tiers.empty() || o.tiers.size() > kComixMaxChoices)
    return Status::Error("comix tiers '{}': give 1 to {} bit widths of 2, 3, 4, 8", TierList(o.tiers), kComixMaxChoices);
  for (size_t i = 0; i < o.tiers.size(); ++i) {
    const int b = o.tiers[i];
    if (b != 2 && b != 3 && b != 4 && b != 8)
      return Status::Error("comix tiers '{}': {} is not a tier (valid: 2, 3, 4, 8 = q8)", TierList(o.tiers), b);
    if (i > 0 && b <= o.tiers[i - 1])
      return Status::Error("comix tiers '{}' must be ascending without repeats", TierList(o.tiers));
  }
  if (o.min_k_bits != 0 && o.min_k_bits != 2 && o.min_k_bits != 3 && o.min_k_bits != 4 && o.min_k_bits != 8)
    return Status::Error("comix key floor {} bits is not a tier (valid: 0 = none, 2, 3, 4, 8)", o.min_k_bits);
  if (SideTiersOf(o, KvSide::kKey).empty())
    return Status::Error("comix key floor {} bits is above every tier ({})", o.min_k_bits, TierList(o.tiers));
  if (!o.split_kv && o.min_k_bits > o.tiers[0])
    return Status::Error("comix joint K/V widths need the same tiers for keys and values (key floor {} > tier {})",
                         o.min_k_bits, o.tiers[0]);
  if (!(o.relevance_gain >= 0 && o.relevance_gain <= 1000))
    return Status::Error("relevance gain must be in [0, 1000], got {}", o.relevance_gain);
  if (o.measured) {
    CHORUS_RETURN_IF_ERROR(o.measured->Check());
    if (o.measured->n_layer != o.n_layer)
      return Status::Error("sensitivity table of {} layers for a model of {} layers", o.measured->n_layer, o.n_layer);
    if (o.measured->family != o.family)
      return Status::Error("sensitivity table measured for another format family (kivi vs tq)");
    for (int b : o.tiers)
      if (!o.measured->HasWidth(b))
        return Status::Error("sensitivity table has no {}-bit column (measure it with `eval sensitivity --comix-tiers`)", b);
  }
  if (o.budget_bytes == 0 && !(o.avg_bits >= 2 && o.avg_bits <= 8))
    return Status::Error("average bits must be between 2 and 8 (2, 3, 4: kivi/tq codes; up to 8: q8), got {}",
                         o.avg_bits);
  if (o.budget_bytes == 0) {
    const int kmin = SideTiersOf(o, KvSide::kKey)[0], vmin = SideTiersOf(o, KvSide::kValue)[0];
    const double cheapest = double(BlockBytesOf(o, kmin, vmin)), target = TargetBlockBytes(o, o.avg_bits);
    if (cheapest > target + 1e-9)
      return Status::Error(
          "average bits {} is below the cheapest tiers' cost: a block with keys at {} bits and values "
          "at {} bits takes {} bytes, a uniform {}-bit block {:.0f}; the minimum for tiers {} (key "
          "floor {}) is {:.3f} average bits",
          o.avg_bits, kmin, vmin, size_t(cheapest), o.avg_bits, target, TierList(o.tiers), o.min_k_bits,
          AvgBitsFor(o, cheapest));
  }
  if (o.budget_bytes != 0 && o.budget_bytes < MinimumBudget(o))
    return Status::Error("--kv-budget {} bytes is below this model's minimum of {} bytes (the KV store's scratch "
                         "and one prefill's rows, and one sequence of one 32-token block per layer at the cheapest tiers (keys "
                         "{} bits, values {} bits) with its native window, {} layers)",
                         o.budget_bytes, MinimumBudget(o), SideTiersOf(o, KvSide::kKey)[0],
                         SideTiersOf(o, KvSide::kValue)[0], o.n_layer);
  return Status::Ok();
}

size_t ComixPolicy::SinkBlocks(const Unit& u) const {
  const size_t sink_end = options_.sink_blocks * kBlockTokens;
  if (u.first_pos >= sink_end) return 0;
  return std::min(BlocksTotal(u), (sink_end - u.first_pos + kBlockTokens - 1) / kBlockTokens);
}

size_t ComixPolicy::Reserve(const Unit& u) const { return footprint_.Decoding(u.capacity); }

size_t ComixPolicy::FixedBytes() const {
  const size_t meta = BlockPool::BlockCost(0, 0) + block_round_;  // per future block: its slot, its rounding at worst
  const size_t f16 = footprint_.Block(KvFormat::kF16, KvFormat::kF16);
  // Sealed blocks: the units' own, or — when blocks outlive their unit (a finished request's
  // prompt blocks kept by the engine's prefix cache, a Cocktail context's) — every live block of
  // the store as measured, whichever is more.
  size_t sealed = committed_;
  if (store_) sealed = std::max(sealed, store_->pool().payload_bytes() + store_->pool().live_blocks() * BlockPool::BlockCost(0, 0));
  size_t fixed = sealed + footprint_.Overhead(options_.threads) + footprint_.PrefillExtra(options_.prefill_tokens) +
                 (store_ ? store_->pool().SlackAllowance() : BlockPool().SlackAllowance());
  for (const auto& [id, u] : units_) {
    fixed += Reserve(u);
    const size_t sinks = SinkBlocks(u), total = BlocksTotal(u);
    for (const Layer& l : u.layers) {
      const size_t sink_left = l.sealed < sinks ? sinks - l.sealed : 0;
      const size_t left = total > l.sealed ? total - l.sealed : 0;
      fixed += sink_left * f16 + (left - sink_left) * meta;
    }
  }
  return fixed;
}

int64_t ComixPolicy::Capacity() const {
  if (options_.budget_bytes != 0) return int64_t(options_.budget_bytes) - int64_t(FixedBytes());
  // Average-bits target: non-sink blocks may cost what they would at uniform avg_bits.
  const double target_block = TargetBlockBytes(options_, options_.avg_bits);
  const size_t meta = BlockPool::BlockCost(0, 0);  // the slot of each future block, as target_block has
  double target = 0;
  size_t used = committed_nonsink_;
  for (const auto& [id, u] : units_) {
    const size_t sinks = SinkBlocks(u), total = BlocksTotal(u);
    target += double(options_.n_layer * (total - sinks)) * target_block;
    for (const Layer& l : u.layers) {
      const size_t left = total > std::max(l.sealed, sinks) ? total - std::max(l.sealed, sinks) : 0;
      used += left * meta;
    }
  }
  return int64_t(target) - int64_t(used);
}

size_t ComixPolicy::ProjectedBytes() const {
  size_t future = 0;
  for (const auto& [id, u] : units_) {
    const size_t sinks = SinkBlocks(u), total = BlocksTotal(u);
    (void)total;
    for (const Layer& l : u.layers) {
      const size_t done = std::max(l.sealed, sinks);
      for (size_t r = 0; r < u.run_start.size(); ++r)
        future += RunLeft(u, r, done) * (SideBytes(l.k_bits[r], KvSide::kKey) + SideBytes(l.v_bits[r], KvSide::kValue));
    }
  }
  return FixedBytes() + future;
}

size_t ComixPolicy::ProjectedMinimum() const {
  size_t future = 0;
  const size_t k2 = SideBytes(SideTiers(KvSide::kKey)[0], KvSide::kKey),
               v2 = SideBytes(SideTiers(KvSide::kValue)[0], KvSide::kValue);
  for (const auto& [id, u] : units_) {
    const size_t sinks = SinkBlocks(u), total = BlocksTotal(u);
    for (const Layer& l : u.layers) {
      const size_t done = std::max(l.sealed, sinks);
      future += (total > done ? total - done : 0) * (k2 + v2);
    }
  }
  return future;
}

Status ComixPolicy::AddUnit(uint64_t seq_id, size_t capacity, size_t first_pos, double weight, std::string label,
                            std::span<const float> block_relevance) {
  if (units_.count(seq_id)) return Status::Error("comix: sequence {} is already registered", seq_id);
  Unit u;
  u.label = std::move(label);
  u.weight = weight;
  u.capacity = capacity;
  u.first_pos = first_pos;
  if (!block_relevance.empty() && options_.relevance_gain > 0) {  // gain 0: one run, CoMix exactly
    float lo = block_relevance[0], hi = block_relevance[0];
    for (float r : block_relevance) {
      if (!std::isfinite(r)) return Status::Error("comix: unit '{}' has a non-finite block relevance", u.label);
      lo = std::min(lo, r), hi = std::max(hi, r);
    }
    u.run_start.clear(), u.run_rel.clear();
    for (size_t b = 0; b < std::min(block_relevance.size(), BlocksTotal(u)); ++b) {
      const double r = hi > lo ? double(block_relevance[b] - lo) / double(hi - lo) : 0.0;
      const double level = std::round(r * kRelevanceLevels) / kRelevanceLevels;
      if (u.run_rel.empty() || level != u.run_rel.back()) u.run_start.push_back(b), u.run_rel.push_back(level);
    }
    if (u.run_start.empty()) u.run_start = {0}, u.run_rel = {0};
  }
  const std::vector<int> kt = SideTiers(KvSide::kKey), vt = SideTiers(KvSide::kValue);
  u.layers.resize(options_.n_layer);
  for (Layer& l : u.layers) {
    l.cur.assign(options_.n_head_kv, HeadStats(options_.head_dim));
    l.prev = l.cur;
    l.k_bits.assign(u.run_start.size(), kt[0]);
    l.v_bits.assign(u.run_start.size(), vt[0]);
  }
  const std::string name = u.label;
  units_.emplace(seq_id, std::move(u));
  const size_t need = ProjectedMinimum();
  const int64_t cap = Capacity();
  if (int64_t(need) > cap) {
    units_.erase(seq_id);
    const size_t budget = options_.budget_bytes;
    return Status::Error("refused: even with every future block at the cheapest tiers the KV would need {} more bytes than "
                         "the {}-byte budget allows (held: {} bytes of blocks + a native window and block table per "
                         "resident sequence; {} sequences resident)",
                         int64_t(need) - cap, budget, committed_, units_.size());
  }
  return Reallocate("join " + name);
}

void ComixPolicy::RemoveUnit(uint64_t seq_id) {
  auto it = units_.find(seq_id);
  if (it == units_.end()) return;
  committed_ -= it->second.committed;
  committed_nonsink_ -= it->second.committed_nonsink;
  const std::string name = it->second.label;
  units_.erase(it);
  (void)Reallocate("finish " + name);  // removing a unit only frees bytes: always feasible
}

void ComixPolicy::SetWeight(uint64_t seq_id, double weight) {
  auto it = units_.find(seq_id);
  if (it == units_.end() || it->second.weight == weight) return;
  it->second.weight = weight;
  pending_ = true;
  pending_why_ = fmt::format("{} weight {}", it->second.label, weight);
}

Status ComixPolicy::Reallocate(const std::string& why) {
  const auto t0 = std::chrono::steady_clock::now();
  struct Ref {
    int* k;  // the run's key bits (nullptr: this item does not set keys)
    int* v;
  };
  std::vector<ComixItem> items;
  std::vector<Ref> refs;
  const std::vector<int> kt = SideTiers(KvSide::kKey), vt = SideTiers(KvSide::kValue);
  std::array<size_t, kComixMaxChoices> kb{}, vb{};
  for (size_t c = 0; c < kt.size(); ++c) kb[c] = SideBytes(kt[c], KvSide::kKey);
  for (size_t c = 0; c < vt.size(); ++c) vb[c] = SideBytes(vt[c], KvSide::kValue);
  const auto sens = [&](const HeadStats& st, KvSide side, int bits) {
    if (options_.worst_case) return SideBound(st, options_.family, side, bits);
    const double e = SideExpected(st, options_.family, side, bits);
    return options_.calibrated ? e * ComixCalibration(options_.family, side, bits) : e;
  };
  HeadStats merged(options_.head_dim);
  items.reserve(units_.size() * options_.n_layer * 2);
  refs.reserve(items.capacity());
  for (auto& [id, u] : units_) {
    const size_t sinks = SinkBlocks(u), total = BlocksTotal(u);
    const size_t runs = u.run_start.size();
    for (size_t li = 0; li < u.layers.size(); ++li) {
      Layer& l = u.layers[li];
      const size_t done = std::max(l.sealed, sinks);
      const size_t left = total > done ? total - done : 0;
      std::array<double, kComixMaxChoices> ke{}, ve{};  // the layer's sensitivity per tier (all of its blocks)
      if (left > 0 && options_.measured) {  // the measured end-to-end error of the side (no statistics needed)
        for (size_t c = 0; c < kt.size(); ++c) ke[c] = options_.measured->At(li, KvSide::kKey, kt[c]);
        for (size_t c = 0; c < vt.size(); ++c) ve[c] = options_.measured->At(li, KvSide::kValue, vt[c]);
      } else if (left > 0 && l.observed) {
        for (size_t h = 0; h < options_.n_head_kv; ++h) {
          merged = l.cur[h];
          merged.Merge(l.prev[h]);
          for (size_t c = 0; c < kt.size(); ++c) ke[c] += sens(merged, KvSide::kKey, kt[c]);
          for (size_t c = 0; c < vt.size(); ++c) ve[c] += sens(merged, KvSide::kValue, vt[c]);
        }
      }
      for (size_t r = 0; r < runs; ++r) {
        const size_t run_left = RunLeft(u, r, done);
        if (runs > 1 && run_left == 0) continue;  // a sealed run: nothing to decide
        // A run holds a share of the layer's blocks still to seal: its error is that share of the
        // layer's (one run: the whole; equal weights then rank every run as the whole layer),
        // weighted by readers and, for Cocktail, its relevance.
        const double share = runs == 1 ? 1.0 : double(run_left) / double(std::max<size_t>(1, left));
        const double rel = 1 + options_.relevance_gain * u.run_rel[r];
        ComixItem ki{.weight = u.weight * (options_.relevance_values_only ? 1.0 : rel), .blocks = run_left,
                     .bytes = kb, .choices = kt.size()};
        ComixItem vi{.weight = u.weight * rel, .blocks = run_left, .bytes = vb, .choices = vt.size()};
        for (size_t c = 0; c < kt.size(); ++c) ki.err[c] = share * ke[c];
        for (size_t c = 0; c < vt.size(); ++c) vi.err[c] = share * ve[c];
        if (options_.split_kv) {
          items.push_back(ki);
          refs.push_back({&l.k_bits[r], nullptr});
          items.push_back(vi);
          refs.push_back({nullptr, &l.v_bits[r]});
        } else {  // Validate: the same tiers for both sides
          for (size_t c = 0; c < kt.size(); ++c) ki.err[c] += vi.err[c], ki.bytes[c] += vi.bytes[c];
          items.push_back(ki);
          refs.push_back({&l.k_bits[r], &l.v_bits[r]});
        }
      }
    }
  }
  const int64_t headroom = Capacity();
  size_t cap = headroom > 0 ? size_t(headroom) : 0;
  if (options_.budget_bytes != 0 && options_.join_reserve > 0) {
    size_t cheapest = 0;
    for (const ComixItem& it : items) cheapest += it.blocks * it.bytes[0];
    if (cap > cheapest) cap = cheapest + size_t(double(cap - cheapest) * (1.0 - std::min(1.0, options_.join_reserve)));
  }
  ComixAllocation a = AllocateComix(items, cap);
  a.feasible = a.feasible && headroom >= 0;
  ComixEvent e{.why = why, .units = units_.size(), .projected = a.bytes, .capacity = cap};
  if (!a.feasible) {
    // Only the average-bits target can get here (a finished unit's allowance was already spent by
    // the others): every future block at its cheapest tier is the closest the target can still get.
    e.why += " (over the target: all future blocks at the cheapest tiers)";
    a.choice.assign(items.size(), 0);
  }
  {
    double kbits = 0, vbits = 0, kblocks = 0, vblocks = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      const size_t n = items[i].blocks;
      if (refs[i].k) {
        const int bits = kt[a.choice[i]];
        e.changed += *refs[i].k != bits;
        *refs[i].k = bits;
        kbits += double(bits) * n, kblocks += double(n);
      }
      if (refs[i].v) {
        const int bits = vt[a.choice[i]];
        e.changed += *refs[i].v != bits;
        *refs[i].v = bits;
        vbits += double(bits) * n, vblocks += double(n);
      }
    }
    e.avg_k_bits = kblocks > 0 ? kbits / kblocks : 0;
    e.avg_v_bits = vblocks > 0 ? vbits / vblocks : 0;
  }
  e.micros = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  if (events_.size() < kMaxEvents) events_.push_back(e);
  pending_ = false;
  seals_since_ = 0;
  if (!a.feasible)
    return Status::Error("comix: {} bytes of future blocks at the cheapest tiers exceed the {} available", a.cheapest, cap);
  return Status::Ok();
}

void ComixPolicy::Observe(const Observation& obs) {
  auto it = units_.find(obs.seq_id);
  if (it == units_.end() || obs.layer >= options_.n_layer) return;
  Layer& l = it->second.layers[obs.layer];
  const size_t hd = options_.head_dim, hkv = options_.n_head_kv, group = options_.n_head / hkv;
  for (size_t t = 0; t < obs.n; ++t) {
    if (l.cur_rows >= options_.recent_rows) {  // rotate the buckets: keep the last 32–64 rows
      std::swap(l.prev, l.cur);
      for (HeadStats& s : l.cur) s.Reset(hd);
      l.cur_rows = 0;
    }
    for (size_t h = 0; h < hkv; ++h) {
      HeadStats& s = l.cur[h];
      s.AddKeyValueRow(obs.k + t * obs.kv_dim + h * hd, obs.v + t * obs.kv_dim + h * hd);
      for (size_t g = 0; g < group; ++g) s.AddQuery(obs.q + t * obs.q_dim + (h * group + g) * hd);
    }
    ++l.cur_rows;
  }
  if (!l.observed) {
    l.observed = true;
    pending_ = true;
    pending_why_ = "first observation of " + it->second.label;
  }
}

BlockFormats ComixPolicy::FormatFor(const BlockInfo& info) {
  auto it = units_.find(info.seq_id);
  const KvFormat f2 = ComixFormat(options_.family, 2);
  if (it == units_.end()) return BlockFormats{.k = f2, .v = f2};  // unregistered: outside the budget
  Unit& u = it->second;
  Layer& l = u.layers[info.layer];
  BlockFormats f;  // f16 / f16
  char kc = 'F', vc = 'F';
  if (info.first_pos >= options_.sink_blocks * kBlockTokens) {
    if (pending_ || seals_since_ >= options_.realloc_every)
      (void)Reallocate(pending_ ? pending_why_ : fmt::format("every {} sealed blocks", options_.realloc_every));
    const size_t r = RunOf(u, info.block_index);
    f.k = ComixFormat(options_.family, l.k_bits[r]);
    f.v = ComixFormat(options_.family, l.v_bits[r]);
    kc = char('0' + l.k_bits[r]), vc = char('0' + l.v_bits[r]);
  }
  l.sealed_k += kc;
  l.sealed_v += vc;
  const size_t cost = footprint_.Block(f.k, f.v);
  ++l.sealed;
  ++seals_since_;
  u.committed += cost;
  committed_ += cost;
  if (f.k != KvFormat::kF16) {
    u.committed_nonsink += cost;
    committed_nonsink_ += cost;
  }
  return f;
}

void ComixPolicy::Unseal(const BlockInfo& info, const BlockFormats& f) {
  auto it = units_.find(info.seq_id);
  if (it == units_.end()) return;
  Unit& u = it->second;
  Layer& l = u.layers[info.layer];
  const size_t cost = footprint_.Block(f.k, f.v);
  if (l.sealed > 0) --l.sealed;
  if (!l.sealed_k.empty()) l.sealed_k.pop_back(), l.sealed_v.pop_back();
  u.committed -= std::min(u.committed, cost);
  committed_ -= std::min(committed_, cost);
  if (f.k != KvFormat::kF16) {
    u.committed_nonsink -= std::min(u.committed_nonsink, cost);
    committed_nonsink_ -= std::min(committed_nonsink_, cost);
  }
}

std::string ComixPolicy::HeatMap() const {
  std::string out = fmt::format("bits per layer (0..{}), K row then V row; budget projection {} / {} bytes\n",
                                options_.n_layer - 1, ProjectedMinimum(), std::max<int64_t>(0, Capacity()));
  for (const auto& [id, u] : units_) {
    std::string k, v;
    const size_t total = BlocksTotal(u), sinks = SinkBlocks(u);
    for (const Layer& l : u.layers) {
      const size_t next = std::max(l.sealed, sinks);
      const bool open = next < total;  // '-': nothing left to seal in this layer
      const size_t r = RunOf(u, std::min(next, total > 0 ? total - 1 : 0));
      k += open ? char('0' + l.k_bits[r]) : '-';  // 8 = q8
      v += open ? char('0' + l.v_bits[r]) : '-';
    }
    out += fmt::format("  {:<24} w={:<3g} K {}\n  {:<24}       V {}\n", u.label, u.weight, k, "", v);
  }
  return out;
}

std::string ComixPolicy::Report(bool events) const {
  std::string out = HeatMap();
  if (events)
    for (const ComixEvent& e : events_)
      out += fmt::format("  realloc: {:<40} units {:>3}  avg bits K {:.2f} V {:.2f}  future blocks {} / {} bytes  "
                         "{} changed  {:.1f} us\n",
                         e.why, e.units, e.avg_k_bits, e.avg_v_bits, e.projected, e.capacity, e.changed, e.micros);
  return out;
}

std::vector<size_t> ComixPolicy::RunStarts(uint64_t seq_id) const {
  auto it = units_.find(seq_id);
  return it == units_.end() ? std::vector<size_t>{} : it->second.run_start;
}

std::vector<int> ComixPolicy::RunBits(uint64_t seq_id, size_t layer, KvSide side) const {
  auto it = units_.find(seq_id);
  if (it == units_.end() || layer >= it->second.layers.size()) return {};
  const Layer& l = it->second.layers[layer];
  return side == KvSide::kKey ? l.k_bits : l.v_bits;
}

std::string ComixPolicy::SealedBits(uint64_t seq_id, size_t layer, KvSide side) const {
  auto it = units_.find(seq_id);
  if (it == units_.end() || layer >= it->second.layers.size()) return {};
  const Layer& l = it->second.layers[layer];
  return side == KvSide::kKey ? l.sealed_k : l.sealed_v;
}

ComixTiming ComixPolicy::Timing() const {
  ComixTiming t;
  for (const ComixEvent& e : events_) {
    ++t.count;
    t.mean_us += e.micros;
    t.max_us = std::max(t.max_us, e.micros);
  }
  if (t.count) t.mean_us /= double(t.count);
  return t;
}

}  // namespace chorus
