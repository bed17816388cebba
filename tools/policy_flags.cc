// --policy flags for eval and generate (see policy_flags.h).
#include "tools/policy_flags.h"

#include <sstream>

#include "engine/cocktail_plan.h"  // ValidateCocktailOptions
#include "tools/common.h"          // ParseBytes

namespace chorus::cli {

void AddPolicyFlags(CLI::App* cmd, PolicyFlags& f, bool with_query, const std::string& where) {
  const std::string question = with_query ? "--query" : "the question (-p/-f) about --doc";
  cmd->add_option("--policy", f.policy, "KV precision policy: comix (bits per block run x layer x K/V under one budget: "
                                        "--kv-budget or --kv-avg-bits, --comix-family, --comix-tiers), cocktail (the "
                                        "same allocator and bytes, each 32-token block's error weighted by its chunk's "
                                        "relevance to " + question + ": --relevance-gain, --encoder) or cocktail-paper "
                                        "(the paper's f16/kivi4/kivi2 per 32-token block by its chunk's relevance: "
                                        "--alpha, --beta, --chunk, --encoder); " + where);
  cmd->add_option("--kv-budget", f.budget, "comix/cocktail: KV byte budget (e.g. 4000000, 64K, 1.5M); below the "
                                           "cheapest tiers' cost is an error that names the minimum");
  cmd->add_option("--kv-avg-bits", f.avg_bits, "comix/cocktail without --kv-budget: sealed blocks cost at most uniform "
                                               "blocks of this many bits (2..8; at least the cheapest tier)")
      ->capture_default_str();
  cmd->add_option("--comix-family", f.family, "comix/cocktail formats: tq (tq2/3/4) or kivi (kivi2/3/4)")
      ->capture_default_str();
  cmd->add_option("--comix-tiers", f.tiers, "comix/cocktail: bit widths to choose from, ascending, of 2,3,4,8 (8 = q8)")
      ->capture_default_str();
  cmd->add_option("--comix-min-k-bits", f.min_k_bits, "comix/cocktail: keys never below this many bits (0 = no floor)")
      ->capture_default_str();
  if (with_query)
    cmd->add_option("--comix-rank", f.rank, "comix/cocktail sensitivity: expected, calibrated (x the measured/expected "
                                            "ratio per side and width), bound, or measured (the end-to-end KLD per "
                                            "layer, side and width of --comix-sensitivity)")->capture_default_str();
  cmd->add_option("--comix-sensitivity", f.sensitivity, "comix/cocktail: rank by this measured table (the one "
                                                        "`chorus eval sensitivity -o FILE` wrote for this model and "
                                                        "--comix-family) instead of online statistics");
  cmd->add_option("--relevance-gain", f.relevance_gain, "cocktail: a block's error weight = 1 + gain x its chunk's "
                                                        "relevance (min-max scaled to [0, 1]); 0 = comix exactly")
      ->capture_default_str();
  cmd->add_flag("--relevance-values-only", f.relevance_values_only, "cocktail: relevance weights values only");
  cmd->add_option("--alpha", f.alpha, "cocktail-paper: T_low = s_min + alpha (s_max - s_min); larger = more INT2")
      ->capture_default_str();
  cmd->add_option("--beta", f.beta, "cocktail-paper: T_high = s_max - beta (s_max - s_min); larger = more FP16")
      ->capture_default_str();
  cmd->add_option("--chunk", f.chunk, "cocktail(-paper): chunk size in tokens (16, 32, 64)")->capture_default_str();
  cmd->add_option("--encoder", f.encoder, "cocktail(-paper): sentence-embedding model directory (default: "
                                          "all-MiniLM-L6-v2 next to the model if installed, else the model's own "
                                          "hidden states; 'hidden-states' forces those)");
  if (with_query)
    cmd->add_option("--query", f.query, "cocktail(-paper): the question whose similarity to each chunk picks its precision");
}

Result<std::vector<int>> ParseTiers(const std::string& list) {
  std::vector<int> bits;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) {
    char* end = nullptr;
    const long b = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != 0) return Status::Error("--comix-tiers '{}': '{}' is not a bit width", list, item);
    bits.push_back(int(b));
  }
  return bits;  // which widths are tiers: ComixPolicy::Validate
}

