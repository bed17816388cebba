// `chorus agents`: flags, then eval::RunAgents (src/eval/agents_run.h): one shared document, one
// agent per question, all decoding together (or one request per role with --roles); prints each
// answer and the measured KV memory against an fp16 copy per agent, or the report's JSON.
#include "eval/agents_run.h"
#include "tools/common.h"
#include "tools/engine_flags.h"  // EngineFlags

namespace chorus::cli {
namespace {

struct AgentsArgs {
  EngineFlags engine;  // reuse: "segments"
  std::string doc, questions;
  std::string roles;  // --roles FILE: one system prompt per agent
  int max_tokens = 96;
  bool json = false, quiet = false;
};

int RunAgents(const AgentsArgs& a, const CLI::App& cmd) {
  auto doc = ReadDocument(a.doc);
  if (!doc.ok()) return Fail(doc.status());
  auto eo = ToEngineOptions(a.engine);
  if (!eo.ok()) return Fail(eo.status());
  if (a.roles.empty())
    for (const char* o : {"--reuse", "--repair"})
      if (cmd.count(o)) return Fail(Status::Error("{} needs --roles (one system prompt per agent)", o));
  auto report = eval::RunAgents({.engine = *eo,
                                 .policy_name = a.engine.pol.spec,
                                 .document = doc.value(),
                                 .questions_file = a.questions,
                                 .roles_file = a.roles,
                                 .max_tokens = a.max_tokens,
                                 .reuse = eo->segments.reuse,
                                 .progress = a.quiet ? nullptr : stderr,
                                 .step_progress = !a.json});
  if (!report.ok()) return Fail(report.status());
  if (a.json)
    PrintJson(eval::ToJson(*report));
  else
    eval::PrintText(*report, stdout);
  return 0;
}

}  // namespace

RunFn AddAgents(CLI::App& app) {
  auto a = std::make_shared<AgentsArgs>();
  a->engine.reuse = "segments";
  CLI::App* cmd = app.add_subcommand("agents", "Many agents, one document: the document's KV is computed and "
                                               "compressed once, every agent (one per question) reads it, all "
                                               "decode together in one batch per step.");
  cmd->add_option("-m,--model", a->engine.model, "GGUF model file")->required();
  cmd->add_option("--doc", a->doc, "the shared document (text file)")->required();
  cmd->add_option("--questions", a->questions,
                  "questions, one per line: one agent each (with --roles: one per "
                  "role, or one asked by every role)")
      ->required();
  cmd->add_option("--roles", a->roles,
                  "one system prompt per line, one agent each, each followed by the document "
                  "and its question (as agent frameworks build prompts): every agent is its own "
                  "request; the document is computed once and reused at the other agents' "
                  "offsets (segments), its head recomputed (--repair)");
  cmd->add_option("--reuse", a->engine.reuse,
                  "with --roles: segments (reuse the document after another role) or exact "
                  "(only identical prefixes: every role prefills the document)")
      ->check(CLI::IsMember({"exact", "segments"}))
      ->capture_default_str();
  cmd->add_option("--repair", a->engine.repair, "with --roles: fraction of a reused span recomputed at its head")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("-n,--max-tokens", a->max_tokens, "tokens per answer")->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  AddPolicyFlags(cmd, a->engine.pol,
                 {.default_spec = "chorus",
                  .budget_any_policy = true,
                  .where = "for the shared document (uniform: its formats; comix: bits per agent x layer x K/V "
                           "under one budget; cocktail: the same, the document's blocks weighted by their relevance "
                           "to the questions, all agents deciding together; cocktail-paper: f16/kivi4/kivi2 per "
                           "chunk by its similarity to the questions)"});
  AddEngineKvFlags(cmd, a->engine,
                   {.whose = "each agent's own blocks",
                    .sink = "leading 32-token blocks of a context kept f16",
                    .window = "rows of every sequence's newest <32 tokens before sealing: f16, q8 (half the "
                              "bytes) or auto (q8 unless the shared formats are f16/f16; default: " +
                              EngineOptions{}.kv_window + ")"});
  cmd->add_option("-c,--ctx", a->engine.ctx, "positions per agent (document + question + answer)")
      ->check(CLI::Range(1, 1 << 24));
  AddThreadsFlag(cmd, a->engine.threads);
  cmd->add_flag("--quiet", a->quiet, "no progress lines");
  cmd->add_flag("--json", a->json, "print one JSON object");
  return [a, cmd] {
    if (Status s = CheckPolicyFlags(cmd, a->engine.pol, /*need_query=*/false); !s.ok()) return Fail(s);
    return RunAgents(*a, *cmd);
  };
}

}  // namespace chorus::cli
