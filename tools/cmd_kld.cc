// `chorus eval kld`: KL divergence of compressed-KV next-token distributions against the f16 KV
// (moved out of cmd_eval.cc; with --policy, one more row for comix or cocktail).
#include <algorithm>
#include <cmath>

#include "engine/kv_config.h"  // KvConfigFromFlags, MakeKvRuntime
#include "model/forward.h"
#include "ops/elementwise.h"  // LogSumExp
#include "tools/eval_args.h"
#include "tools/eval_kv.h"    // EvalKv
#include "util/timer.h"

namespace chorus::cli {

// KL divergence of compressed-KV next-token distributions against the f16 KV on the same
// positions (llama.cpp's chunking: chunks of -c tokens, second half scored), for one or more
// K/V format pairs; the f16 base is computed once per chunk.
int RunKld(const EvalArgs& a) {
  auto in = LoadEvalChunks(a);
  if (!in.ok()) return Fail(in.status());
  const Model& model = *in->model;
  const ModelConfig& c = model.config();
  const size_t V = c.n_vocab, n_ctx = in->n_ctx, n_chunks = in->n_chunks;
  std::vector<std::string> specs = a.configs;
  if (specs.empty() || a.policy_given) specs.push_back(a.pol.spec);  // --policy: one more row
  ThreadPool pool(a.threads);
  ForwardPass fwd(model, 512), fwd_block(model, kBlockTokens);  // the latter: EvalKv::micro_batch()
  struct Run {
    KvConfig config;
    std::unique_ptr<EvalKv> rt;
    double nll = 0;
    size_t top1 = 0;
    std::vector<float> kl = {};
    size_t bytes = 0, peak = 0;
    std::vector<double> chunk_kld = {}, chunk_nll = {};  // per chunk: mean KLD, summed NLL (paired tests)
  };
  std::vector<Run> runs;
  for (const std::string& spec : specs) {
    PolicyFlags flags = a.pol;  // --kv-budget, --encoder, --query, --comix-sensitivity
    flags.spec = spec;
    auto policy = KvPolicy::Parse(spec);
    if (!policy.ok()) return Fail(policy.status());
    flags.policy = *policy;
    if (KvPolicy::Allocator* alloc = flags.policy.allocator(); alloc && !a.pol.sensitivity.empty()) {
      alloc->sensitivity = a.pol.sensitivity;
      if (alloc->rank == KvPolicy::Rank::kExpected) alloc->rank = KvPolicy::Rank::kMeasured;
    }
    if (flags.policy.needs_questions() && flags.query.find_first_not_of(" \t\r\n") == std::string::npos)
      return Fail(Status::Error("--configs {} needs --query TEXT (the question its chunks are weighed against)", spec));
    KvConfig cfg;  // uniform: its formats (the report's K and V)
    if (flags.policy.is_uniform()) {
      auto u = KvConfigFor(flags.policy, a.kv, c);
      if (!u.ok()) return Fail(u.status().Context(spec));
      cfg = *u;
    }
    auto rt = EvalKv::Open(flags, a.kv, model, a.model, fwd, pool);
    if (!rt.ok()) return Fail(rt.status().Context(spec));
    runs.push_back(Run{.config = cfg, .rt = std::move(rt).value()});
  }

  KvRuntime base_rt = MakeKvRuntime(c, KvConfig{});
  const size_t first = n_ctx / 2, n_scored = n_ctx - first - 1;  // rows first .. n_ctx-2
  std::vector<float> logits(n_ctx * V), base_lp(n_scored * V), lp(V);
  double base_nll = 0;
  std::vector<double> base_chunk_nll;
  size_t count = 0;
  Timer timer;
  for (size_t ch = 0; ch < n_chunks; ++ch) {
    const std::vector<int32_t> chunk = in->Chunk(ch);
    {
      auto kv = base_rt.store->NewSequence(n_ctx);
      if (Status s = fwd.Run(chunk, *kv, pool, LogitsFor::kAll, logits.data()); !s.ok()) return Fail(s);
    }
    for (size_t r = 0; r < n_scored; ++r) {
      const size_t j = first + r;
      const float* row = logits.data() + j * V;
      const float lse = static_cast<float>(LogSumExp(row, V));
      for (size_t i = 0; i < V; ++i) base_lp[r * V + i] = row[i] - lse;
      base_nll -= base_lp[r * V + chunk[j + 1]];
    }
    base_chunk_nll.push_back(0);
    for (size_t r = 0; r < n_scored; ++r) base_chunk_nll.back() -= base_lp[r * V + chunk[first + r + 1]];
    count += n_scored;
    for (Run& run : runs) {
      auto kv = run.rt->Begin(chunk);
      if (!kv.ok()) return Fail(kv.status());
      ForwardPass& f = run.rt->micro_batch() == kBlockTokens ? fwd_block : fwd;
      if (Status s = f.Run(chunk, **kv, pool, LogitsFor::kAll, logits.data()); !s.ok()) return Fail(s);
      run.rt->End(**kv);
      run.bytes = run.rt->has_policy() ? run.rt->mean_bytes() : run.rt->last_usage().total();
      run.peak = std::max(run.peak, run.rt->last_usage().total());
      const double nll0 = run.nll;
      const size_t kl0 = run.kl.size();
      for (size_t r = 0; r < n_scored; ++r) {
        const size_t j = first + r;
        const float* row = logits.data() + j * V;
        const float lse = static_cast<float>(LogSumExp(row, V));
        const float* b = base_lp.data() + r * V;
        double kl = 0;
        size_t best_b = 0, best_c = 0;
        for (size_t i = 0; i < V; ++i) {
          const float l = row[i] - lse;
          kl += std::exp(static_cast<double>(b[i])) * (b[i] - l);
          if (b[i] > b[best_b]) best_b = i;
          if (row[i] > row[best_c]) best_c = i;
        }
        run.kl.push_back(static_cast<float>(std::max(0.0, kl)));
        run.top1 += best_b == best_c;
        run.nll -= row[chunk[j + 1]] - lse;
      }
      double chunk_kl = 0;
      for (size_t i = kl0; i < run.kl.size(); ++i) chunk_kl += run.kl[i];
      run.chunk_kld.push_back(chunk_kl / double(std::max<size_t>(1, n_scored)));
      run.chunk_nll.push_back(run.nll - nll0);
    }
    if (!a.json || isatty(2))
      std::fprintf(stderr, "\r[%zu/%zu] %zu configs, %.0f s elapsed   ", ch + 1, n_chunks, runs.size(),
                   timer.Seconds());
  }
  std::fprintf(stderr, "\n");
  const double base_ppl = std::exp(base_nll / count);
  nlohmann::json out = {{"kv_sink_blocks", a.kv.sink_blocks}, {"ctx", n_ctx}, {"chunks", n_chunks}, {"scored_tokens", count}, {"base_ppl", base_ppl},
                        {"base_kv_bits_per_element", 16.0}, {"seconds", timer.Seconds()}, {"threads", a.threads},
                        {"base_chunk_nll", base_chunk_nll}};
  if (!a.json)
    std::printf("%-20s %10s %9s %11s %11s %8s %10s\n", "K/V", "PPL", "dPPL %", "mean KLD", "p99 KLD", "top-1",
                "bits/elem");
  if (!a.json) std::printf("%-20s %10.4f %9s %11s %11s %8s %10.2f\n", "f16/f16 (base)", base_ppl, "-", "-", "-", "-", 16.0);
  for (Run& run : runs) {
    std::vector<float> sorted = run.kl;
    std::sort(sorted.begin(), sorted.end());
    double mean = 0;
    for (float x : sorted) mean += x;
    mean /= sorted.size();
    const double p99 = sorted[std::min(sorted.size() - 1, static_cast<size_t>(0.99 * sorted.size()))];
    const double ppl = std::exp(run.nll / count);
    const double bits = KvBitsPerElement(run.bytes, n_ctx, c);
    const std::string name = run.rt->has_policy() ? run.rt->Name()
                             : std::string(KvFormatName(run.config.k)) + "/" + std::string(KvFormatName(run.config.v));
    const std::string k(run.rt->has_policy() ? name : KvFormatName(run.config.k)),
        v(run.rt->has_policy() ? name : KvFormatName(run.config.v));
    out["configs"].push_back({{"k", k}, {"v", v}, {"ppl", ppl},
                              {"ppl_delta_pct", 100.0 * (ppl / base_ppl - 1)}, {"kld_mean", mean}, {"kld_p99", p99},
                              {"top1", double(run.top1) / count}, {"kv_bytes", run.bytes},
                              {"kv_peak_bytes", run.peak}, {"bits_per_element", bits},
                              {"chunk_kld", run.chunk_kld}, {"chunk_nll", run.chunk_nll}});
    if (!a.json)
      std::printf("%-20s %10.4f %+9.3f %11.5f %11.5f %8.4f %10.2f\n", name.c_str(), ppl, 100.0 * (ppl / base_ppl - 1),
                  mean, p99, double(run.top1) / count, bits);
    if (run.rt->has_policy()) {
      if (!a.json) run.rt->PrintReport(stdout, n_ctx);
      out["configs"].back()["kv_policy"] = run.rt->ReportJson(n_ctx);
    }
  }
  if (a.json) PrintJson(out);
  return 0;
}

}  // namespace chorus::cli
