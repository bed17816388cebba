// eval::RunSpeedBench (speed_bench.h): the pp/tg loop, the peer run, and the table.
#include "eval/speed_bench.h"

#include <algorithm>
#include <sstream>
#include <tuple>

#include "eval/harness.h"  // Median, LoadAverage
#include "eval/peer.h"     // RunBestPeerJson, ResidentBytes
#include "eval/report.h"   // Versioned
#include "model/forward.h"
#include "model/sampler.h"  // ArgMax
#include "ops/matmul.h"     // MatMulPath
#include "util/thread_pool.h"
#include "util/timer.h"

namespace chorus::eval {
namespace {

using Speeds = SpeedBenchReport::Speeds;

Result<Speeds> MeasureOurs(const Model& model, int threads, const SpeedBenchConfig& a) {
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
  Speeds s{.threads = threads,
           .pp = Median(pp_rates),
           .tg = Median(tg_rates),
           .kv_bytes_per_token = static_cast<double>(kv.bytes()) / (std::max(a.pp, a.tg) + 1)};
  std::tie(s.pp_min, s.pp_max) = std::pair(*std::min_element(pp_rates.begin(), pp_rates.end()),
                                           *std::max_element(pp_rates.begin(), pp_rates.end()));
  std::tie(s.tg_min, s.tg_max) = std::pair(*std::min_element(tg_rates.begin(), tg_rates.end()),
                                           *std::max_element(tg_rates.begin(), tg_rates.end()));
  return s;
}

// Runs the llama.cpp peer and returns its JSON, or an error saying why it could not run.
// best: llama.cpp's own llama-bench over the original weights and its Q4_0 / Q8_0 conversions,
// flash attention on and off (scripts/ref/llama_best.py), the best median per test; if llama.cpp's
// tools are not built, llama-cpp-python with default settings, and says so.
Result<nlohmann::json> MeasurePeer(const SpeedBenchConfig& a, std::string* note) {
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

// The peer's rate for a test ("pp" / "tg") at t threads, 0 if it has none.
double PeerRate(const SpeedBenchReport& r, int t, const char* key) {
  const std::string ts = std::to_string(t);
  const nlohmann::json& peer = r.llama_cpp;
  if (peer.is_null() || !peer.contains("threads") || !peer["threads"].contains(ts)) return 0;
  return peer["threads"][ts].value(key, 0.0);
}

}  // namespace

Result<SpeedBenchReport> RunSpeedBench(const Model& model, const SpeedBenchConfig& a) {
  if (a.threads.empty()) return Status::Error("no thread counts to measure");
  if (a.pp < 1 || a.tg < 1 || a.reps < 1)
    return Status::Error("pp, tg and reps must be at least 1 (got {}, {}, {})", a.pp, a.tg, a.reps);
  SpeedBenchReport r{.model = a.model, .pp = a.pp, .tg = a.tg, .reps = a.reps};
  r.load_average_before = LoadAverage();
  for (int t : a.threads) {
    if (a.log) std::fprintf(a.log, "machine probe: %d thread(s) ...\n", t);
    MachineLimits limits;
    {
      ThreadPool pool(t);
      limits = ProbeMachine(pool);
    }
    if (a.log) std::fprintf(a.log, "chorus: %d thread(s) ...\n", t);
    auto s = MeasureOurs(model, t, a);
    if (!s.ok()) return s.status();
    s->machine = limits;
    // Roofline: a decode step at the run's mean depth (tg / 2).
    s->tg_cost = DecodeStepCost(model, a.tg / 2, s->kv_bytes_per_token);
    r.chorus.push_back(*s);
  }
  r.pp_cost = PrefillCost(model, a.pp);
  r.rss_bytes = ResidentBytes();
  r.model_file_weight_bytes = model.weight_bytes();
  if (a.peer != "none") {
    r.peer_run = true;
    if (a.log) std::fprintf(a.log, "llama.cpp peer ...\n");
    auto p = MeasurePeer(a, &r.llama_cpp_note);
    if (!r.llama_cpp_note.empty() && a.log) std::fprintf(a.log, "%s\n", r.llama_cpp_note.c_str());
    if (p.ok())
      r.llama_cpp = p.value();
    else
      r.llama_cpp_error = p.status().message();
  }
  r.load_average_after = LoadAverage();
  return r;
}

nlohmann::json ToJson(const SpeedBenchReport& r) {
  nlohmann::json j = {{"model", r.model},
                      {"pp_tokens", r.pp},
                      {"tg_tokens", r.tg},
                      {"reps", r.reps},
                      {"load_average_before", r.load_average_before},
                      {"load_average_after", r.load_average_after},
                      {"rss_bytes", r.rss_bytes},
                      {"model_file_weight_bytes", r.model_file_weight_bytes}};
  if (!r.llama_cpp_note.empty()) j["llama_cpp_note"] = r.llama_cpp_note;
  if (!r.llama_cpp.is_null()) j["llama_cpp"] = r.llama_cpp;
  if (!r.llama_cpp_error.empty()) j["llama_cpp_error"] = r.llama_cpp_error;
  for (const Speeds& s : r.chorus) {
    const int t = s.threads;
    const std::string ts = std::to_string(t);
    j["chorus"][ts] = {
        {"pp", s.pp}, {"tg", s.tg}, {"pp_spread", {s.pp_min, s.pp_max}}, {"tg_spread", {s.tg_min, s.tg_max}}};
    j["machine"][ts] = MachineJson(s.machine);
    const double ppp = PeerRate(r, t, "pp"), ptg = PeerRate(r, t, "tg");
    if (ppp > 0) j["ratio"][ts] = {{"pp", s.pp / ppp}, {"tg", s.tg / ptg}};
    j["roofline"][ts] = {{"pp", RoofJson(r.pp_cost, r.pp, RoofFor(r.pp_cost, r.pp, s.machine), s.pp)},
                         {"tg", RoofJson(s.tg_cost, 1, RoofFor(s.tg_cost, 1, s.machine), s.tg)}};
  }
  return Versioned("speed", std::move(j));
}

void PrintTable(const SpeedBenchReport& r, std::FILE* out) {
  std::fprintf(out, "kernels: %s\n", MatMulPath());
  std::fprintf(out, "%-8s %-8s %14s %14s %8s %11s %8s %8s %9s  %s\n", "threads", "test", "chorus tok/s", "llama.cpp",
               "ratio", "roof tok/s", "chorus", "peer", "MB/token", "bound");
  for (const Speeds& s : r.chorus) {
    const int t = s.threads;
    for (int k = 0; k < 2; ++k) {
      const double mine = k == 0 ? s.pp : s.tg;
      const double theirs = PeerRate(r, t, k == 0 ? "pp" : "tg");
      const std::string name = (k == 0 ? "pp" : "tg") + std::to_string(k == 0 ? r.pp : r.tg);
      const StepCost cost = k == 0 ? r.pp_cost : s.tg_cost;
      const size_t n = k == 0 ? r.pp : 1;
      const Roof roof = RoofFor(cost, n, s.machine);
      char peer_s[32] = "-", ratio_s[32] = "-", peer_pct[32] = "-";
      if (theirs > 0) {
        std::snprintf(peer_s, sizeof peer_s, "%.1f", theirs);
        std::snprintf(ratio_s, sizeof ratio_s, "%.2fx", mine / theirs);
        std::snprintf(peer_pct, sizeof peer_pct, "%.0f%%", 100 * theirs / roof.tok_s);
      }
      std::fprintf(out, "%-8d %-8s %14.1f %14s %8s %11.1f %7.0f%% %8s %9.1f  %s\n", t, name.c_str(), mine, peer_s,
                   ratio_s, roof.tok_s, 100 * mine / roof.tok_s, peer_pct, cost.bytes / n * 1e-6, roof.bound);
    }
  }
  for (const Speeds& s : r.chorus)
    std::fprintf(out, "chorus, %d thread(s): pp spread %.1f-%.1f, tg spread %.1f-%.1f (median of %d)\n", s.threads,
                 s.pp_min, s.pp_max, s.tg_min, s.tg_max, r.reps);
  for (const Speeds& s : r.chorus) {
    const int t = s.threads;
    const std::string ts = std::to_string(t);
    const nlohmann::json& peer = r.llama_cpp;
    if (peer.is_null() || !peer.contains("threads") || !peer["threads"].contains(ts)) continue;
    for (const char* k : {"pp", "tg"}) {
      const nlohmann::json& pt = peer["threads"][ts];
      const std::string key = std::string(k) + "_settings";
      if (pt.contains(key))
        std::fprintf(out, "llama.cpp best %s, %d thread(s): %s (median of %d; spread %.1f-%.1f)\n", k, t,
                     pt[key].get<std::string>().c_str(), r.reps, pt[std::string(k) + "_spread"][0].get<double>(),
                     pt[std::string(k) + "_spread"][1].get<double>());
    }
  }
  for (const Speeds& s : r.chorus) {
    const int t = s.threads;
    const MachineLimits& m = s.machine;
    std::fprintf(out,
                 "machine, %d thread(s): read %.1f GB/s (%s; 1 plain stream %.1f), f32 %.1f GFLOP/s, int8 %.1f GOP/s "
                 "(%s), AMX int8 %.1f GOP/s\n",
                 t, m.read_bytes_per_s * 1e-9, m.read_pattern.c_str(), m.read_sequential_bytes_per_s * 1e-9,
                 m.f32_flops_per_s * 1e-9, m.int8_ops_per_s * 1e-9, m.simd.c_str(), m.amx_int8_ops_per_s * 1e-9);
  }
  std::fprintf(out,
               "roof: min(read bandwidth / bytes per token, int8 peak (AMX where present) / ops per token); load "
               "average %.2f -> %.2f\n",
               r.load_average_before, r.load_average_after);
  std::fprintf(out, "chorus RSS %.1f MiB (weights in file: %.1f MiB, mmap'ed, not copied)\n",
               ResidentBytes() / 1048576.0, r.model_file_weight_bytes / 1048576.0);
  if (!r.llama_cpp_error.empty()) std::fprintf(out, "peer not run: %s\n", r.llama_cpp_error.c_str());
}

}  // namespace chorus::eval
