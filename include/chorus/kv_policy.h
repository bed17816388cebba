// KvPolicy: what picks the formats of every KV block. One type, one spec string, one preset table,
// used by every command, the server (`--policy SPEC`) and the engine (EngineOptions::policy).
//
// Spec grammar (FormatSpec prints the canonical form; Parse(FormatSpec(p)) == p):
//   K[/V][:sN]                        uniform formats: shared blocks K / V (V = K when omitted),
//                                     e.g. tq4/tq3, q8/tq3, f16, polykv-paper/tq3:s0 (N sink blocks f16)
//   comix-FAM:AVG[:tT..][:kB][:RANK]  the allocator (CoMix, METHODS.md §2): bits per (sequence, layer,
//                                     K/V) under one budget; FAM tq|kivi, AVG the average-bits target
//                                     (2..8, used when there is no byte budget), :t348 the tiers (of
//                                     2,3,4,8), :k4 the keys' floor, RANK bound|cal|m (m: the measured
//                                     table, Allocator::sensitivity), :jR the join reserve in [0, 1],
//                                     :fK/V the uniform formats used when RANK is m and no table is
//                                     found for the model (Engine::Open says so in KvSettings)
//   cocktail-FAM:AVG[...][:gG][:v][:cN]  the allocator with relevance (chorus's Cocktail): a shared
//                                     document's block errors weighted 1 + G·relevance to the questions;
//                                     :v values only; :cN chunk tokens (16, 32, 64)
//   cocktail-paper[:A:B[:N]]          the paper's Cocktail (METHODS.md §3): f16/kivi4/kivi2 per block
//                                     by relevance; α, β thresholds, N chunk tokens
// Presets (KvPolicyPresets): chorus, polykv, polykv-paper, comix, cocktail, cocktail-paper.
//
// Invariant: a KvPolicy that Parse returned is valid in itself (formats exist, numbers in range);
// what depends on the model (head dimension, the minimum budget) is checked by Engine::Open.
#pragma once
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "chorus/status.h"  // Result

namespace chorus {

enum class KvPolicyKind { kUniform, kAllocator, kRelevance, kCocktailPaper };
// "uniform", "comix", "cocktail", "cocktail-paper": the kind's name in JSON and messages.
const char* ToString(KvPolicyKind kind);

struct KvPolicy {
  struct Uniform {
    std::string k = "kivi4", v = "tq3";  // the `chorus` preset: docs/results/defaults.md
    int sink_blocks = -1;              // -1: EngineOptions::sink_blocks
    bool operator==(const Uniform&) const = default;
  };
  enum class Family { kTq, kKivi };  // tq2/3/4 or kivi2/3/4 (8 bits = q8 in both)
  // How the allocator ranks its items: the expected error, × a measured/expected calibration, the
  // hard bound's terms, or a measured sensitivity table (`chorus eval sensitivity -o FILE`).
  enum class Rank { kExpected, kCalibrated, kBound, kMeasured };
  struct Allocator {
    Family family = Family::kTq;
    double avg_bits = 3;
    std::vector<int> tiers = {2, 3, 4};
    int min_k_bits = 0;
    Rank rank = Rank::kExpected;
    std::string sensitivity;     // kMeasured: the table's path (not part of the spec)
    double join_reserve = 0.25;  // with a byte budget: headroom kept for readers nobody announced
    // kMeasured: the uniform formats to take instead when the model has no table (none given, none
    // calibrated next to the model, none shipped); without one, the missing table is an error.
    std::optional<Uniform> fallback;
    bool operator==(const Allocator&) const = default;
  };
  struct Relevance {
    Allocator allocator;
    double gain = 4;
    bool values_only = false;
    size_t chunk_tokens = 32;
    bool operator==(const Relevance&) const = default;
  };
  struct CocktailPaper {
    double alpha = 0.6, beta = 0.1;
    size_t chunk_tokens = 32;
    bool operator==(const CocktailPaper&) const = default;
  };

  std::variant<Uniform, Allocator, Relevance, CocktailPaper> rule = Uniform{};

  static Result<KvPolicy> Parse(std::string_view spec);  // a preset name or a spec
  KvPolicyKind kind() const { return static_cast<KvPolicyKind>(rule.index()); }
  bool is_uniform() const { return kind() == KvPolicyKind::kUniform; }
  // The allocator's settings (kAllocator and kRelevance), else nullptr.
  const Allocator* allocator() const;
  Allocator* allocator();
  // Whether a shared document needs its questions before it is sealed (the two Cocktails).
  bool needs_questions() const;
  // The chunk size of the two Cocktails (32 otherwise).
  size_t chunk_tokens() const;
  bool operator==(const KvPolicy&) const = default;
};

// The canonical spec (what Parse reads back; the sensitivity path is not in it).
std::string FormatSpec(const KvPolicy& policy);
std::string_view FamilyName(KvPolicy::Family family);  // "tq", "kivi"

struct KvPolicyPreset {
  const char* name;
  const char* spec;
  const char* what;  // one line for --help
};
std::span<const KvPolicyPreset> KvPolicyPresets();
// "chorus (kivi4/tq3: ...)\n..." — the presets for a flag's help text.
std::string KvPolicyHelp();

}  // namespace chorus
