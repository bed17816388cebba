// N agents over one shared document beside llama.cpp (see agents_bench.h). The peer: one prefill,
// the sequence copied to the others, batched decode (scripts/ref/llama_agents_bench.py).
#include "eval/agents_bench.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "chorus/engine.h"
#include "eval/harness.h"  // LoadAverage
#include "eval/peer.h"     // RunBestPeerJson, RunPeerJson
#include "eval/report.h"   // Versioned
#include "eval/roofline.h"
#include "util/timer.h"

namespace chorus::eval {
namespace {

// llama.cpp's aggregate decode rates, one JSON per peer column: {"best": ...} from llama-batched-bench
// over weights (original, Q4_0) × flash attention × unified KV × the peer KV types
// (scripts/ref/llama_agents_best.py, the best median per agent count and its settings), or, without
// llama.cpp's tools, one llama-cpp-python run per KV type (scripts/ref/llama_agents_bench.py).
std::map<std::string, nlohmann::json> Peers(const AgentsBenchConfig& a, AgentsBenchReport* report) {
  std::map<std::string, nlohmann::json> peers;
  if (a.peer_kv.empty()) return peers;
  std::ostringstream agents, kvs;
  for (size_t i = 0; i < a.agents.size(); ++i) agents << (i ? "," : "") << a.agents[i];
  for (size_t i = 0; i < a.peer_kv.size(); ++i) kvs << (i ? "," : "") << a.peer_kv[i];
  auto fallback = [&](const std::string& kv_type) {
    std::ostringstream cmd;
    cmd << a.python << " scripts/ref/llama_agents_bench.py -m '" << a.model << "' --doc-tokens " << a.doc_tokens
        << " --tg " << a.tg << " --threads " << a.threads << " --kv-type " << kv_type << " --agents " << agents.str()
        << " --json 2>/dev/null";
    return cmd.str();
  };
  std::ostringstream best;
  best << a.python << " scripts/ref/llama_agents_best.py -m '" << a.model << "' --doc-tokens " << a.doc_tokens
       << " --tg " << a.tg << " --threads " << a.threads << " --reps " << a.reps << " --kv " << kvs.str()
       << " --agents " << agents.str() << " --json";
  if (a.log) std::fprintf(a.log, "llama.cpp at its best (llama-batched-bench variants) ...\n");
  std::string note;
  auto r = RunBestPeerJson(best.str(), fallback(a.peer_kv[0]), "llama-cpp-python, llama_agents_bench.py, per KV type",
                           &note, [](const nlohmann::json& j) { return j.contains("agents") && !j["agents"].empty(); });
  if (note.empty() && r.ok()) {
    peers["best"] = r.value();
    return peers;
  }
  report->llama_cpp_note = note;
  if (a.log) std::fprintf(a.log, "%s\n", note.c_str());
  for (size_t i = 0; i < a.peer_kv.size(); ++i) {
    const std::string& t = a.peer_kv[i];
    auto p = i == 0 ? std::move(r) : RunPeerJson(fallback(t));
    if (p.ok())
      peers[t] = p.value();
    else
      report->llama_cpp_error[t] = p.status().message();
  }
  return peers;
}

}  // namespace

namespace {

struct ChorusRow {
  double tps = 0;
  double tps_min = 0, tps_max = 0;  // spread over the rounds (set on the median row)
  size_t peak_kv_bytes = 0;         // measured: everything the KV layer held at its peak during the round
  double mean_kv_bytes = 0;         // measured: the KV layer's bytes averaged over the round's steps
};

// One engine per K/V config: the document is prefilled and shared once, then each agent count
// runs as a round (N agents spawned over the context, decoded together until all are done;
// their private KV is freed before the next round).
Status RunChorusConfig(const std::string& doc_text, const AgentsBenchConfig& a, const std::string& kv,
                       double* prefill_s, size_t* shared_bytes, std::map<size_t, ChorusRow>* rows) {
  CHORUS_ASSIGN_OR_RETURN(const KvPolicy policy, KvPolicy::Parse(kv));
  const auto* u = std::get_if<KvPolicy::Uniform>(&policy.rule);
  if (u == nullptr) return Status::Error("--kv entry '{}' must be uniform formats K/V", kv);
  EngineOptions eo{.model_path = a.model,
                   .threads = a.threads,
                   .n_ctx = a.doc_tokens + a.tg + 64,
                   .policy = policy,
                   .private_k = u->k,
                   .private_v = u->v};
  if (!a.window.empty()) eo.kv_window = a.window;
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Engine> e, Engine::Open(eo));
  Timer t_prefill;
  CHORUS_ASSIGN_OR_RETURN(ContextId ctx, e->Share(doc_text));
  *prefill_s = t_prefill.Seconds();
  *shared_bytes = e->KvReport().shared_bytes;
  for (size_t n : a.agents) {
    for (size_t i = 0; i < n; ++i)
      CHORUS_RETURN_IF_ERROR(
          e->Spawn(ctx, "\nQ" + std::to_string(i) + ":", {.max_tokens = a.tg, .ignore_eog = true}).status());
    ChorusRow r;
    r.peak_kv_bytes = e->KvReport().total_bytes;
    Timer t;
    size_t steps = 0;
    double kv_sum = 0;
    while (e->running()) {
      CHORUS_RETURN_IF_ERROR(e->Step());
      const size_t now = e->KvReport().total_bytes;
      r.peak_kv_bytes = std::max(r.peak_kv_bytes, now);
      kv_sum += static_cast<double>(now);
      ++steps;
    }
    r.mean_kv_bytes = steps ? kv_sum / steps : 0;
    // The first token of each agent comes from its prompt's prefill; steps produce the rest.
    r.tps = double(n) * steps / t.Seconds();
    (*rows)[n] = r;
    if (a.log) std::fprintf(a.log, "chorus %s: %zu agents %.1f tok/s\n", kv.c_str(), n, r.tps);
  }
  return Status::Ok();
}

// The round with the median aggregate rate, carrying the spread of all rounds.
ChorusRow MedianRow(std::vector<ChorusRow> rounds) {
  std::sort(rounds.begin(), rounds.end(), [](const ChorusRow& x, const ChorusRow& y) { return x.tps < y.tps; });
  ChorusRow m = rounds[rounds.size() / 2];
  m.tps_min = rounds.front().tps;
  m.tps_max = rounds.back().tps;
  return m;
}

}  // namespace

