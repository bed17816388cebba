// ComixPolicy: CoMix (METHODS.md §2) — one KV byte budget, bits per (sequence, layer, K/V side)
// coordinated across every resident sequence by an online error bound (policy/comix_bound.h) and
// a knapsack (policy/comix_alloc.h). The same allocator is chorus's Cocktail (issue 19): a unit
// registered with a relevance per 32-token block (its chunk's similarity to the question) is cut
// into runs of blocks of equal relevance level, and each run × layer × side is one knapsack item
// whose error weight grows with its relevance — bytes still come from the budget / average target.
//
// Invariants:
// - A unit (a registered sequence: an agent's own KV, a shared context, a scored text) is admitted
//   only if, with every not-yet-sealed block of every unit at 2 bits, the projected bytes fit:
//   fixed budget: the store's overhead + one prefill's extra + sealed block bytes + sink blocks +
//   every unit's non-block peak + future blocks ≤ budget — all from KvFootprint (kv/kv_footprint.h),
//   the projection the engine's admission uses too; average-bits target: sealed + future block
//   bytes ≤ the same blocks at the uniform target.
// - Every allocation keeps that projection within the budget, and blocks are sealed with the
//   allocation in force, so the projection (and the measured bytes under it) never exceeds it.
// - An allocation applies to blocks sealed after it; nothing sealed is re-quantized; blocks whose
//   first position is < 32·sink_blocks stay f16 (attention sinks), the native window stays native.
// - Recomputed when a unit joins or leaves, when a (unit, layer) is first observed, and every
//   `realloc_every` sealed blocks.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kv/kv_footprint.h"     // KvFootprint
#include "kv/precision_policy.h"  // PrecisionPolicy
#include "policy/comix_alloc.h"   // ComixAllocation
#include "policy/comix_bound.h"   // HeadStats, ComixFamily
#include "policy/comix_sensitivity.h"  // ComixSensitivity
#include "util/status.h"

namespace chorus {

struct ComixOptions {
  size_t n_layer = 0, n_head = 0, n_head_kv = 0, head_dim = 0;
  ComixFamily family = ComixFamily::kTq;
  size_t budget_bytes = 0;  // everything the KV holds (blocks + windows + tables); 0 = use avg_bits
  double avg_bits = 3;      // with budget 0: sealed blocks cost ≤ uniform blocks at this many bits (2..8)
  size_t sink_blocks = 1;
  size_t realloc_every = 64;  // sealed blocks between periodic reallocations
  size_t recent_rows = 32;    // statistics window: the last 32–64 rows and queries per (unit, layer)
  bool worst_case = false;    // rank by the hard bound's terms (SideBound) instead of SideExpected
  bool split_kv = true;       // K and V bits chosen separately (false: one choice per (unit, layer))
  // Fixed budget: upgrades above 2 bits may use only (1 − join_reserve) of the bytes left after
  // the 2-bit projection, so a sequence sealed alone (a shared document) does not take what the
  // agents that join after it need. 0 = upgrades may use everything.
  double join_reserve = 0;
  // The KV store's window rows, attention threads and the forward's micro-batch (one synchronous
  // call — a document's prefill, a scored text — appends that many rows at a time at block
  // boundaries beside the step's sequences: KvFootprint::PrefillExtra): the non-block bytes of
  // the projection (KvFootprint) — the engine sets them to its own.
  WindowFormat window = WindowFormat::kF16;
  size_t threads = 1;
  size_t prefill_tokens = 32;
  // Bit widths the allocation chooses from, ascending, 1..4 of {2, 3, 4, 8} (8 = q8, for either
  // family). Keys never get fewer than min_k_bits (0: no floor; the tiers below it are not offered
  // to keys). split_kv off needs the same tiers for both sides (min_k_bits ≤ tiers[0]).
  std::vector<int> tiers = {2, 3, 4};
  int min_k_bits = 0;
  // Rank by SideExpected × the measured/expected ratio of its (family, side, bits)
  // (ComixCalibration, comix_bound.h) instead of SideExpected alone.
  bool calibrated = false;
  // Rank by a measured table instead (`chorus eval sensitivity`): an item's error at b bits is the
  // KLD measured with only its layer's side at b bits, × its share of the layer's blocks. Every tier
  // must be in the table; overrides worst_case and calibrated.
  std::shared_ptr<const ComixSensitivity> measured;
  // Relevance (Cocktail): a run's error weight is readers × (1 + relevance_gain · r), r ∈ [0, 1] its
  // blocks' min–max scaled relevance; with relevance_values_only the key items keep readers.
  double relevance_gain = 4;
  bool relevance_values_only = false;
};

// One recorded allocation (printed by the CLI: how the allocation changed).
struct ComixEvent {
  std::string why;
  size_t units = 0;
  size_t projected = 0;   // projected bytes under the new allocation
  size_t capacity = 0;    // what the projection must stay under
  double avg_k_bits = 0, avg_v_bits = 0;  // over future blocks, weighted by blocks
  size_t changed = 0;     // items whose choice changed
  double micros = 0;      // time of the allocation (stats → items → knapsack)
};

struct ComixTiming {
  size_t count = 0;
  double mean_us = 0, max_us = 0;
};

class ComixPolicy : public PrecisionPolicy {
 public:
  explicit ComixPolicy(const ComixOptions& options);

