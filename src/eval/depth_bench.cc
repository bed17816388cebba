// Decode tokens/s at depth beside llama.cpp (see depth_bench.h).
#include <algorithm>
#include <cstdio>
#include <sstream>

#include "eval/depth_bench.h"

#include "engine/kv_config.h"
#include "eval/harness.h"  // LoadAverage
#include "eval/peer.h"     // RunBestPeerJson, ResidentBytes
#include "eval/report.h"   // Versioned
#include "eval/roofline.h"
#include "model/forward.h"
#include "model/sampler.h"  // ArgMax
#include "util/timer.h"

namespace chorus::eval {
namespace {

std::vector<int32_t> RandomTokens(size_t n, size_t n_vocab, uint64_t seed) {
  std::vector<int32_t> t(n);
  for (auto& x : t) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<int32_t>((seed >> 33) % n_vocab);
  }
  return t;
}

// Median decode tokens/s over reps runs of tg single-token steps after `depth` tokens.
Result<double> OursAtDepth(const Model& model, const KvConfig& cfg, size_t depth, const DepthBenchConfig& a,
                           ThreadPool& pool, size_t* kv_bytes, long* rss_growth) {
  const ModelConfig& c = model.config();
  ForwardPass fwd(model, 512);
  std::vector<float> logits(c.n_vocab);
  std::vector<double> rates;
  for (int r = 0; r < a.reps; ++r) {
    const auto ctx = RandomTokens(depth + 1, c.n_vocab, 99 + r);
    const long rss0 = static_cast<long>(ResidentBytes());
    KvRuntime rt = MakeKvRuntime(c, cfg);
    auto seq = rt.store->NewSequence(depth + a.tg + 1);
    CHORUS_RETURN_IF_ERROR(fwd.Run(ctx, *seq, pool, LogitsFor::kLast, logits.data()));
    if (r == 0) *rss_growth = static_cast<long>(ResidentBytes()) - rss0;
    Timer t;
    for (int i = 0; i < a.tg; ++i) {
      const int32_t one[1] = {ArgMax(logits.data(), c.n_vocab)};
      CHORUS_RETURN_IF_ERROR(fwd.Run(one, *seq, pool, LogitsFor::kLast, logits.data()));
    }
    rates.push_back(a.tg / t.Seconds());
    *kv_bytes = rt.store->Usage().total();
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

// llama.cpp at its best for one KV type and depth: llama-bench over the original weights and its
// Q4_0 / Q8_0 conversions, flash attention on and off (scripts/ref/llama_best.py); the winner's
// settings go to *settings. Without llama.cpp's tools: llama-cpp-python, flash attention auto.
Result<double> PeerAtDepth(const std::string& model, const std::string& kv_type, size_t depth, int threads,
                           const DepthBenchConfig& a, std::string* settings) {
  const std::string ts = std::to_string(threads);
  std::ostringstream best, fallback;
  best << a.python << " scripts/ref/llama_best.py -m '" << model << "' --threads " << threads << " --pp 0 --tg " << a.tg
       << " --reps " << a.reps << " --depth " << depth << " --kv " << kv_type << " --json 2>/dev/null";
  fallback << a.python << " scripts/ref/llama_bench.py --model '" << model << "' --threads " << threads
           << " --pp 0 --tg " << a.tg << " --reps " << a.reps << " --depth " << depth << " --kv-type " << kv_type
           << " --json 2>/dev/null";
  std::string note;
  CHORUS_ASSIGN_OR_RETURN(
      nlohmann::json j,
      RunBestPeerJson(best.str(), fallback.str(), "llama-cpp-python, weights as given, flash-attn auto", &note,
                      [&](const nlohmann::json& r) {
                        return r.contains("threads") && r["threads"].contains(ts) && r["threads"][ts].contains("tg");
                      }));
  *settings = note.empty() ? j["threads"][ts].value("tg_settings", "") : note;
  try {
    return j["threads"][ts]["tg"].get<double>();
  } catch (const std::exception& e) {
    return Status::Error("the peer's JSON has no tg rate for {} threads: {}", threads, e.what());
  }
}

}  // namespace

Result<DepthBenchReport> RunDepthBench(const Model& model, const DepthBenchConfig& a) {
  const ModelConfig& c = model.config();
  std::vector<KvConfig> configs;
  for (const std::string& spec : a.kv) {
    const size_t slash = spec.find('/');
    if (slash == std::string::npos) return Status::Error("--kv entry '{}' must be K/V, e.g. q8/tq3", spec);
    auto cfg = MakeKvConfig(spec.substr(0, slash), spec.substr(slash + 1), c);
    if (!cfg.ok()) return cfg.status().Context(spec);
    configs.push_back(cfg.value());
  }
  for (size_t d : a.depths)
    if (d + a.tg + 1 > c.n_ctx_train)
      return Status::Error("depth {} + {} generated tokens exceed the model's context of {}", d, a.tg, c.n_ctx_train);
  DepthBenchReport report{
      .model = a.model, .tg = a.tg, .reps = a.reps, .threads = a.threads, .load_average_before = LoadAverage()};
  ThreadPool pool(a.threads);
  const MachineLimits limits = ProbeMachine(pool);
  report.machine = limits;
  struct RoofRow {
    size_t depth;
    std::string format;
    double measured, bytes;
    Roof roof;
  };
  std::vector<RoofRow> roofs;
  std::vector<std::string> peer_settings;  // the winning llama.cpp settings per cell
  FILE* out = a.table;
  std::fprintf(out, "decode tokens/s after D tokens of context (%d threads, %d tokens, median of %d)\n", a.threads,
               a.tg, a.reps);
  std::fprintf(out, "%-8s", "depth");
  for (const auto& cfg : configs)
    std::fprintf(out, " %16s", (std::string(KvFormatName(cfg.k)) + "/" + std::string(KvFormatName(cfg.v))).c_str());
  for (const auto& t : a.peer_kv) std::fprintf(out, " %16s", ("llama.cpp " + t).c_str());
  std::fprintf(out, "\n");
  for (size_t d : a.depths) {
    std::fprintf(out, "%-8zu", d);
    std::fflush(stdout);
    nlohmann::json row = {{"depth", d}};
    for (const auto& cfg : configs) {
      size_t bytes = 0;
      long rss_growth = 0;
      auto r = OursAtDepth(model, cfg, d, a, pool, &bytes, &rss_growth);
      if (!r.ok()) return r.status();
      const std::string name = std::string(KvFormatName(cfg.k)) + "/" + std::string(KvFormatName(cfg.v));
      // KV read per step: the live store's bytes after the run, scaled to the run's mean depth.
      const double mean_depth = d + a.tg / 2.0;
      StepCost cost = DecodeStepCost(model, static_cast<size_t>(mean_depth), bytes / (d + a.tg + 1.0));
      cost.attn_int8_ops = cost.attn_ops * Int8AttentionShare(cfg.k, cfg.v, model.config().head_dim);
      const Roof roof = RoofFor(cost, 1, limits);
      roofs.push_back({d, name, r.value(), cost.bytes, roof});
      row["chorus"][name] = {{"tg", r.value()},
                             {"kv_bytes", bytes},
                             {"rss_growth_bytes", rss_growth},
                             {"roofline", RoofJson(cost, 1, roof, r.value())}};
      std::fprintf(out, " %16.1f", r.value());
      std::fflush(stdout);
    }
    for (const auto& t : a.peer_kv) {
      std::string settings;
      auto r = PeerAtDepth(a.model, t, d, a.threads, a, &settings);
      if (r.ok()) {
        row["llama_cpp"][t] = r.value();
        row["llama_cpp_settings"][t] = settings;
        peer_settings.push_back("depth " + std::to_string(d) + ", KV " + t + ": " + settings);
      } else
        row["llama_cpp_error"][t] = r.status().message();
      if (r.ok())
        std::fprintf(out, " %16.1f", r.value());
      else
        std::fprintf(out, " %16s", "n/a");
      std::fflush(stdout);
    }
    std::fprintf(out, "\n");
    report.rows.push_back(row);
  }
  report.load_average_after = LoadAverage();
  for (const std::string& line : peer_settings) std::fprintf(out, "llama.cpp best at %s\n", line.c_str());
  std::fprintf(out,
               "\nroofline (read %.1f GB/s: %s, 1 plain stream %.1f; %s %.1f GOP/s; attention at f32 %.1f GFLOP/s, the "
               "integer KV kernels' share at int8; %s; load average %.2f -> %.2f)\n",
               limits.read_bytes_per_s * 1e-9, limits.read_pattern.c_str(), limits.read_sequential_bytes_per_s * 1e-9,
               Int8PeakName(limits), Int8Peak(limits) * 1e-9, limits.f32_flops_per_s * 1e-9, limits.simd.c_str(),
               report.load_average_before, report.load_average_after);
  std::fprintf(out, "%-8s %-16s %10s %10s %11s %8s  %s\n", "depth", "K/V", "tok/s", "MB/token", "roof tok/s", "% roof",
               "bound");
  for (const RoofRow& r : roofs)
    std::fprintf(out, "%-8zu %-16s %10.1f %10.2f %11.1f %7.0f%%  %s\n", r.depth, r.format.c_str(), r.measured,
                 r.bytes * 1e-6, r.roof.tok_s, 100 * r.measured / r.roof.tok_s, r.roof.bound);
  return report;
}

nlohmann::json ToJson(const DepthBenchReport& r) {
  return Versioned("depth", {{"model", r.model},
                             {"tg", r.tg},
                             {"reps", r.reps},
                             {"threads", r.threads},
                             {"load_average_before", r.load_average_before},
                             {"machine", MachineJson(r.machine)},
                             {"rows", r.rows},
                             {"load_average_after", r.load_average_after}});
}

}  // namespace chorus::eval
