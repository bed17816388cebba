// `chorus eval needle`: flags, then eval::RunNeedle (src/eval/needle_eval.h): long-context retrieval
// on needle cases, per KV config; prints a table or the report's JSON.
#include "eval/needle_eval.h"
#include "tools/common.h"
#include "tools/policy_flags.h"  // LoadSensitivityTables, SensitivityFor

namespace chorus::cli {
namespace {

struct NeedleArgs {
  std::string model, file, dump, cases_file;
  eval::NeedleOptions gen;
  std::vector<std::string> configs = {"f16", "kivi4", "kivi2", "cocktail-paper"};
  std::string encoder, kv_window = EngineOptions{}.kv_window;
  int threads = DefaultThreads(), max_tokens = 8;
  bool json = false, ignore_eog = false, shared_questions = false;
  std::vector<std::string> sensitivity;  // tables of the ':m' allocator configs (one per family)
};

int RunNeedle(const NeedleArgs& a) {
  auto tables = LoadSensitivityTables(a.sensitivity);
  if (!tables.ok()) return Fail(tables.status());
  eval::NeedleConfig cfg{.model_path = a.model,
                         .corpus_path = a.file,
                         .cases_path = a.cases_file,
                         .gen = a.gen,
                         .dump_path = a.dump,
                         .encoder = a.encoder,
                         .kv_window = a.kv_window,
                         .threads = a.threads,
                         .answer_tokens = a.max_tokens,
                         .ignore_eog = a.ignore_eog,
                         .shared_questions = a.shared_questions,
                         .log = stderr};  // per-case lines in both modes (--json prints to stdout)
  for (const auto& s : a.configs) {
    auto policy = KvPolicy::Parse(s);
    if (!policy.ok()) return Fail(policy.status().Context("--configs"));
    eval::NeedleConfig::Run run{.name = s, .policy = *policy};
    if (a.shared_questions && run.policy.needs_questions()) run.name += "@shared";  // kept apart in summaries
    if (KvPolicy::Allocator* alloc = run.policy.allocator(); alloc && alloc->rank == KvPolicy::Rank::kMeasured) {
      auto t = SensitivityFor(*tables, std::string(FamilyName(alloc->family)), s);
      if (!t.ok()) return Fail(t.status());
      alloc->sensitivity = t->path;  // the engine reads it
    }
    cfg.runs.push_back(run);
  }
  if (Status s = CheckEngineWindowFlag(a.kv_window); !s.ok()) return Fail(s);
  auto report = eval::RunNeedle(cfg);
  if (!report.ok()) return Fail(report.status());
  if (a.json)
    PrintJson(eval::ToJson(*report));
  else
    eval::PrintTable(*report, stdout);
  return 0;
}

}  // namespace

std::pair<CLI::App*, RunFn> AddNeedleEval(CLI::App* eval) {
  auto a = std::make_shared<NeedleArgs>();
  CLI::App* cmd = eval->add_subcommand("needle", "Long-context retrieval: facts planted at random depths of WikiText-2 "
                                                 "excerpts; exact-answer accuracy, agreement with f16, measured bytes "
                                                 "(uniform formats vs Cocktail).");
  cmd->add_option("-m,--model", a->model, "GGUF model file")->required();
  cmd->add_option("-f,--file", a->file, "corpus (WikiText-2 test) for generated needle cases");
  cmd->add_option("--cases-file", a->cases_file, "cases as JSONL (document, question, answer, lead; e.g. from "
                                                 "scripts/make_needle_cases.py) instead of -f");
  cmd->add_option("--cases", a->gen.cases, "documents")->check(CLI::Range(1, 100000))->capture_default_str();
  cmd->add_option("--min-tokens", a->gen.min_tokens, "shortest document")->capture_default_str();
  cmd->add_option("--max-tokens", a->gen.max_tokens, "longest document")->capture_default_str();
  cmd->add_option("--facts", a->gen.facts, "facts planted per document")->capture_default_str();
  cmd->add_option("--seed", a->gen.seed, "generator seed")->capture_default_str();
  cmd->add_option("--configs", a->configs, "f16, kivi4, K/V pairs, cocktail-paper[:ALPHA:BETA[:CHUNK]], "
                                           "comix-FAMILY:AVG[:tTIERS][:kB][:m], cocktail-FAMILY:AVG[:tTIERS][:kB][:gGAIN][:v][:m]")
      ->delimiter(',')->capture_default_str();
  cmd->add_option("--comix-sensitivity", a->sensitivity, "tables of the ':m' allocator configs (the measured "
                                                         "ranking), one per family: `chorus eval sensitivity -o FILE`")
      ->delimiter(',');
  cmd->add_option("--encoder", a->encoder, "cocktail(-paper): sentence-embedding model directory (default: all-MiniLM-L6-v2 next to the model if installed, else the LLM's hidden states; 'hidden-states' forces those)");
  cmd->add_option("-n,--answer-tokens", a->max_tokens, "tokens generated per answer")->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--kv-window", a->kv_window, "rows of every sequence's newest <32 tokens before sealing: f16, q8 "
                  "or auto (the engine's: q8 for every compressed config, cocktail-paper included; f16 for f16)")->capture_default_str();
  cmd->add_flag("--shared-questions", a->shared_questions, "cocktail(-paper): consecutive cases with the same "
                "document share one context made for all their questions (several agents deciding one context's "
                "precision); without it each case's context is made for its own question");
  cmd->add_flag("--ignore-eog", a->ignore_eog, "keep decoding past end-of-generation (decode speed runs)");
  cmd->add_option("--dump", a->dump, "write the generated cases as JSONL");
  AddThreadsFlag(cmd, a->threads);
  cmd->add_flag("--json", a->json, "print one JSON object (with every case)");
  return {cmd, [a] { return RunNeedle(*a); }};
}

}  // namespace chorus::cli
