// `chorus bench --policy-cost` (see policy_cost_bench.h).
#include "eval/policy_cost_bench.h"

#include <algorithm>
#include <cstdio>
#include <memory>

#include "chorus/engine.h"
#include "eval/harness.h"  // Median, LoadAverage
#include "eval/report.h"   // Versioned
#include "util/timer.h"

namespace chorus::eval {
namespace {

struct CostConfig {
  std::string name;
  EngineOptions eo;
  bool relevance = false;  // cocktail: ShareFor with the question
};

Result<CostConfig> ParseCostConfig(const std::string& spec, const PolicyCostConfig& a) {
  CHORUS_ASSIGN_OR_RETURN(KvPolicy policy, KvPolicy::Parse(spec));
  if (policy.kind() == KvPolicyKind::kCocktailPaper)
    return Status::Error(
        "config '{}': the paper's scheme is measured by `chorus eval needle` (its search and "
        "prefill columns); here: f16, kivi4, K/V, comix-FAMILY:AVG[...], cocktail-FAMILY:AVG[...]",
        spec);
  const bool cocktail = policy.kind() == KvPolicyKind::kRelevance;
  CostConfig out{.name = spec, .relevance = cocktail};
  EngineOptions& eo = out.eo;
  eo.model_path = a.model, eo.threads = a.threads;
  eo.n_ctx = 0;  // set by the caller from the document
  eo.encoder_path = a.encoder;
  eo.policy = policy;
  if (KvPolicy::Allocator* alloc = eo.policy.allocator())
    alloc->join_reserve = 0;  // the one reader is announced (ShareOptions), as `chorus agents` does
  if (const auto* u = std::get_if<KvPolicy::Uniform>(&policy.rule))
    eo.private_k = u->k, eo.private_v = u->v;  // the agent's own blocks as the document's: one format per row
  return out;
}

}  // namespace

Result<PolicyCostReport> RunPolicyCost(const PolicyCostConfig& a) {
  std::vector<CostConfig> configs;
  for (const std::string& s : a.configs) {
    CHORUS_ASSIGN_OR_RETURN(CostConfig c, ParseCostConfig(s, a));
    configs.push_back(std::move(c));
  }
  if (configs.empty()) return Status::Error("--policy-configs is empty");
  if (a.question.find_first_not_of(" \t\r\n") == std::string::npos)
    return Status::Error("--question is empty (cocktail needs it: its relevance to each chunk weights the blocks)");
  PolicyCostReport report{.model = a.model,
                          .question = a.question,
                          .threads = a.threads,
                          .tg = a.tg,
                          .reps = a.reps,
                          .load_average_before = LoadAverage()};
  // Every config's document first (all engines stay open), then the decode reps interleaved
  // config by config, so that each config's reps meet the same load (the machine may be shared).
  struct Run {
    std::unique_ptr<Engine> engine;
    ContextId ctx = 0;
    std::string prompt;
    double share_s = 0;
    EngineStats doc_stats;
    Engine::AllocationStats doc_alloc;
    std::vector<double> rates;
    size_t depth = 0;
  };
  std::vector<Run> runs(configs.size());
  for (size_t i = 0; i < configs.size(); ++i) {
    CostConfig& c = configs[i];
    Run& run = runs[i];
    if (a.log) std::fprintf(a.log, "%s: the document ...\n", c.name.c_str());
    c.eo.n_ctx = a.n_ctx;
    auto engine_r = Engine::Open(c.eo);
    if (!engine_r.ok()) return engine_r.status().Context("config " + c.name);
    run.engine = std::move(engine_r).value();
    Engine& engine = *run.engine;
    const std::string& head = a.frame.first;  // as `chorus agents` frames document and question
    run.prompt = "\n\nQuestion: " + a.question + a.frame.second;
    const size_t prompt_tokens = engine.Tokenize(run.prompt, false, true).size();
    const ShareOptions share{.readers = 1, .reader_tokens = prompt_tokens + size_t(a.tg)};
    Timer t_share;
    auto ctx = c.relevance ? engine.ShareFor(head + a.doc, {a.question}, share) : engine.Share(head + a.doc, share);
    if (!ctx.ok()) return ctx.status().Context(c.name);
    run.ctx = *ctx;
    run.share_s = t_share.Seconds();
    run.doc_stats = engine.Stats();
    run.doc_alloc = engine.AllocationTiming();
  }
  for (int r = 0; r < a.reps; ++r)
    for (size_t i = 0; i < configs.size(); ++i) {
      Run& run = runs[i];
      if (a.log) std::fprintf(a.log, "%s: decode rep %d ...\n", configs[i].name.c_str(), r + 1);
      Engine& engine = *run.engine;
      AgentOptions ao{.temperature = 0.0f, .max_tokens = a.tg, .ignore_eog = true};
      auto id = engine.Spawn(run.ctx, run.prompt, ao);
      if (!id.ok()) return id.status().Context(configs[i].name + ": the agent");
      const AgentState& st = *engine.agent(*id);
      run.depth = st.prompt_tokens;
      Timer t;
      while (engine.running() > 0)
        if (Status s = engine.Step(); !s.ok()) return s.Context(configs[i].name);
      const double sec = t.Seconds();
      if (st.tokens.size() > 1 && sec > 0)
        run.rates.push_back((st.tokens.size() - 1) / sec);  // the first came with Spawn
      engine.Forget(*id);
    }
  for (size_t i = 0; i < configs.size(); ++i) {
    const CostConfig& c = configs[i];
    const Run& run = runs[i];
    const Engine& engine = *run.engine;
    const size_t doc_tokens = engine.ContextTokens(run.ctx);
    const double per_1k = 1000.0 / double(doc_tokens), share_s = run.share_s;
    const EngineStats& doc_stats = run.doc_stats;
    const Engine::AllocationStats& doc_alloc = run.doc_alloc;
    const ChunkMapReport* map = engine.chunk_map(run.ctx);
    const size_t doc_bytes = engine.ContextBytes(run.ctx), fp16 = engine.Fp16Bytes(doc_tokens);
    const size_t depth = run.depth;
    const EngineStats end_stats = engine.Stats();
    const Engine::AllocationStats end_alloc = engine.AllocationTiming();
    report.configs.push_back({.config = c.name,
                              .policy = std::string(ToString(c.eo.policy.kind())),
                              .encoder = map ? map->encoder : "",
                              .doc_tokens = doc_tokens,
                              .decode_depth = depth,
                              .doc_bytes = doc_bytes,
                              .doc_bytes_over_f16 = double(doc_bytes) / fp16,
                              .share_seconds = share_s,
                              .search_seconds = map ? map->search_seconds : 0.0,
                              .search_seconds_per_1k = map ? map->search_seconds * per_1k : 0.0,
                              .prefill_seconds = map ? map->prefill_seconds : share_s,
                              .prefill_seconds_per_1k = (map ? map->prefill_seconds : share_s) * per_1k,
                              .doc_sealed_blocks = doc_stats.sealed_blocks,
                              .doc_seal_seconds = doc_stats.seal_seconds,
                              .doc_seal_seconds_per_1k = doc_stats.seal_seconds * per_1k,
                              .doc_reallocations = doc_alloc.count,
                              .doc_alloc_seconds = doc_alloc.count * doc_alloc.mean_us * 1e-6,
                              .doc_alloc_max_us = doc_alloc.max_us,
                              .reallocations = end_alloc.count,
                              .alloc_seconds = end_alloc.count * end_alloc.mean_us * 1e-6,
                              .alloc_mean_us = end_alloc.mean_us,
                              .alloc_max_us = end_alloc.max_us,
                              .decode_sealed_blocks = end_stats.sealed_blocks - doc_stats.sealed_blocks,
                              .decode_seal_seconds = end_stats.seal_seconds - doc_stats.seal_seconds,
                              .decode_tokens_per_s = Median(run.rates),
                              .decode_tokens_per_s_reps = run.rates});
  }
  report.load_average_after = LoadAverage();
  return report;
}

nlohmann::json ToJson(const PolicyCostReport& report) {
  nlohmann::json rows = nlohmann::json::array();
  for (const PolicyCostRow& r : report.configs)
    rows.push_back({{"config", r.config},
                    {"policy", r.policy},
                    {"doc_tokens", r.doc_tokens},
                    {"decode_depth", r.decode_depth},
                    {"doc_bytes", r.doc_bytes},
                    {"doc_bytes_over_f16", r.doc_bytes_over_f16},
                    {"share_seconds", r.share_seconds},
                    {"search_seconds", r.search_seconds},
                    {"search_seconds_per_1k", r.search_seconds_per_1k},
                    {"encoder", r.encoder},
                    {"prefill_seconds", r.prefill_seconds},
                    {"prefill_seconds_per_1k", r.prefill_seconds_per_1k},
                    {"doc_sealed_blocks", r.doc_sealed_blocks},
                    {"doc_seal_seconds", r.doc_seal_seconds},
                    {"doc_seal_seconds_per_1k", r.doc_seal_seconds_per_1k},
                    {"doc_reallocations", r.doc_reallocations},
                    {"doc_alloc_seconds", r.doc_alloc_seconds},
                    {"doc_alloc_max_us", r.doc_alloc_max_us},
                    {"reallocations", r.reallocations},
                    {"alloc_seconds", r.alloc_seconds},
                    {"alloc_mean_us", r.alloc_mean_us},
                    {"alloc_max_us", r.alloc_max_us},
                    {"decode_sealed_blocks", r.decode_sealed_blocks},
                    {"decode_seal_seconds", r.decode_seal_seconds},
                    {"decode_tokens_per_s", r.decode_tokens_per_s},
                    {"decode_tokens_per_s_reps", r.decode_tokens_per_s_reps}});
  return Versioned("policy_cost", {{"model", report.model},
                                   {"threads", report.threads},
                                   {"tg", report.tg},
                                   {"reps", report.reps},
                                   {"question", report.question},
                                   {"load_average_before", report.load_average_before},
                                   {"configs", rows},
                                   {"load_average_after", report.load_average_after}});
}

void PrintTable(const PolicyCostReport& report, std::FILE* out) {
  std::fprintf(out,
               "policy cost: %zu-token document + 1 question, %d thread(s), decode %d tokens x %d reps after it "
               "(reps interleaved across configs)\n",
               report.configs.empty() ? size_t(0) : report.configs[0].doc_tokens, report.threads, report.tg,
               report.reps);
  std::fprintf(out, "%-26s %8s %9s %10s %10s %13s %10s %9s %9s\n", "config", "bytes/f16", "search", "prefill", "seal",
               "alloc (doc)", "alloc all", "decode", "depth");
  std::fprintf(out, "%-26s %8s %9s %10s %10s %13s %10s %9s %9s\n", "", "", "s/1K tok", "s/1K tok", "s/1K tok", "n / ms",
               "n / ms", "tok/s", "tokens");
  for (const PolicyCostRow& r : report.configs)
    std::fprintf(out, "%-26s %7.1f%% %9.3f %10.3f %10.4f %6zu/%6.1f %4zu/%5.1f %9.1f %9zu\n", r.config.c_str(),
                 100 * r.doc_bytes_over_f16, r.search_seconds_per_1k, r.prefill_seconds_per_1k,
                 r.doc_seal_seconds_per_1k, r.doc_reallocations, 1e3 * r.doc_alloc_seconds, r.reallocations,
                 1e3 * r.alloc_seconds, r.decode_tokens_per_s, r.decode_depth);
  for (const PolicyCostRow& r : report.configs) {
    std::fprintf(out, "%s: decode reps", r.config.c_str());
    for (double x : r.decode_tokens_per_s_reps) std::fprintf(out, " %.1f", x);
    std::fprintf(out,
                 "; %zu document blocks x layers sealed in %.3f s, %zu while decoding in %.4f s; share %.2f s%s%s\n",
                 r.doc_sealed_blocks, r.doc_seal_seconds, r.decode_sealed_blocks, r.decode_seal_seconds,
                 r.share_seconds, r.encoder.empty() ? "" : "; encoder: ", r.encoder.c_str());
  }
  std::fprintf(out,
               "search = relevance ranking (chunk + question embeddings, cosine); prefill includes sealing; seal = "
               "formats chosen (reallocations included) + encoding; alloc = the allocator's reallocations "
               "(document's / whole run)\nload average %.2f -> %.2f\n",
               report.load_average_before, report.load_average_after);
}

}  // namespace chorus::eval
