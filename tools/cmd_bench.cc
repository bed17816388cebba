// `chorus bench`: flags, then one of the eval library's benchmarks: pp/tg tokens/s per thread count
// beside llama.cpp (eval::RunSpeedBench), decode at depth (RunDepthBench), N agents over one
// document (RunAgentsBench), a policy's cost (RunPolicyCost), or the machine's limits (ProbeMachines).
#include "eval/bench.h"  // BenchConfig, RunBench
#include "tools/common.h"

namespace chorus::cli {

RunFn AddBench(CLI::App& app) {
  auto a = std::make_shared<eval::BenchConfig>();
  CLI::App* cmd = app.add_subcommand("bench",
                                     "Prompt processing and generation tokens/s, beside llama.cpp "
                                     "(llama-cpp-python) on the same model and threads.");
  cmd->add_option("-m,--model", a->model, "GGUF model file (required, except with --machine)");
  cmd->add_option("-t,--threads", a->threads, "thread counts to measure")
      ->delimiter(',')
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--pp", a->pp, "prompt tokens")->check(CLI::Range(1, 8192))->capture_default_str();
  cmd->add_option("--tg", a->tg, "generated tokens")->check(CLI::Range(1, 8192))->capture_default_str();
  cmd->add_option("--reps", a->reps,
                  "measured repetitions on both sides (median and spread; pp/tg: one warm-up first; --agents: rounds, "
                  "each with a fresh engine and document prefill)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  cmd->add_flag("--no-peer", a->no_peer, "skip llama.cpp");
  cmd->add_option("--python", a->python, "python with llama-cpp-python")->capture_default_str();
  cmd->add_option("--peer", a->peer,
                  "pp/tg peer: best = llama.cpp's llama-bench over the original weights and llama-quantize's Q4_0 / "
                  "Q8_0 conversions, flash attention on and off (needs scripts/build_peer.sh); python = "
                  "llama-cpp-python, default settings")
      ->check(CLI::IsMember({"best", "python"}))
      ->capture_default_str();
  cmd->add_option("--depths", a->depths, "decode-at-depth mode: context depths, e.g. 0,1024,4096,8192")->delimiter(',');
  cmd->add_option("--agents", a->agents, "multi-agent mode: agent counts, e.g. 1,4,8,15 (one shared document)")
      ->delimiter(',')
      ->check(CLI::Range(1, 512));
  cmd->add_option("--doc-tokens", a->doc_tokens,
                  "multi-agent and policy-cost modes: shared document tokens (from --doc-file)")
      ->capture_default_str();
  cmd->add_option("--doc-file", a->doc_file, "multi-agent and policy-cost modes: text the document is cut from")
      ->capture_default_str();
  cmd->add_option("--kv-window", a->window,
                  "multi-agent mode: rows of the newest <32 tokens, f16, q8 or auto (default: the engine's, auto)");
  cmd->add_option("--kv", a->kv, "depth mode: chorus K/V formats, e.g. f16/f16,q8/tq3,kivi4/kivi4")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--peer-kv", a->peer_kv, "depth mode: llama.cpp KV types (f16, q8_0, q4_0)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_flag("--policy-cost", a->policy_cost,
                "policy-cost mode: per --policy-configs, one --doc-tokens document (from --doc-file) shared under the "
                "policy and one agent answering --question after it: relevance search, prefill, sealing and "
                "allocation time per 1K tokens, then --tg decode tokens/s at that depth (median of --reps agents; "
                "the last -t)");
  cmd->add_option(
         "--policy-configs", a->policy_configs,
         "policy-cost mode: f16, kivi4, K/V, comix-FAMILY:AVG[:tTIERS][:kB], cocktail-FAMILY:AVG[:tTIERS][:kB]")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--question", a->question, "policy-cost mode: the agent's question (cocktail's query)")
      ->capture_default_str();
  cmd->add_option("--encoder", a->encoder,
                  "policy-cost mode: cocktail's sentence-embedding model directory (default: "
                  "all-MiniLM-L6-v2 next to the model if installed, else the LLM's hidden states)");
  cmd->add_flag("--machine", a->machine,
                "measure this machine's limits for each -t (read bandwidth, f32 FMA and int8 dot-product peaks; "
                "about a second each) and exit; every other mode measures them too and prints its roofline");
  cmd->add_flag("--json", a->json, "print one JSON object");
  return [a] {
    if (!a->machine) {
      if (a->model.empty()) return Fail(Status::Error("--model is required (except with --machine)"));
      if (!a->window.empty())
        if (Status s = CheckEngineWindowFlag(a->window); !s.ok()) return Fail(s);
    }
    auto report = eval::RunBench(*a, stdout);
    if (!report.ok()) return Fail(report.status());
    if (a->json) PrintJson(*report);
    return 0;
  };
}

}  // namespace chorus::cli
