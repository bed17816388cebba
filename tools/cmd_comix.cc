// `chorus eval comix`: flags, then eval::RunComixEval (src/eval/comix_eval.h): CoMix vs uniform KV
// formats with staggered agents decoding together, against full fp16 KV. Prints a table, or one
// JSON object with --json.
#include "eval/comix_eval.h"
#include "tools/common.h"
#include "tools/policy_flags.h"  // LoadSensitivityTables, SensitivityFor

namespace chorus::cli {
namespace {

struct ComixArgs {
  std::string model, file = kWikiTextTest;
  size_t agents = 6, tokens = 480, prefill = 128, join_every = 32, answer = 16, sink = 1;
  std::vector<std::string> configs{"kivi2", "tq2", "comix-tq:2", "kivi3", "tq3", "comix-tq:3", "comix-kivi:3",
                                   "kivi4", "tq4", "comix-tq:4"};
  int threads = 1;
  bool json = false;
  std::string window = "q8";
  std::vector<std::string> sensitivity;  // tables for the :m configs (one per family)
};

int RunComixEval(const ComixArgs& a) {
  eval::ComixEvalConfig cfg{.model_path = a.model,
                            .text_name = a.file,
                            .agents = a.agents,
                            .tokens = a.tokens,
                            .prefill = a.prefill,
                            .join_every = a.join_every,
                            .answer = a.answer,
                            .sink = a.sink,
                            .threads = a.threads,
                            .window = a.window,
                            .table = a.json ? nullptr : stdout,
                            .log = a.json ? nullptr : stderr};
  auto tables = LoadSensitivityTables(a.sensitivity);
  if (!tables.ok()) return Fail(tables.status());
  for (const std::string& s : a.configs) {
    auto c = eval::ParseComixBenchConfig(s);
    if (!c.ok()) return Fail(c.status().Context("--configs"));
    if (c->measured) {
      auto t = SensitivityFor(*tables, c->family, s);
      if (!t.ok()) return Fail(t.status());
      c->sensitivity = t->table;
    }
    cfg.configs.push_back(*c);
  }
  auto text = ReadDefaultText(a.file, "-f");
  if (!text.ok()) return Fail(text.status());
  cfg.text = std::move(text).value();
  auto r = eval::RunComixEval(cfg);
  if (!r.ok()) return Fail(r.status());
  if (a.json) PrintJson(eval::ToJson(*r));
  return 0;
}

}  // namespace

std::pair<CLI::App*, RunFn> AddComixEval(CLI::App* eval) {
  auto a = std::make_shared<ComixArgs>();
  CLI::App* cmd = eval->add_subcommand(
      "comix", "CoMix vs uniform KV formats at equal average bits: several agents with their own WikiText-2 "
               "excerpts decoding together; PPL/KLD/top-1/answers vs full KV, peak KV bytes, decode speed.");
  cmd->add_option("-m,--model", a->model, "GGUF model file")->required();
  cmd->add_option("-f,--file", a->file, "text the agents read excerpts of")->capture_default_str();
  cmd->add_option("--agents", a->agents, "agents")->check(CLI::Range(1, 64))->capture_default_str();
  cmd->add_option("--tokens", a->tokens, "mean excerpt tokens per agent (2/3, 1, 4/3 of it in turn)")
      ->check(CLI::Range(64, 1 << 14))->capture_default_str();
  cmd->add_option("--prefill", a->prefill, "tokens each agent prefills when it joins")->check(CLI::Range(1, 512))
      ->capture_default_str();
  cmd->add_option("--join-every", a->join_every, "steps between agent joins")->capture_default_str();
  cmd->add_option("--answer", a->answer, "greedy answer tokens per agent")->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--kv-sink", a->sink, "leading 32-token blocks of a context kept f16")->capture_default_str();
  cmd->add_option("--kv-window", a->window, "window rows of the compressed configs: q8 or f16 (the f16 base: f16)")
      ->capture_default_str();
  cmd->add_option("--configs", a->configs, "uniform K/V (kivi3, q8/tq3) and comix-tq:B / comix-kivi:B (B = average "
                                           "bits 2..8; suffixes :cal, :m, :k4, :t348, :bound, :joint, :budget)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--comix-sensitivity", a->sensitivity, "the tables of the ':m' configs (measured ranking), one per "
                                                         "family, written by `chorus eval sensitivity -o FILE`")
      ->delimiter(',');
  AddThreadsFlag(cmd, a->threads);
  cmd->add_flag("--json", a->json, "print one JSON object");
  return {cmd, [a] { return RunComixEval(*a); }};
}

}  // namespace chorus::cli
