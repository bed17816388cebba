// CoMix vs uniform KV formats with staggered agents (see comix_eval.h).
#include "eval/comix_eval.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "eval/harness.h"  // LoadModel
#include "eval/report.h"   // Versioned
#include "util/timer.h"

namespace chorus::eval {

Result<ComixEvalReport> RunComixEval(const ComixEvalConfig& a) {
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Model> model_p, LoadModel(a.model_path));
  const Model& model = *model_p;
  const ModelConfig& c = model.config();
  auto window = ParseWindowFormat(a.window);
  if (!window.ok()) return window.status().Context("--kv-window");
  ComixBenchSetup setup{.prefill = a.prefill,
                        .join_every = a.join_every,
                        .answer_tokens = a.answer,
                        .sink_blocks = a.sink,
                        .threads = a.threads,
                        .window = *window};
  const std::string& t = a.text;
  const auto bos = model.tokenizer().bos();
  for (size_t i = 0; i < a.agents; ++i) {
    const size_t len = a.tokens * (2 + i % 3) / 3;
    const size_t off = t.size() * i / a.agents;
    std::vector<int32_t> ids = model.tokenizer().Encode(t.substr(off, len * 8), false, false);
    if (ids.size() < len + 1) return Status::Error("'{}' is too short for {} agents", a.text_name, a.agents);
    ids.erase(ids.begin());  // likely a partial word at the cut
    ids.resize(len);
    if (model.tokenizer().add_bos() && bos) ids.insert(ids.begin(), *bos), ids.pop_back();
    if (len <= a.prefill) return Status::Error("--tokens {} leaves no room after --prefill {}", a.tokens, a.prefill);
    setup.texts.push_back(std::move(ids));
  }

  std::vector<float> base_lp;
  Timer total;
  auto base = RunComixBench(model, setup, ComixBenchConfig{.name = "f16"}, &base_lp, true);
  if (!base.ok()) return base.status().Context("full KV run");
  ComixEvalReport rep{.agents = a.agents,
                      .tokens = a.tokens,
                      .prefill = a.prefill,
                      .join_every = a.join_every,
                      .answer_tokens = a.answer,
                      .threads = a.threads,
                      .file = a.text_name,
                      .scored = base->scored,
                      .base_peak_bytes = base->peak_bytes,
                      .base_ppl = std::exp(base->nll / base->scored),
                      .base_decode_tok_s = base->decode_tokens / base->decode_seconds};
  const double base_ppl = rep.base_ppl, base_speed = rep.base_decode_tok_s;
  if (a.table) {
    std::fprintf(a.table,
                 "%zu agents (%zu-%zu tokens each, joining every %zu steps), %zu scored positions, %d thread(s)\n"
                 "%-14s %9s %8s %9s %9s %7s %7s %7s %10s %7s %6s %9s %7s %12s\n",
                 a.agents, a.tokens * 2 / 3, a.tokens * 4 / 3, a.join_every, base->scored, a.threads, "config", "PPL",
                 "dPPL%", "meanKLD", "p99KLD", "top-1", "answers", "ans.tok", "peak KiB", "%fp16", "bits", "dec tok/s",
                 "speed", "realloc us");
    std::fprintf(a.table, "%-14s %9.4f %8s %9s %9s %7s %7s %7s %10.1f %7.1f %6.2f %9.1f %7.2f %12s\n", "f16 (full)",
                 base_ppl, "-", "-", "-", "-", "-", "-", base->peak_bytes / 1024.0, 100.0, 16.0, base_speed, 1.0, "-");
  }
  std::fflush(stdout);
  std::map<std::string, size_t> peaks;  // config name -> measured peak bytes
  for (ComixBenchConfig cfg : a.configs) {
    if (cfg.fixed_budget) {
      const std::string uniform = fmt::format("{}{}", cfg.family, int(cfg.avg_bits));
      if (!peaks.count(uniform))
        return Status::Error("{} needs the uniform {} run before it in --configs (its measured peak is the budget)",
                             cfg.name, uniform);
      cfg.budget_bytes = peaks[uniform];
    }
    auto r = RunComixBench(model, setup, cfg, &base_lp, false);
    if (!r.ok()) return r.status().Context(cfg.name);
    peaks[cfg.name] = r->peak_bytes;
    std::vector<float> kl = r->kld;
    std::sort(kl.begin(), kl.end());
    double mean = 0;
    for (float x : kl) mean += x;
    mean /= std::max<size_t>(1, kl.size());
    const double p99 = kl.empty() ? 0 : kl[std::min(kl.size() - 1, size_t(0.99 * kl.size()))];
    const double ppl = std::exp(r->nll / r->scored);
    size_t same = 0, tok_same = 0, tok_all = 0;  // identical answers; position-wise matching answer tokens
    for (size_t i = 0; i < a.agents; ++i) {
      same += r->answers[i] == base->answers[i];
      for (size_t j = 0; j < base->answers[i].size(); ++j, ++tok_all)
        tok_same += j < r->answers[i].size() && r->answers[i][j] == base->answers[i][j];
    }
    const double tok_agree = tok_all ? double(tok_same) / tok_all : 0;
    const double bits = 8.0 * r->peak_bytes / (double(r->peak_tokens) * c.n_layer * c.kv_dim() * 2);
    const double speed = r->decode_tokens / r->decode_seconds;
    rep.configs.push_back({.config = cfg.name,
                           .budget_bytes = cfg.budget_bytes,
                           .ppl = ppl,
                           .ppl_delta_pct = 100.0 * (ppl / base_ppl - 1),
                           .kld_mean = mean,
                           .kld_p99 = p99,
                           .top1 = double(r->top1) / r->scored,
                           .answers_identical = same,
                           .answer_token_agreement = tok_agree,
                           .peak_bytes = r->peak_bytes,
                           .peak_pct_of_fp16 = 100.0 * r->peak_bytes / base->peak_bytes,
                           .bits_per_element_at_peak = bits,
                           .decode_tok_s = speed,
                           .decode_speed_vs_full = speed / base_speed,
                           .reallocs = r->reallocs,
                           .queued = r->queued,
                           .realloc_mean_us = r->realloc_mean_us,
                           .realloc_max_us = r->realloc_max_us,
                           .heat_map = r->heat_map,
                           .events = r->events});
    if (a.table) {
      std::fprintf(
          a.table, "%-14s %9.4f %+8.2f %9.5f %9.5f %7.4f %4zu/%-2zu %7.3f %10.1f %7.1f %6.2f %9.1f %7.2f %12s\n",
          cfg.name.c_str(), ppl, 100.0 * (ppl / base_ppl - 1), mean, p99, double(r->top1) / r->scored, same, a.agents,
          tok_agree, r->peak_bytes / 1024.0, 100.0 * r->peak_bytes / base->peak_bytes, bits, speed, speed / base_speed,
          cfg.comix ? fmt::format("{:.0f}/{:.0f}", r->realloc_mean_us, r->realloc_max_us).c_str() : "-");
      std::fflush(a.table);
    }
    if (a.log && cfg.comix) {
      std::fprintf(a.log, "%s: %zu agent(s) queued at join; allocation with 3 agents running:\n%s", cfg.name.c_str(),
                   r->queued, r->heat_map.c_str());
      for (const std::string& e : r->events) std::fprintf(a.log, "  realloc: %s\n", e.c_str());
    }
  }
  rep.seconds = total.Seconds();
  return rep;
}

