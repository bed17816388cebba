// --policy SPEC and its companion flags (see policy_flags.h).
#include "tools/policy_flags.h"

#include "eval/sensitivity_eval.h"  // LoadComixSensitivity (policy/comix_sensitivity.h)
#include "tools/common.h"           // ParseBytes

namespace chorus::cli {

void AddPolicyFlags(CLI::App* cmd, PolicyFlags& f, const PolicyFlagsSetup& setup) {
  f.spec = setup.default_spec;
  f.budget_any_policy = setup.budget_any_policy;
  f.budget = setup.default_budget;
  cmd->add_option("--policy", f.spec,
                  "KV policy: what picks each shared block's formats; " + setup.where + ". A preset:\n" +
                      KvPolicyHelp() +
                      "or a spec: K/V[:sN] (uniform formats of f16, q8, kivi2-4, tq2-4, polykv-paper; N sink "
                      "blocks), comix-tq|kivi:AVG[:tTIERS][:kBITS][:bound|:cal|:m][:jRESERVE] (one budget, bits "
                      "per sequence x layer x K/V; e.g. comix-kivi:3:t348:k4), cocktail-tq|kivi:AVG[...][:gGAIN][:v]"
                      "[:cCHUNK] (the same, a document's blocks weighted by relevance to the questions), "
                      "cocktail-paper[:ALPHA:BETA[:CHUNK]] (f16/kivi4/kivi2 per block by relevance)")
      ->capture_default_str();
  cmd->add_option("--kv-budget", f.budget,
                  setup.budget_any_policy
                      ? "KV byte budget (e.g. 4000000, 64K, 1.5M); what does not fit waits or is refused with the "
                        "numbers; comix/cocktail: their bits are chosen under it (below the cheapest tiers is an "
                        "error naming the minimum); 0 or absent = unlimited (an allocator uses its AVG bits)"
                      : "comix/cocktail: KV byte budget (e.g. 4000000, 64K, 1.5M) instead of the spec's AVG bits; "
                        "below the cheapest tiers' cost is an error that names the minimum")
      ->capture_default_str();
  cmd->add_option("--comix-sensitivity", f.sensitivity,
                  "comix/cocktail: rank by this measured table (`chorus eval sensitivity -o FILE` for this model "
                  "and the spec's family) instead of online statistics (the spec's :m rank)");
  cmd->add_option("--encoder", f.encoder,
                  "cocktail(-paper): sentence-embedding model directory (default: all-MiniLM-L6-v2 next to the "
                  "model if installed, else the model's own hidden states; 'hidden-states' forces those)");
  if (setup.with_query)
    cmd->add_option("--query", f.query, "cocktail(-paper): the question whose relevance to each chunk decides");
}

Status CheckPolicyFlags(const CLI::App* cmd, PolicyFlags& f, bool need_query) {
  const auto given = [&](const char* name) {
    const CLI::Option* o = cmd->get_option_no_throw(name);
    return o != nullptr && o->count() > 0;
  };
  CHORUS_ASSIGN_OR_RETURN(f.policy, KvPolicy::Parse(f.spec));
  const std::string kind = ToString(f.policy.kind());
  KvPolicy::Allocator* alloc = f.policy.allocator();
  if (!f.budget.empty()) {
    auto b = ParseBytes(f.budget);
    if (!b.ok()) return b.status().Context("--kv-budget");
    f.budget_bytes = *b;
    if (!f.budget_any_policy && alloc == nullptr)
      return Status::Error("--kv-budget needs an allocator policy (comix-… or cocktail-…), not {}", f.spec);
  }
  if (given("--comix-sensitivity")) {
    if (alloc == nullptr)
      return Status::Error("--comix-sensitivity needs an allocator policy (comix-… or cocktail-…), not {}", f.spec);
    alloc->sensitivity = f.sensitivity;
    if (alloc->rank == KvPolicy::Rank::kExpected) alloc->rank = KvPolicy::Rank::kMeasured;
    if (alloc->rank != KvPolicy::Rank::kMeasured)
      return Status::Error(
          "--comix-sensitivity ranks by the measured table: it cannot go with the spec's other rank "
          "({})",
          f.spec);
  }  // :m without a file: the table `chorus calibrate` cached next to the model (Engine::Open says if none)
  for (const char* o : {"--encoder", "--query"})
    if (given(o) && !f.policy.needs_questions())
      return Status::Error("{} needs a cocktail policy (cocktail-… or cocktail-paper), not {} ({})", o, f.spec, kind);
  if (need_query && f.policy.needs_questions() && f.query.find_first_not_of(" \t\r\n") == std::string::npos)
    return Status::Error(
        "--policy {} needs --query TEXT (the question whose relevance to each chunk {})", f.spec,
        f.policy.kind() == KvPolicyKind::kRelevance ? "weights its blocks' errors" : "picks its precision");
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

}  // namespace chorus::cli
