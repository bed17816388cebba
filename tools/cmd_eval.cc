// `chorus eval ppl|logits|kld|sensitivity|...`: the flags of every eval subcommand, each run by one
// call into src/eval (perplexity_eval.h: perplexity, KLD, logits dumps).
#include "eval/perplexity_eval.h"
#include "tools/eval_args.h"

namespace chorus::cli {
namespace {

int RunPpl(const EvalArgs& a) {
  auto r = eval::RunPerplexity({.text = ChunkedTextOf(a), .kv = KvOptionsOf(a), .log = stderr});
  if (!r.ok()) return Fail(r.status());
  if (a.json)
    PrintJson(eval::ToJson(*r));
  else
    eval::PrintText(*r, stdout);
  return 0;
}

int RunLogits(const EvalArgs& a) {
  auto r = eval::RunLogits(LogitsConfigOf(a));
  if (!r.ok()) return Fail(r.status());
  if (a.json)
    PrintJson(eval::ToJson(*r));
  else
    std::printf("wrote %zu x %zu f32 logits to %s\n", r->tokens.size(), r->n_vocab, r->out.c_str());
  return 0;
}

}  // namespace

RunFn AddEval(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand("eval", "Quality evaluations: perplexity, logits dumps.");
  cmd->require_subcommand(1);
  CLI::App* ppl = cmd->add_subcommand("ppl",
                                      "Perplexity of a text file (llama.cpp's method: chunks of -c, "
                                      "second half of each chunk scored); uniform KV formats or --policy "
                                      "comix|cocktail|cocktail-paper.");
  CLI::App* lg = cmd->add_subcommand("logits", "Write the raw f32 logits of the first -n tokens of a file.");
  CLI::App* kld = cmd->add_subcommand(
      "kld",
      "Compressed KV vs f16 KV on the same positions: PPL delta, mean and "
      "p99 KL divergence, top-1 agreement, measured bits/element (--configs, and --policy comix|cocktail|"
      "cocktail-paper as one more row; --json: per-chunk KLD and NLL too).");
  CLI::App* sens = cmd->add_subcommand(
      "sensitivity",
      "Measure the KV's end-to-end sensitivity: for every layer, side (K/V) and width of a family, the "
      "mean KLD against f16 KV with only that layer's side at that width (chunks of -c, second halves "
      "scored); writes the table that `--comix-rank measured --comix-sensitivity FILE` allocates by.");
  for (CLI::App* s : {ppl, lg, kld, sens}) AddTextFlags(s, *a, /*json=*/s != sens, /*chunks=*/s != lg);
  sens->add_option("-o,--out", a->out, "the table (JSON)")->required();
  sens->add_option("--comix-family", a->family, "formats: tq (tq2/3/4) or kivi (kivi2/3/4); 8 = q8 in either")
      ->check(CLI::IsMember({"tq", "kivi"}))
      ->capture_default_str();
  sens->add_option("--comix-tiers", a->tiers, "widths to measure, ascending, of 2,3,4,8")->capture_default_str();
  sens->add_option("--kv-sink", a->kv.sink_blocks, "leading 32-token blocks kept f16 (as every compressed policy)")
      ->capture_default_str();
  sens->add_option("--kv-window", a->kv.window, "format of the newest < 32 rows: f16 or q8")->capture_default_str();
  for (CLI::App* s : {ppl, kld, lg}) {
    AddKvFlags(s, a->kv);
    AddPolicyFlags(s, a->pol,
                   {.default_spec = "f16",
                    .with_query = s != lg,
                    .where = s == lg ? "uniform formats only (K/V)"
                                     : "each chunk of -c tokens is one sequence under it (cocktail: its blocks "
                                       "weighted by their relevance to --query; cocktail-paper: its own chunk map "
                                       "from --query); kld: one more row after --configs"});
  }
  kld->add_option("--configs", a->configs,
                  "several policies at once, e.g. q8/q8,q8/tq3,comix-tq:3 (the f16 base runs once; each takes "
                  "--kv-budget, --comix-sensitivity, --encoder and --query as --policy does)")
      ->delimiter(',');
  lg->add_option("-n,--n-tokens", a->n_tokens, "tokens to evaluate")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  lg->add_option("-o,--out", a->out, "output file (raw f32, n_tokens x n_vocab)")->required();
  const std::vector<std::pair<CLI::App*, RunFn>> others{AddPolykvEval(cmd), AddComixEval(cmd), AddNeedleEval(cmd),
                                                        AddSegmentEval(cmd)};  // in their own files
  return [a, ppl, kld, lg, sens, others] {
    for (const auto& [sub, run] : others)
      if (sub->parsed()) return run();
    for (CLI::App* s : {ppl, kld, lg}) {
      if (!s->parsed()) continue;
      if (Status st = CheckPolicyFlags(s, a->pol, /*need_query=*/true); !st.ok()) return Fail(st);
      a->policy_given = s->count("--policy") > 0;
    }
    if (ppl->parsed()) return RunPpl(*a);
    if (sens->parsed()) {
      if (sens->count("--ctx") == 0) a->ctx = 256;
      if (sens->count("--chunks") == 0) a->chunks = 4;
      return RunSensitivity(*a);
    }
    if (kld->parsed()) {
      if (kld->count("--ctx") == 0) a->ctx = 2048;
      return RunKld(*a);
    }
    return RunLogits(*a);
  };
}

}  // namespace chorus::cli
