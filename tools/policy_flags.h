// The --policy flags of `chorus eval ppl|kld` and `chorus generate` (comix and cocktail — one
// allocator, cocktail weighted by relevance: --kv-budget, --kv-avg-bits, --comix-family,
// --comix-tiers, --comix-min-k-bits, --relevance-gain, --relevance-values-only, and on eval
// --comix-rank; cocktail-paper: --alpha, --beta; both cocktails: --chunk, --encoder, and --query on
// eval — generate's question is its prompt),
// checked before anything is loaded: every error names the flag and the limit.
// Invariant: PolicyFlags::policy is "" (no policy: the command behaves exactly as without these
// flags), "comix", "cocktail" or "cocktail-paper" once CheckPolicyFlags has passed.
#pragma once
#include <CLI/CLI.hpp>

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/model_config.h"   // ModelConfig
#include "policy/comix_policy.h"  // ComixOptions
#include "util/status.h"

namespace chorus::cli {

struct PolicyFlags {
  std::string policy;            // "", "comix", "cocktail", "cocktail-paper"
  std::string budget;            // comix: --kv-budget (bytes, K/M/G suffixes); "" = --kv-avg-bits
  double avg_bits = 3;           // comix target without a budget (2..8)
  std::string family = "tq";     // comix formats: tq | kivi
  double alpha = 0.6, beta = 0.1;  // cocktail thresholds
  size_t chunk = 32;             // cocktail chunk tokens (16, 32, 64)
  std::string encoder;           // cocktail: "" = installed all-MiniLM-L6-v2 else fallback; "hidden-states"
  std::string query;             // cocktail on eval: --query TEXT
  std::string tiers = "2,3,4";   // comix/cocktail: --comix-tiers
  int min_k_bits = 0;            // comix/cocktail: --comix-min-k-bits
  std::string rank = "expected"; // comix/cocktail (eval): expected | calibrated | bound | measured
  std::string sensitivity;       // --comix-sensitivity FILE (rank measured): `eval sensitivity -o` JSON
  double relevance_gain = 4;     // cocktail: error weight 1 + gain × relevance
  bool relevance_values_only = false;
  size_t budget_bytes = 0;       // parsed --kv-budget (set by CheckPolicyFlags)
  std::vector<int> tier_bits;    // parsed --comix-tiers (set by CheckPolicyFlags)
};

// Registers --policy and its options on `cmd`; `with_query` adds --query and --comix-rank (eval:
// the engine has no rank option); `where` ends the --policy help (what the policy applies to here).
void AddPolicyFlags(CLI::App* cmd, PolicyFlags& flags, bool with_query, const std::string& where);

// Validates the flags as given on `cmd` (options of one policy given with another or without
// --policy, unknown policy, α/β/chunk, family, tiers, rank, avg bits, byte size, cocktail(-paper)
// without --query when `need_query`). Parses --kv-budget into budget_bytes.
Status CheckPolicyFlags(const CLI::App* cmd, PolicyFlags& flags, bool need_query);

// "2,3,4" → {2, 3, 4}; an item that is not a number is an error naming it (the widths themselves
// are checked by ComixPolicy::Validate).
Result<std::vector<int>> ParseTiers(const std::string& list);

// The tables of --comix-sensitivity FILE[,FILE] (eval comix, eval needle: one per family), each file read
// once, by family name ("kivi", "tq").
struct SensitivityFile {
  std::string path;
  std::shared_ptr<const ComixSensitivity> table;
};
Result<std::map<std::string, SensitivityFile>> LoadSensitivityTables(const std::vector<std::string>& paths);
// The table of `family` for the ':m' config `spec`; missing: an error naming the flag and the command
// that writes one.
Result<SensitivityFile> SensitivityFor(const std::map<std::string, SensitivityFile>& tables, const std::string& family,
                                       const std::string& spec);

// CoMix options for a model (budget or avg-bits, family, sink blocks), checked against the model's
// minimum budget (ComixPolicy::Validate: the error names the minimum).
// `store` carries the KV store's window rows, threads and prefill chunk (the projection's).
Result<ComixOptions> ComixOptionsFor(const PolicyFlags& flags, const ModelConfig& model, size_t sink_blocks,
                                     const ComixOptions& store = {});

}  // namespace chorus::cli
