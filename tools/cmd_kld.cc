// `chorus eval kld`: flags (tools/cmd_eval.cc), then eval::RunKld (src/eval/perplexity_eval.h): KL
// divergence of compressed-KV next-token distributions against the f16 KV, one row per policy.
#include <unistd.h>  // isatty

#include "tools/eval_args.h"

namespace chorus::cli {

int RunKld(const EvalArgs& a) {
  eval::KldConfig cfg{.text = ChunkedTextOf(a),
                      .specs = a.configs,
                      .kv = KvOptionsOf(a),
                      .sensitivity = a.pol.sensitivity,
                      .log = !a.json || isatty(2) ? stderr : nullptr};
  if (cfg.specs.empty() || a.policy_given) cfg.specs.push_back(a.pol.spec);  // --policy: one more row
  auto r = eval::RunKld(cfg);
  if (!r.ok()) return Fail(r.status());
  std::fprintf(stderr, "\n");
  if (a.json)
    PrintJson(eval::ToJson(*r));
  else
    eval::PrintText(*r, stdout);
  return 0;
}

}  // namespace chorus::cli