nlohmann::json ToJson(const ComixEvalReport& r) {
  nlohmann::json out = {{"agents", r.agents},
                        {"tokens", r.tokens},
                        {"prefill", r.prefill},
                        {"join_every", r.join_every},
                        {"answer_tokens", r.answer_tokens},
                        {"threads", r.threads},
                        {"file", r.file},
                        {"scored", r.scored},
                        {"base_ppl", r.base_ppl},
                        {"base_peak_bytes", r.base_peak_bytes},
                        {"base_decode_tok_s", r.base_decode_tok_s},
                        {"seconds", r.seconds}};
  for (const ComixEvalRow& row : r.configs)
    out["configs"].push_back({{"config", row.config},
                              {"budget_bytes", row.budget_bytes},
                              {"ppl", row.ppl},
                              {"ppl_delta_pct", row.ppl_delta_pct},
                              {"kld_mean", row.kld_mean},
                              {"kld_p99", row.kld_p99},
                              {"top1", row.top1},
                              {"answers_identical", row.answers_identical},
                              {"answer_token_agreement", row.answer_token_agreement},
                              {"peak_bytes", row.peak_bytes},
                              {"peak_pct_of_fp16", row.peak_pct_of_fp16},
                              {"bits_per_element_at_peak", row.bits_per_element_at_peak},
                              {"decode_tok_s", row.decode_tok_s},
                              {"decode_speed_vs_full", row.decode_speed_vs_full},
                              {"reallocs", row.reallocs},
                              {"queued", row.queued},
                              {"realloc_mean_us", row.realloc_mean_us},
                              {"realloc_max_us", row.realloc_max_us},
                              {"heat_map", row.heat_map},
                              {"events", row.events}});
  return Versioned("comix", std::move(out));
}

}  // namespace chorus::eval
