// `chorus bench`: prompt-processing and generation tokens/s for several thread counts, beside
// llama.cpp (llama-cpp-python, scripts/ref/llama_bench.py) on the same model and threads, as ratios.
#include <algorithm>
#include <cstdio>
#include <sstream>
#include <tuple>

#include "eval/agents_bench.h"
#include "eval/depth_bench.h"
#include "eval/policy_cost_bench.h"
#include "eval/roofline.h"
#include "model/forward.h"
#include "model/sampler.h"  // ArgMax
#include "ops/matmul.h"     // MatMulPath
#include "tools/common.h"
#include "util/timer.h"

namespace chorus::cli {
namespace {

struct BenchArgs {
  std::string model;
  std::vector<int> threads{1, 2};
  int pp = 512, tg = 128, reps = 3;
  bool no_peer = false, json = false, machine = false;
  std::string python = "python3";
  std::string peer = "best";   // pp/tg mode: best (llama-bench over weights/FA variants) or python
  std::vector<size_t> depths;  // decode-at-depth mode
  std::vector<size_t> agents;  // multi-agent mode
  size_t doc_tokens = 4096;
  std::string doc_file = kWikiTextTest;
  std::vector<std::string> kv{"f16/f16"}, peer_kv{"f16", "q8_0", "q4_0"};
  std::string window;
  bool policy_cost = false;  // --policy-cost mode
  std::vector<std::string> policy_configs{"f16", "kivi4", "comix-kivi:4:t348:k4", "cocktail-kivi:4:t348:k4"};
  std::string question = "Which roles did the actor play, and in which years?";
  std::string encoder;
};

struct Speeds {
  double pp = 0, tg = 0;
  double kv_bytes_per_token = 0;  // the live cache's bytes / its token capacity
  double pp_min = 0, pp_max = 0, tg_min = 0, tg_max = 0;  // spread of the reps
};

Result<Speeds> MeasureOurs(const Model& model, int threads, const BenchArgs& a) {
  const ModelConfig& c = model.config();
  ThreadPool pool(threads);
  ForwardPass fwd(model, 512);
  DenseKvCache kv = fwd.MakeCache(std::max(a.pp, a.tg) + 1);
  std::vector<float> logits(c.n_vocab);
  std::vector<int32_t> prompt(a.pp);
  uint64_t state = 12345;
  for (auto& t : prompt) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    t = static_cast<int32_t>((state >> 33) % c.n_vocab);
  }
  std::vector<double> pp_rates, tg_rates;
  for (int r = 0; r <= a.reps; ++r) {  // r == 0 is the warm-up
    kv.Clear();
    Timer t;
    CHORUS_RETURN_IF_ERROR(fwd.Run(prompt, kv, pool, LogitsFor::kLast, logits.data()));
    if (r > 0) pp_rates.push_back(a.pp / t.Seconds());
    kv.Clear();
    int32_t tok = prompt[0];
    t.Reset();
    for (int i = 0; i < a.tg; ++i) {
      const int32_t one[1] = {tok};
      CHORUS_RETURN_IF_ERROR(fwd.Run(one, kv, pool, LogitsFor::kLast, logits.data()));
      tok = ArgMax(logits.data(), c.n_vocab);
    }
    if (r > 0) tg_rates.push_back(a.tg / t.Seconds());
  }
  Speeds s{Median(pp_rates), Median(tg_rates), static_cast<double>(kv.bytes()) / (std::max(a.pp, a.tg) + 1)};
  std::tie(s.pp_min, s.pp_max) = std::pair(*std::min_element(pp_rates.begin(), pp_rates.end()),
                                           *std::max_element(pp_rates.begin(), pp_rates.end()));
  std::tie(s.tg_min, s.tg_max) = std::pair(*std::min_element(tg_rates.begin(), tg_rates.end()),
                                           *std::max_element(tg_rates.begin(), tg_rates.end()));
  return s;
}

// Runs the llama.cpp peer and returns its JSON, or an error saying why it could not run.
// --peer best: llama.cpp's own llama-bench over the original weights and its Q4_0 / Q8_0
// conversions, flash attention on and off (scripts/ref/llama_best.py), the best median per test;
// if llama.cpp's tools are not built, llama-cpp-python with default settings, and says so.
Result<nlohmann::json> MeasurePeer(const BenchArgs& a, std::string* note) {
  std::ostringstream threads;
  for (size_t i = 0; i < a.threads.size(); ++i) threads << (i ? "," : "") << a.threads[i];
  std::ostringstream best, fallback;
  if (a.peer == "best")
    best << a.python << " scripts/ref/llama_best.py -m '" << a.model << "' --threads " << threads.str() << " --pp "
         << a.pp << " --tg " << a.tg << " --reps " << a.reps << " --json";
  fallback << a.python << " scripts/ref/llama_bench.py --model '" << a.model << "' --threads " << threads.str()
           << " --pp " << a.pp << " --tg " << a.tg << " --reps " << a.reps << " --json";
  return RunBestPeerJson(best.str(), fallback.str(), "llama-cpp-python, its default settings only", note);
}

int RunBench(const BenchArgs& a) {
  if (a.machine) {
    const eval::MachineReport m = eval::ProbeMachines(a.threads, a.json ? nullptr : stdout);
    if (a.json)
      PrintJson(eval::ToJson(m));
    else
      eval::PrintReadPatterns(m, stdout);
    return 0;
  }
  if (a.model.empty()) return Fail(Status::Error("--model is required (except with --machine)"));
  if (!a.window.empty())
    if (Status s = CheckEngineWindowFlag(a.window); !s.ok()) return Fail(s);
  auto model_r = LoadModel(a.model);
  if (!model_r.ok()) return Fail(model_r.status());
  const Model& model = *model_r.value();
  if (a.policy_cost || !a.agents.empty()) {
    auto text = ReadDefaultText(a.doc_file, "--doc-file");
    if (!text.ok()) return Fail(text.status());
    std::vector<int32_t> toks = model.tokenizer().Encode(text.value(), false, false);
    if (toks.size() < a.doc_tokens) return Fail(Status::Error("'{}' has fewer than {} tokens", a.doc_file, a.doc_tokens));
    toks.resize(a.doc_tokens);
    if (a.policy_cost) {
      auto frame = ChatFrame(model);
      if (!frame.ok()) return Fail(frame.status());
      auto r = eval::RunPolicyCost({.model = a.model,
                                    .doc = model.tokenizer().Decode(toks),
                                    .question = a.question,
                                    .frame = *frame,
                                    .configs = a.policy_configs,
                                    .encoder = a.encoder,
                                    .threads = a.threads.back(),
                                    .tg = a.tg,
                                    .reps = a.reps,
                                    .log = stderr});
      if (!r.ok()) return Fail(r.status());
      if (a.json)
        PrintJson(eval::ToJson(*r));
      else
        eval::PrintTable(*r, stdout);
      return 0;
    }
    auto r = eval::RunAgentsBench(
        model, {.model = a.model,
                .python = a.python,
                .doc = model.tokenizer().Decode(toks),
                .agents = a.agents,
                .doc_tokens = a.doc_tokens,
                .kv = a.kv.size() == 1 && a.kv[0] == "f16/f16" ? std::vector<std::string>{"q8/tq3", "f16/f16"} : a.kv,
                .peer_kv = a.no_peer ? std::vector<std::string>{} : a.peer_kv,
                .threads = a.threads.back(),
                .tg = a.tg,
                .reps = a.reps,
                .window = a.window,
                .table = a.json ? stderr : stdout});  // --json: stdout is the one JSON object
    if (!r.ok()) return Fail(r.status());
    if (a.json) PrintJson(eval::ToJson(*r));
    return 0;
  }
  if (!a.depths.empty()) {
    auto r = eval::RunDepthBench(model, {.model = a.model,
                                         .python = a.python,
                                         .depths = a.depths,
                                         .kv = a.kv,
                                         .peer_kv = a.no_peer ? std::vector<std::string>{} : a.peer_kv,
                                         .threads = a.threads.back(),
                                         .tg = a.tg,
                                         .reps = a.reps,
                                         .table = a.json ? stderr : stdout});  // --json: stdout is the JSON
    if (!r.ok()) return Fail(r.status());
    if (a.json) PrintJson(eval::ToJson(*r));
    return 0;
  }
  nlohmann::json report = {{"model", a.model}, {"pp_tokens", a.pp}, {"tg_tokens", a.tg}, {"reps", a.reps}};
  std::map<int, Speeds> ours;
  std::map<int, MachineLimits> limits;
  report["load_average_before"] = LoadAverage();
  for (int t : a.threads) {
    std::fprintf(stderr, "machine probe: %d thread(s) ...\n", t);
    {
      ThreadPool pool(t);
      limits[t] = ProbeMachine(pool);
    }
    std::fprintf(stderr, "chorus: %d thread(s) ...\n", t);
    auto s = MeasureOurs(model, t, a);
    if (!s.ok()) return Fail(s.status());
    ours[t] = s.value();
    report["chorus"][std::to_string(t)] = {{"pp", s->pp}, {"tg", s->tg}, {"pp_spread", {s->pp_min, s->pp_max}},
                                           {"tg_spread", {s->tg_min, s->tg_max}}};
    report["machine"][std::to_string(t)] = eval::MachineJson(limits[t]);
  }
  // Roofline: pp = one pass over the prompt; tg = a decode step at the run's mean depth (tg / 2).
  const eval::StepCost pp_cost = eval::PrefillCost(model, a.pp);
  auto tg_cost = [&](int t) { return eval::DecodeStepCost(model, a.tg / 2, ours[t].kv_bytes_per_token); };
  report["rss_bytes"] = ResidentBytes();
  report["model_file_weight_bytes"] = model.weight_bytes();
  nlohmann::json peer;
  std::string peer_error;
  if (!a.no_peer) {
    std::fprintf(stderr, "llama.cpp peer ...\n");
    std::string note;
    auto p = MeasurePeer(a, &note);
    if (!note.empty()) {
      std::fprintf(stderr, "%s\n", note.c_str());
      report["llama_cpp_note"] = note;
    }
    if (p.ok()) {
      peer = p.value();
      report["llama_cpp"] = peer;
    } else {
      peer_error = p.status().message();
      report["llama_cpp_error"] = peer_error;
    }
  }
  auto peer_rate = [&](int t, const char* key) -> double {
    const std::string ts = std::to_string(t);
    if (peer.is_null() || !peer.contains("threads") || !peer["threads"].contains(ts)) return 0;
    return peer["threads"][ts].value(key, 0.0);
  };
  for (int t : a.threads) {
    const std::string ts = std::to_string(t);
    const double ppp = peer_rate(t, "pp"), ptg = peer_rate(t, "tg");
    if (ppp > 0) report["ratio"][ts] = {{"pp", ours[t].pp / ppp}, {"tg", ours[t].tg / ptg}};
    report["roofline"][ts] = {
        {"pp", eval::RoofJson(pp_cost, a.pp, eval::RoofFor(pp_cost, a.pp, limits[t]), ours[t].pp)},
        {"tg", eval::RoofJson(tg_cost(t), 1, eval::RoofFor(tg_cost(t), 1, limits[t]), ours[t].tg)}};
  }
  report["load_average_after"] = LoadAverage();
  if (a.json) {
    PrintJson(report);
    return 0;
  }
  std::printf("kernels: %s\n", MatMulPath());
  std::printf("%-8s %-8s %14s %14s %8s %11s %8s %8s %9s  %s\n", "threads", "test", "chorus tok/s", "llama.cpp",
              "ratio", "roof tok/s", "chorus", "peer", "MB/token", "bound");
  for (int t : a.threads) {
    for (int k = 0; k < 2; ++k) {
      const double mine = k == 0 ? ours[t].pp : ours[t].tg;
      const double theirs = peer_rate(t, k == 0 ? "pp" : "tg");
      const std::string name = (k == 0 ? "pp" : "tg") + std::to_string(k == 0 ? a.pp : a.tg);
      const eval::StepCost cost = k == 0 ? pp_cost : tg_cost(t);
      const size_t n = k == 0 ? a.pp : 1;
      const eval::Roof roof = eval::RoofFor(cost, n, limits[t]);
      char peer_s[32] = "-", ratio_s[32] = "-", peer_pct[32] = "-";
      if (theirs > 0) {
        std::snprintf(peer_s, sizeof peer_s, "%.1f", theirs);
        std::snprintf(ratio_s, sizeof ratio_s, "%.2fx", mine / theirs);
        std::snprintf(peer_pct, sizeof peer_pct, "%.0f%%", 100 * theirs / roof.tok_s);
      }
      std::printf("%-8d %-8s %14.1f %14s %8s %11.1f %7.0f%% %8s %9.1f  %s\n", t, name.c_str(), mine, peer_s, ratio_s,
                  roof.tok_s, 100 * mine / roof.tok_s, peer_pct, cost.bytes / n * 1e-6, roof.bound);
    }
  }
  for (int t : a.threads)
    std::printf("chorus, %d thread(s): pp spread %.1f-%.1f, tg spread %.1f-%.1f (median of %d)\n", t, ours[t].pp_min,
                ours[t].pp_max, ours[t].tg_min, ours[t].tg_max, a.reps);
  for (int t : a.threads) {
    const std::string ts = std::to_string(t);
    if (peer.is_null() || !peer.contains("threads") || !peer["threads"].contains(ts)) continue;
    for (const char* k : {"pp", "tg"}) {
      const nlohmann::json& pt = peer["threads"][ts];
      const std::string key = std::string(k) + "_settings";
      if (pt.contains(key))
        std::printf("llama.cpp best %s, %d thread(s): %s (median of %d; spread %.1f-%.1f)\n", k, t,
                    pt[key].get<std::string>().c_str(), a.reps, pt[std::string(k) + "_spread"][0].get<double>(),
                    pt[std::string(k) + "_spread"][1].get<double>());
    }
  }
  for (int t : a.threads)
    std::printf("machine, %d thread(s): read %.1f GB/s (%s; 1 plain stream %.1f), f32 %.1f GFLOP/s, int8 %.1f GOP/s (%s), AMX int8 %.1f GOP/s\n", t,
                limits[t].read_bytes_per_s * 1e-9, limits[t].read_pattern.c_str(), limits[t].read_sequential_bytes_per_s * 1e-9,
                limits[t].f32_flops_per_s * 1e-9, limits[t].int8_ops_per_s * 1e-9,
                limits[t].simd.c_str(), limits[t].amx_int8_ops_per_s * 1e-9);
  std::printf("roof: min(read bandwidth / bytes per token, int8 peak (AMX where present) / ops per token); load average %.2f -> %.2f\n",
              report["load_average_before"].get<double>(), report["load_average_after"].get<double>());
  std::printf("chorus RSS %.1f MiB (weights in file: %.1f MiB, mmap'ed, not copied)\n",
              ResidentBytes() / 1048576.0, model.weight_bytes() / 1048576.0);
  if (!peer_error.empty()) std::printf("peer not run: %s\n", peer_error.c_str());
  return 0;
}

}  // namespace

