// --policy flags for eval and generate (see policy_flags.h).
#include "tools/policy_flags.h"

#include "engine/cocktail_plan.h"  // ValidateCocktailOptions
#include "tools/common.h"          // ParseBytes

namespace chorus::cli {

void AddPolicyFlags(CLI::App* cmd, PolicyFlags& f, bool with_query, const std::string& where) {
  cmd->add_option("--policy", f.policy, "KV precision policy: comix (bits per layer x K/V under one budget: "
                                        "--kv-budget or --kv-avg-bits, --comix-family) or cocktail (f16/kivi4/kivi2 "
                                        "per 32-token block by its chunk's relevance to the query: --alpha, --beta, "
                                        "--chunk, --encoder); " + where);
  cmd->add_option("--kv-budget", f.budget, "comix: KV byte budget (e.g. 4000000, 64K, 1.5M)");
  cmd->add_option("--kv-avg-bits", f.avg_bits, "comix without --kv-budget: average bits target (2..8)")
      ->capture_default_str();
  cmd->add_option("--comix-family", f.family, "comix formats: tq (tq2/3/4) or kivi (kivi2/3/4)")->capture_default_str();
  cmd->add_option("--alpha", f.alpha, "cocktail: T_low = s_min + alpha (s_max - s_min); larger = more INT2")
      ->capture_default_str();
  cmd->add_option("--beta", f.beta, "cocktail: T_high = s_max - beta (s_max - s_min); larger = more FP16")
      ->capture_default_str();
  cmd->add_option("--chunk", f.chunk, "cocktail: chunk size in tokens (16, 32, 64)")->capture_default_str();
  cmd->add_option("--encoder", f.encoder, "cocktail: sentence-embedding model directory (default: all-MiniLM-L6-v2 "
                                          "next to the model if installed, else the model's own hidden states; "
                                          "'hidden-states' forces those)");
  if (with_query)
    cmd->add_option("--query", f.query, "cocktail: the question whose similarity to each chunk picks its precision");
}

Status CheckPolicyFlags(const CLI::App* cmd, PolicyFlags& f, bool need_query) {
  const auto given = [&](const char* name) {
    const CLI::Option* o = cmd->get_option_no_throw(name);
    return o != nullptr && o->count() > 0;
  };
  if (!f.policy.empty() && f.policy != "comix" && f.policy != "cocktail")
    return Status::Error("unknown --policy '{}' (valid: comix, cocktail)", f.policy);
  for (const char* o : {"--kv-budget", "--kv-avg-bits", "--comix-family"})
    if (given(o) && f.policy != "comix") return Status::Error("{} needs --policy comix", o);
  for (const char* o : {"--alpha", "--beta", "--chunk", "--encoder", "--query"})
    if (given(o) && f.policy != "cocktail") return Status::Error("{} needs --policy cocktail", o);
  if (f.policy == "comix") {
    if (f.family != "tq" && f.family != "kivi")
      return Status::Error("unknown --comix-family '{}' (valid: tq, kivi)", f.family);
    if (!f.budget.empty()) {
      auto b = ParseBytes(f.budget);
      if (!b.ok()) return b.status().Context("--kv-budget");
      f.budget_bytes = *b;
    } else if (!(f.avg_bits >= 2 && f.avg_bits <= 8)) {
      return Status::Error("--kv-avg-bits must be between 2 and 8, got {}", f.avg_bits);
    }
  }
  if (f.policy == "cocktail") {
    CHORUS_RETURN_IF_ERROR(ValidateCocktailOptions({.alpha = f.alpha, .beta = f.beta, .chunk_tokens = f.chunk})
                               .Context("--alpha/--beta/--chunk"));
    if (need_query && f.query.find_first_not_of(" \t\r\n") == std::string::npos)
      return Status::Error("--policy cocktail needs --query TEXT (the question whose relevance to each chunk picks "
                           "its precision)");
  }
  return Status::Ok();
}

Result<ComixOptions> ComixOptionsFor(const PolicyFlags& f, const ModelConfig& c, size_t sink_blocks,
                                     const ComixOptions& store) {
  ComixOptions co = store;  // window, threads, prefill chunk: the store's
  co.n_layer = c.n_layer, co.n_head = c.n_head, co.n_head_kv = c.n_head_kv, co.head_dim = c.head_dim;
  co.family = f.family == "kivi" ? ComixFamily::kKivi : ComixFamily::kTq;
  co.budget_bytes = f.budget_bytes, co.avg_bits = f.avg_bits, co.sink_blocks = sink_blocks;
  CHORUS_RETURN_IF_ERROR(ComixPolicy::Validate(co));
  return co;
}

}  // namespace chorus::cli