Status CheckPolicyFlags(const CLI::App* cmd, PolicyFlags& f, bool need_query) {
  const auto given = [&](const char* name) {
    const CLI::Option* o = cmd->get_option_no_throw(name);
    return o != nullptr && o->count() > 0;
  };
  if (!f.policy.empty() && f.policy != "comix" && f.policy != "cocktail" && f.policy != "cocktail-paper")
    return Status::Error("unknown --policy '{}' (valid: comix, cocktail, cocktail-paper)", f.policy);
  const bool allocator = f.policy == "comix" || f.policy == "cocktail";
  const bool relevance = f.policy == "cocktail" || f.policy == "cocktail-paper";
  for (const char* o : {"--kv-budget", "--kv-avg-bits", "--comix-family", "--comix-tiers", "--comix-min-k-bits",
                        "--comix-rank", "--comix-sensitivity"})
    if (given(o) && !allocator) return Status::Error("{} needs --policy comix or cocktail", o);
  for (const char* o : {"--relevance-gain", "--relevance-values-only"})
    if (given(o) && f.policy != "cocktail") return Status::Error("{} needs --policy cocktail", o);
  for (const char* o : {"--alpha", "--beta"})
    if (given(o) && f.policy != "cocktail-paper") return Status::Error("{} needs --policy cocktail-paper", o);
  for (const char* o : {"--chunk", "--encoder", "--query"})
    if (given(o) && !relevance) return Status::Error("{} needs --policy cocktail or cocktail-paper", o);
  if (allocator) {
    if (f.family != "tq" && f.family != "kivi")
      return Status::Error("unknown --comix-family '{}' (valid: tq, kivi)", f.family);
    if (f.rank != "expected" && f.rank != "calibrated" && f.rank != "bound" && f.rank != "measured")
      return Status::Error("unknown --comix-rank '{}' (valid: expected, calibrated, bound, measured)", f.rank);
    if (!f.sensitivity.empty() && !given("--comix-rank")) f.rank = "measured";
    if ((f.rank == "measured") != !f.sensitivity.empty())
      return Status::Error("--comix-rank measured and --comix-sensitivity FILE go together (the table is written by "
                           "`chorus eval sensitivity -o FILE`)");
    CHORUS_ASSIGN_OR_RETURN(f.tier_bits, ParseTiers(f.tiers));
    if (!f.budget.empty()) {
      auto b = ParseBytes(f.budget);
      if (!b.ok()) return b.status().Context("--kv-budget");
      f.budget_bytes = *b;
    } else if (!(f.avg_bits >= 2 && f.avg_bits <= 8)) {
      return Status::Error("--kv-avg-bits must be between 2 and 8, got {}", f.avg_bits);
    }
  }
  if (relevance) {
    CHORUS_RETURN_IF_ERROR(ValidateCocktailOptions({.alpha = f.alpha, .beta = f.beta, .chunk_tokens = f.chunk})
                               .Context("--alpha/--beta/--chunk"));
    if (need_query && f.query.find_first_not_of(" \t\r\n") == std::string::npos)
      return Status::Error("--policy {} needs --query TEXT (the question whose relevance to each chunk {})", f.policy,
                           f.policy == "cocktail" ? "weights its blocks' errors" : "picks its precision");
  }
  return Status::Ok();
}

Result<std::map<std::string, SensitivityFile>> LoadSensitivityTables(const std::vector<std::string>& paths) {
  std::map<std::string, SensitivityFile> tables;
  for (const std::string& path : paths) {
    CHORUS_ASSIGN_OR_RETURN(auto table, LoadComixSensitivity(path));
    tables[table->family_name()] = {path, table};
  }
  return tables;
}

Result<SensitivityFile> SensitivityFor(const std::map<std::string, SensitivityFile>& tables, const std::string& family,
                                       const std::string& spec) {
  const auto it = tables.find(family);
  if (it == tables.end())
    return Status::Error("config '{}': ':m' needs --comix-sensitivity FILE measured for the {} family (`chorus eval "
                         "sensitivity --comix-family {} -o FILE`)", spec, family, family);
  return it->second;
}

Result<ComixOptions> ComixOptionsFor(const PolicyFlags& f, const ModelConfig& c, size_t sink_blocks,
                                     const ComixOptions& store) {
  ComixOptions co = store;  // window, threads, prefill chunk: the store's
  co.n_layer = c.n_layer, co.n_head = c.n_head, co.n_head_kv = c.n_head_kv, co.head_dim = c.head_dim;
  co.family = f.family == "kivi" ? ComixFamily::kKivi : ComixFamily::kTq;
  co.budget_bytes = f.budget_bytes, co.avg_bits = f.avg_bits, co.sink_blocks = sink_blocks;
  if (!f.tier_bits.empty()) co.tiers = f.tier_bits;
  co.min_k_bits = f.min_k_bits;
  co.worst_case = f.rank == "bound";
  co.calibrated = f.rank == "calibrated";
  if (f.rank == "measured") {
    CHORUS_ASSIGN_OR_RETURN(co.measured, LoadComixSensitivity(f.sensitivity));
  }
  co.relevance_gain = f.relevance_gain;
  co.relevance_values_only = f.relevance_values_only;
  CHORUS_RETURN_IF_ERROR(ComixPolicy::Validate(co));
  return co;
}

}  // namespace chorus::cli