  // Smallest useful fixed budget of a model: the store's overhead and one prefill's extra, and one
  // sequence of one block per layer at 2 bits with its window, native rows and table.
  static size_t MinimumBudget(const ComixOptions& options);
  // The projection this policy uses (the store's options as the policy sees them).
  static KvStoreOptions StoreOptions(const ComixOptions& options);
  // Validates the budget / avg-bits choice (the message names the minimum).
  static Status Validate(const ComixOptions& options);

  // Registers sequence `seq_id` (own tokens ≤ capacity, first absolute position first_pos) with an
  // error weight; refused with a message if even the cheapest tiers cannot fit (nothing changes
  // then). `block_relevance` (optional, one value per 32-token block of the unit, any scale: it is
  // min–max scaled): the unit's blocks are grouped into runs of equal relevance level (eighths),
  // each run weighted by its relevance (ComixOptions::relevance_gain); empty or gain 0 = one run (CoMix).
  Status AddUnit(uint64_t seq_id, size_t capacity, size_t first_pos, double weight, std::string label,
                 std::span<const float> block_relevance = {});
  void RemoveUnit(uint64_t seq_id);  // its bytes go back to the others
  void SetWeight(uint64_t seq_id, double weight);
  bool HasUnit(uint64_t seq_id) const { return units_.count(seq_id) != 0; }

  BlockFormats FormatFor(const BlockInfo& info) override;
  void Observe(const Observation& obs) override;
  void Unseal(const BlockInfo& info, const BlockFormats& f) override;

  // Projected bytes with every future block at its cheapest tier, and what it must stay under.
  size_t ProjectedMinimum() const;
  // Bytes future blocks may take under the budget (negative: the fixed part alone is over).
  int64_t Capacity() const;
  // Fixed budget: the most the KV can hold from now on under the allocation in force (the fixed
  // part + every future block at its current bits); ≤ the budget.
  size_t ProjectedBytes() const;
  // Bytes of sealed blocks the policy has handed out (exact, metadata included).
  size_t committed_bytes() const { return committed_; }
  // The store this policy seals for: the projection adds the pool's measured free slots and counts
  // every live block of the store, also those no unit owns any more (without a store: an empty
  // pool's slots, and the units' sealed blocks).
  void SetStore(const KvStore* store) { store_ = store; }

  std::string HeatMap() const;  // bits per unit × layer (of each layer's next block), K and V rows
  // The relevance runs of a unit (first block of each run) and the bits in force per run of one
  // layer (tests and reports); empty when the unit is unknown.
  std::vector<size_t> RunStarts(uint64_t seq_id) const;
  std::vector<int> RunBits(uint64_t seq_id, size_t layer, KvSide side) const;
  // What FormatFor handed out for each block of a unit's layer, in block order of the unit's own
  // blocks: one char per block, 'F' (f16: a sink) or the bit width ('2', '3', '4', '8' = q8).
  // Empty when the unit is unknown. (Checked against the stored blocks' formats by the engine test.)
  std::string SealedBits(uint64_t seq_id, size_t layer, KvSide side) const;
  // The heat map and, with `events`, one line per reallocation (why, bits, bytes, time).
  std::string Report(bool events) const;
  ComixTiming Timing() const;  // reallocations recorded so far
  const std::vector<ComixEvent>& events() const { return events_; }
  const ComixOptions& options() const { return options_; }

 private:
  struct Layer {
    size_t sealed = 0;                       // blocks sealed so far
    std::string sealed_k, sealed_v;          // (sealed) the bits handed out per block (SealedBits)
    std::vector<int> k_bits, v_bits;         // (runs) allocation in force
    std::vector<HeadStats> cur, prev;        // (n_head_kv) recent statistics, two buckets
    size_t cur_rows = 0, cur_queries = 0;
    bool observed = false;
  };
  struct Unit {
    std::string label;
    double weight = 1;
    size_t capacity = 0, first_pos = 0;
    size_t committed = 0;         // bytes of its sealed blocks
    size_t committed_nonsink = 0;
    std::vector<size_t> run_start = {0};  // first block of each run (ascending, run_start[0] = 0)
    std::vector<double> run_rel = {0};    // relevance of each run in [0, 1]
    std::vector<Layer> layers;
  };
  size_t BlocksTotal(const Unit& u) const { return u.capacity / 32; }
  size_t SinkBlocks(const Unit& u) const;
  size_t Reserve(const Unit& u) const;  // its non-block peak (KvFootprint)
  size_t SideBytes(int bits, KvSide side) const;
  std::vector<int> SideTiers(KvSide side) const { return SideTiersOf(options_, side); }
  static std::vector<int> SideTiersOf(const ComixOptions& o, KvSide side);
  size_t RunOf(const Unit& u, size_t block) const;
  size_t RunLeft(const Unit& u, size_t run, size_t done) const;  // blocks of the run at index ≥ done
  size_t BlockBytes(int k_bits, int v_bits) const;
  // Bytes fixed regardless of the allocation (sealed, sinks to come, reserves) and the capacity.
  size_t FixedBytes() const;
  Status Reallocate(const std::string& why);

  ComixOptions options_;
  KvFootprint footprint_;
  const KvStore* store_ = nullptr;
  size_t block_round_ = 0;  // most bytes a block's 64-byte rounding adds to its two sides' sum
  std::map<uint64_t, Unit> units_;
  size_t committed_ = 0, committed_nonsink_ = 0;
  size_t seals_since_ = 0;
  bool pending_ = false;
  std::string pending_why_;
  std::vector<ComixEvent> events_;
};

}  // namespace chorus