Result<AgentsBenchReport> RunAgentsBench(const Model& model, const AgentsBenchConfig& a) {
  if (a.agents.empty()) return Status::Error("no agent counts to run");
  for (size_t n : a.agents)
    if (n == 0) return Status::Error("an agent count must be at least 1");
  if (a.kv.empty()) return Status::Error("no K/V configs to run");
  AgentsBenchReport report{
      .doc_tokens = a.doc_tokens, .tg = a.tg, .threads = a.threads, .load_average_before = LoadAverage()};
  MachineLimits limits;
  {
    ThreadPool pool(a.threads);
    limits = ProbeMachine(pool);
  }
  report.machine = limits;
  const std::string& doc_text = a.doc;
  // One batched step of n agents reads the weights once and every KV byte held once (the shared
  // document once for all its readers), and computes n tokens.
  const ModelConfig& mc = model.config();
  auto step_cost = [&](const ChorusRow& r, size_t n, const std::string& kv) {
    StepCost c = WeightCost(model);
    c.ops *= static_cast<double>(n);
    c.bytes += r.mean_kv_bytes;
    c.attn_ops = 4.0 * mc.n_layer * mc.n_head * mc.head_dim * (a.doc_tokens + a.tg / 2.0) * n;
    const size_t slash = kv.find('/');  // checked by RunChorusConfig
    const Result<KvFormat> k = ParseKvFormat(kv.substr(0, slash)), v = ParseKvFormat(kv.substr(slash + 1));
    if (k.ok() && v.ok()) c.attn_int8_ops = c.attn_ops * Int8AttentionShare(k.value(), v.value(), mc.head_dim);
    c.ops += c.attn_ops;
    return c;
  };
  std::map<std::string, nlohmann::json> peers = Peers(a, &report);
  std::vector<std::string> peer_cols;
  for (const auto& [t, p] : peers) peer_cols.push_back(t);
  std::map<std::string, std::map<size_t, ChorusRow>> chorus;
  std::map<std::string, double> prefill;
  // a.reps rounds per config, each on a fresh engine with its own document prefill: medians and spread.
  for (const auto& kv : a.kv) {
    size_t shared = 0;
    std::vector<double> prefills;
    std::map<size_t, std::vector<ChorusRow>> rounds;
    for (int rep = 0; rep < std::max(1, a.reps); ++rep) {
      double pre = 0;
      std::map<size_t, ChorusRow> rows;
      CHORUS_RETURN_IF_ERROR(RunChorusConfig(doc_text, a, kv, &pre, &shared, &rows).Context(kv));
      prefills.push_back(pre);
      for (const auto& [n, r] : rows) rounds[n].push_back(r);
    }
    std::sort(prefills.begin(), prefills.end());
    prefill[kv] = prefills[prefills.size() / 2];
    for (auto& [n, v] : rounds) chorus[kv][n] = MedianRow(std::move(v));
    report.chorus[kv] = {{"prefill_seconds", prefill[kv]},
                         {"prefill_spread", {prefills.front(), prefills.back()}},
                         {"rounds", prefills.size()},
                         {"shared_bytes", shared}};
  }
  auto peer_tps = [&](const std::string& t, size_t n) {
    if (!peers.count(t) || !peers[t]["agents"].contains(std::to_string(n))) return 0.0;
    return peers[t]["agents"][std::to_string(n)].value("decode_tokens_per_s", 0.0);
  };
  std::FILE* out = a.table;
  std::fprintf(out,
               "aggregate decode tokens/s, N agents x %d new tokens over one %zu-token shared document, %d threads\n",
               a.tg, a.doc_tokens, a.threads);
  std::fprintf(out, "%-8s", "agents");
  for (const auto& kv : a.kv) std::fprintf(out, " %18s", ("chorus " + kv).c_str());
  for (const auto& t : peer_cols) std::fprintf(out, " %16s", ("llama.cpp " + t).c_str());
  std::fprintf(out, " %s\n", peer_cols.empty() ? "" : "  chorus / best llama.cpp");
  for (size_t n : a.agents) {
    std::fprintf(out, "%-8zu", n);
    double best_peer = 0;
    for (const auto& kv : a.kv) {
      const ChorusRow& r = chorus[kv][n];
      std::fprintf(out, " %18.1f", r.tps);
      const StepCost c = step_cost(r, n, kv);
      report.rows[std::to_string(n)]["chorus"][kv] = {{"decode_tokens_per_s", r.tps},
                                                      {"spread", {r.tps_min, r.tps_max}},
                                                      {"peak_kv_bytes", r.peak_kv_bytes},
                                                      {"mean_kv_bytes", r.mean_kv_bytes},
                                                      {"roofline", RoofJson(c, n, RoofFor(c, n, limits), r.tps)}};
    }
    for (const auto& t : peer_cols) {
      const double v = peer_tps(t, n);
      best_peer = std::max(best_peer, v);
      report.rows[std::to_string(n)]["llama_cpp"][t] = v;
      if (v > 0)
        std::fprintf(out, " %16.1f", v);
      else
        std::fprintf(out, " %16s", "n/a");
    }
    if (best_peer > 0) {
      std::fprintf(out, "  ");
      for (const auto& kv : a.kv) std::fprintf(out, " %.2fx", chorus[kv][n].tps / best_peer);
    }
    std::fprintf(out, "\n");
  }
  for (const auto& kv : a.kv)
    for (size_t n : a.agents)
      std::fprintf(out, "chorus %s at %zu agents: median of %d rounds, spread %.1f-%.1f\n", kv.c_str(), n,
                   std::max(1, a.reps), chorus[kv][n].tps_min, chorus[kv][n].tps_max);
  if (peers.count("best")) {
    for (size_t n : a.agents) {
      const std::string ns = std::to_string(n);
      if (!peers["best"]["agents"].contains(ns)) continue;
      const nlohmann::json& b = peers["best"]["agents"][ns];
      std::fprintf(out, "llama.cpp best at %zu agents: %s (median of %d, spread %.1f-%.1f)\n", n,
                   b.value("settings", "").c_str(), a.reps, b["spread"][0].get<double>(), b["spread"][1].get<double>());
    }
  }
  std::fprintf(out, "\ndocument prefill (s, median):");
  for (const auto& kv : a.kv)
    std::fprintf(out, "  chorus %s %.2f (%.2f-%.2f)", kv.c_str(), prefill[kv],
                 report.chorus[kv]["prefill_spread"][0].get<double>(),
                 report.chorus[kv]["prefill_spread"][1].get<double>());
  for (const auto& t : peer_cols) {  // the best peer: its fastest prefill of any variant, with its settings
    if (peers.count(t) && peers[t].contains("prefill_best"))
      std::fprintf(out, "  llama.cpp %s %.2f (%s)", t.c_str(), peers[t]["prefill_best"].value("seconds", 0.0),
                   peers[t]["prefill_best"].value("settings", "").c_str());
    else if (peers.count(t) && peers[t]["agents"].contains(std::to_string(a.agents.front())))
      std::fprintf(out, "  llama.cpp %s %.2f", t.c_str(),
                   peers[t]["agents"][std::to_string(a.agents.front())].value("prefill_seconds", 0.0));
  }
  std::fprintf(out, "\npeak KV bytes held (measured), MiB:\n%-8s", "agents");
  for (const auto& kv : a.kv) std::fprintf(out, " %18s", ("chorus " + kv).c_str());
  std::fprintf(out, "\n");
  for (size_t n : a.agents) {
    std::fprintf(out, "%-8zu", n);
    for (const auto& kv : a.kv) std::fprintf(out, " %18.2f", chorus[kv][n].peak_kv_bytes / 1048576.0);
    std::fprintf(out, "\n");
  }
  std::fprintf(out,
               "\nroofline: %% of min(read %.1f GB/s / bytes per step, 1 / (matmul ops / %s %.1f GOP/s + attention "
               "ops / f32 %.1f GFLOP/s, the integer KV kernels' share at the int8 peak)) x agents\n%-8s",
               limits.read_bytes_per_s * 1e-9, Int8PeakName(limits), Int8Peak(limits) * 1e-9,
               limits.f32_flops_per_s * 1e-9, "agents");
  for (const auto& kv : a.kv) std::fprintf(out, " %18s", ("chorus " + kv).c_str());
  std::fprintf(out, "\n");
  for (size_t n : a.agents) {
    std::fprintf(out, "%-8zu", n);
    for (const auto& kv : a.kv) {
      const ChorusRow& r = chorus[kv][n];
      const Roof roof = RoofFor(step_cost(r, n, kv), n, limits);
      char cell[64];
      std::snprintf(cell, sizeof cell, "%.0f%% of %.0f %s", 100 * r.tps / roof.tok_s, roof.tok_s,
                    roof.bound[0] == 'm' ? "mem" : "cpu");
      std::fprintf(out, " %18s", cell);
    }
    std::fprintf(out, "\n");
  }
  report.load_average_after = LoadAverage();
  std::fprintf(out, "load average %.2f -> %.2f\n", report.load_average_before, report.load_average_after);
  for (auto& [t, p] : peers) report.llama_cpp_raw[t] = p;
  return report;
}

nlohmann::json ToJson(const AgentsBenchReport& r) {
  nlohmann::json j = {{"doc_tokens", r.doc_tokens},
                      {"tg", r.tg},
                      {"threads", r.threads},
                      {"load_average_before", r.load_average_before},
                      {"load_average_after", r.load_average_after},
                      {"machine", MachineJson(r.machine)},
                      {"chorus", r.chorus},
                      {"rows", r.rows}};
  if (!r.llama_cpp_raw.empty()) j["llama_cpp_raw"] = r.llama_cpp_raw;
  if (!r.llama_cpp_error.empty()) j["llama_cpp_error"] = r.llama_cpp_error;
  if (!r.llama_cpp_note.empty()) j["llama_cpp_note"] = r.llama_cpp_note;
  return Versioned("agents", std::move(j));
}

}  // namespace chorus::eval