RunFn AddBench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand("bench", "Prompt processing and generation tokens/s, beside llama.cpp "
                                              "(llama-cpp-python) on the same model and threads.");
  cmd->add_option("-m,--model", a->model, "GGUF model file (required, except with --machine)");
  cmd->add_option("-t,--threads", a->threads, "thread counts to measure")->delimiter(',')
      ->check(CLI::Range(1, 256))->capture_default_str();
  cmd->add_option("--pp", a->pp, "prompt tokens")->check(CLI::Range(1, 8192))->capture_default_str();
  cmd->add_option("--tg", a->tg, "generated tokens")->check(CLI::Range(1, 8192))->capture_default_str();
  cmd->add_option("--reps", a->reps, "measured repetitions on both sides (median and spread; pp/tg: one warm-up first; --agents: rounds, each with a fresh engine and document prefill)")
      ->check(CLI::Range(1, 100))->capture_default_str();
  cmd->add_flag("--no-peer", a->no_peer, "skip llama.cpp");
  cmd->add_option("--python", a->python, "python with llama-cpp-python")->capture_default_str();
  cmd->add_option("--peer", a->peer,
                  "pp/tg peer: best = llama.cpp's llama-bench over the original weights and llama-quantize's Q4_0 / "
                  "Q8_0 conversions, flash attention on and off (needs scripts/build_peer.sh); python = "
                  "llama-cpp-python, default settings")
      ->check(CLI::IsMember({"best", "python"}))->capture_default_str();
  cmd->add_option("--depths", a->depths, "decode-at-depth mode: context depths, e.g. 0,1024,4096,8192")
      ->delimiter(',');
  cmd->add_option("--agents", a->agents, "multi-agent mode: agent counts, e.g. 1,4,8,15 (one shared document)")
      ->delimiter(',')->check(CLI::Range(1, 512));
  cmd->add_option("--doc-tokens", a->doc_tokens, "multi-agent and policy-cost modes: shared document tokens (from --doc-file)")
      ->capture_default_str();
  cmd->add_option("--doc-file", a->doc_file, "multi-agent and policy-cost modes: text the document is cut from")->capture_default_str();
  cmd->add_option("--kv-window", a->window, "multi-agent mode: rows of the newest <32 tokens, f16, q8 or auto (default: the engine's, auto)");
  cmd->add_option("--kv", a->kv, "depth mode: chorus K/V formats, e.g. f16/f16,q8/tq3,kivi4/kivi4")
      ->delimiter(',')->capture_default_str();
  cmd->add_option("--peer-kv", a->peer_kv, "depth mode: llama.cpp KV types (f16, q8_0, q4_0)")
      ->delimiter(',')->capture_default_str();
  cmd->add_flag("--policy-cost", a->policy_cost,
                "policy-cost mode: per --policy-configs, one --doc-tokens document (from --doc-file) shared under the "
                "policy and one agent answering --question after it: relevance search, prefill, sealing and "
                "allocation time per 1K tokens, then --tg decode tokens/s at that depth (median of --reps agents; "
                "the last -t)");
  cmd->add_option("--policy-configs", a->policy_configs,
                  "policy-cost mode: f16, kivi4, K/V, comix-FAMILY:AVG[:tTIERS][:kB], cocktail-FAMILY:AVG[:tTIERS][:kB]")
      ->delimiter(',')->capture_default_str();
  cmd->add_option("--question", a->question, "policy-cost mode: the agent's question (cocktail's query)")
      ->capture_default_str();
  cmd->add_option("--encoder", a->encoder, "policy-cost mode: cocktail's sentence-embedding model directory (default: "
                                           "all-MiniLM-L6-v2 next to the model if installed, else the LLM's hidden states)");
  cmd->add_flag("--machine", a->machine,
                "measure this machine's limits for each -t (read bandwidth, f32 FMA and int8 dot-product peaks; "
                "about a second each) and exit; every other mode measures them too and prints its roofline");
  cmd->add_flag("--json", a->json, "print one JSON object");
  return [a] { return RunBench(*a); };
}

}  // namespace chorus::cli
