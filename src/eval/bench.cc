// `chorus bench` in one call (see bench.h).
#include "eval/bench.h"

#include "eval/agents_bench.h"
#include "eval/depth_bench.h"
#include "eval/harness.h"  // LoadModel, ReadFile, ChatFrame
#include "eval/policy_cost_bench.h"
#include "eval/roofline.h"  // ProbeMachines
#include "eval/speed_bench.h"

namespace chorus::eval {

Result<std::string> ReadDefaultText(const std::string& path, const char* flag) {
  auto text = ReadFile(path);
  if (text.ok() || path != kWikiTextTest) return text;
  return Status::Error(
      "cannot read '{}', the default of {}: WikiText-2's test split, which a clone does not ship "
      "(put it there, docs/EVAL.md) — or pass {} FILE, e.g. {} examples/du_fu.txt (24 KB of text)",
      path, flag, flag, flag);
}

Result<nlohmann::json> RunBench(const BenchConfig& a, std::FILE* out) {
  if (a.machine) {
    const MachineReport m = ProbeMachines(a.threads, a.json ? nullptr : out);
    if (a.json) return ToJson(m);
    PrintReadPatterns(m, out);
    return nlohmann::json();
  }
  std::FILE* table = a.json ? stderr : out;  // --json: stdout is the one JSON object
  const std::vector<std::string> peer_kv = a.no_peer ? std::vector<std::string>{} : a.peer_kv;
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Model> model_p, LoadModel(a.model));
  const Model& model = *model_p;
  if (a.policy_cost || !a.agents.empty()) {
    CHORUS_ASSIGN_OR_RETURN(std::string text, ReadDefaultText(a.doc_file, "--doc-file"));
    std::vector<int32_t> toks = model.tokenizer().Encode(text, false, false);
    if (toks.size() < a.doc_tokens) return Status::Error("'{}' has fewer than {} tokens", a.doc_file, a.doc_tokens);
    toks.resize(a.doc_tokens);
    if (a.policy_cost) {
      CHORUS_ASSIGN_OR_RETURN(auto frame, ChatFrame(model));
      CHORUS_ASSIGN_OR_RETURN(PolicyCostReport r, RunPolicyCost({.model = a.model,
                                                                 .doc = model.tokenizer().Decode(toks),
                                                                 .question = a.question,
                                                                 .frame = frame,
                                                                 .configs = a.policy_configs,
                                                                 .encoder = a.encoder,
                                                                 .threads = a.threads.back(),
                                                                 .tg = a.tg,
                                                                 .reps = a.reps,
                                                                 .log = stderr}));
      if (a.json) return ToJson(r);
      PrintTable(r, out);
      return nlohmann::json();
    }
    const bool default_kv = a.kv.size() == 1 && a.kv[0] == "f16/f16";
    CHORUS_ASSIGN_OR_RETURN(
        AgentsBenchReport r,
        RunAgentsBench(model, {.model = a.model,
                               .python = a.python,
                               .doc = model.tokenizer().Decode(toks),
                               .agents = a.agents,
                               .doc_tokens = a.doc_tokens,
                               .kv = default_kv ? std::vector<std::string>{"q8/tq3", "f16/f16"} : a.kv,
                               .peer_kv = peer_kv,
                               .threads = a.threads.back(),
                               .tg = a.tg,
                               .reps = a.reps,
                               .window = a.window,
                               .table = table}));
    return a.json ? ToJson(r) : nlohmann::json();
  }
  if (!a.depths.empty()) {
    CHORUS_ASSIGN_OR_RETURN(DepthBenchReport r, RunDepthBench(model, {.model = a.model,
                                                                      .python = a.python,
                                                                      .depths = a.depths,
                                                                      .kv = a.kv,
                                                                      .peer_kv = peer_kv,
                                                                      .threads = a.threads.back(),
                                                                      .tg = a.tg,
                                                                      .reps = a.reps,
                                                                      .table = table}));
    return a.json ? ToJson(r) : nlohmann::json();
  }
  CHORUS_ASSIGN_OR_RETURN(SpeedBenchReport r, RunSpeedBench(model, {.model = a.model,
                                                                    .python = a.python,
                                                                    .threads = a.threads,
                                                                    .pp = a.pp,
                                                                    .tg = a.tg,
                                                                    .reps = a.reps,
                                                                    .peer = a.no_peer ? "none" : a.peer}));
  if (a.json) return ToJson(r);
  PrintTable(r, out);
  return nlohmann::json();
}

}  // namespace chorus::eval
