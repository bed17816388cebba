// --policy SPEC and the flags that go with any policy (--kv-budget, --comix-sensitivity, --encoder,
// and --query on eval), shared by agents, serve, generate and eval. SPEC is KvPolicy's grammar
// (include/chorus/kv_policy.h): a preset (chorus, polykv, comix, cocktail, ...) or a full spec
// (q8/tq3, comix-kivi:3:t348:k4, cocktail-tq:3:g8, cocktail-paper:0.6:0.1:32).
// Invariant: after CheckPolicyFlags passed, `policy` is the parsed spec with its sensitivity table
// path set, and every flag given applies to it.
#pragma once
#include <CLI/CLI.hpp>

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "chorus/kv_policy.h"
#include "chorus/status.h"

namespace chorus {
struct ComixSensitivity;  // policy/comix_sensitivity.h: the eval configs that read a table include it
}  // namespace chorus

namespace chorus::cli {

struct PolicyFlags {
  std::string spec;                // --policy (the command's default when not given)
  std::string budget;              // --kv-budget (bytes, K/M/G suffixes); "" = none
  std::string sensitivity;         // --comix-sensitivity FILE: the table of an allocator's :m rank
  std::string encoder;             // --encoder DIR (the two Cocktails); "" = installed MiniLM, else the fallback
  std::string query;               // --query TEXT (eval: the Cocktails' question)
  KvPolicy policy;                 // parsed by CheckPolicyFlags
  size_t budget_bytes = 0;         // parsed --kv-budget
  bool budget_any_policy = false;  // PolicyFlagsSetup's (set by AddPolicyFlags)
};

struct PolicyFlagsSetup {
  std::string default_spec = "chorus";
  bool with_query = false;         // --query (eval)
  bool budget_any_policy = false;  // --kv-budget bounds every policy (agents, serve), not only allocators
  std::string default_budget;      // "" = none
  std::string where;               // ends the --policy help: what the policy applies to here
};

// Registers --policy, --kv-budget, --comix-sensitivity, --encoder (and --query) on `cmd`.
void AddPolicyFlags(CLI::App* cmd, PolicyFlags& flags, const PolicyFlagsSetup& setup);

// Parses --policy and --kv-budget and checks the other flags against the policy (an option of
// another kind of policy names what it needs; a Cocktail on eval without --query when `need_query`).
// A --comix-sensitivity table without a rank in the spec ranks by it (:m); :m without one reads the
// table `chorus calibrate` cached next to the model.
Status CheckPolicyFlags(const CLI::App* cmd, PolicyFlags& flags, bool need_query);

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

}  // namespace chorus::cli
