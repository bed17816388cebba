// `chorus eval comix`: does CoMix pay? Several agents, each reading its own WikiText-2 excerpt,
// join one KV store at staggered steps and decode together; every configuration (uniform K/V
// formats, CoMix at an average-bits target) is compared with full fp16 KV on the same positions:
// PPL delta, mean/p99 KLD, top-1 agreement, greedy-answer agreement, measured peak KV bytes and
// decode speed. Prints a table, or one JSON object with --json.
#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "tools/bench_comix.h"
#include "tools/policy_flags.h"  // LoadSensitivityTables, SensitivityFor
#include "tools/common.h"
#include "util/timer.h"

namespace chorus::cli {
namespace {

struct ComixArgs {
  std::string model, file = kWikiTextTest;
  size_t agents = 6, tokens = 480, prefill = 128, join_every = 32, answer = 16, sink = 1;
  std::vector<std::string> configs{"kivi2", "tq2", "comix-tq:2", "kivi3", "tq3", "comix-tq:3", "comix-kivi:3",
                                   "kivi4", "tq4", "comix-tq:4"};
  int threads = 1;
  bool json = false;
  std::string window = "q8";
  std::vector<std::string> sensitivity;  // tables for the :m configs (one per family)
};

int RunComixEval(const ComixArgs& a) {
  auto model_r = LoadModel(a.model);
  if (!model_r.ok()) return Fail(model_r.status());
  const Model& model = *model_r.value();
  const ModelConfig& c = model.config();
  std::vector<ComixBenchConfig> configs;
  auto tables = LoadSensitivityTables(a.sensitivity);
  if (!tables.ok()) return Fail(tables.status());
  for (const std::string& s : a.configs) {
    auto cfg = ParseComixBenchConfig(s);
    if (!cfg.ok()) return Fail(cfg.status().Context("--configs"));
    if (cfg->measured) {
      auto t = SensitivityFor(*tables, cfg->family, s);
      if (!t.ok()) return Fail(t.status());
      cfg->sensitivity = t->table;
    }
    configs.push_back(*cfg);
  }
  auto text = ReadDefaultText(a.file, "-f");
  if (!text.ok()) return Fail(text.status());
  // Agent i reads `len_i` tokens (2/3, 1, 4/3 of --tokens in turn: they finish at different times)
  // starting at the i-th of N evenly spaced offsets of the file.
  auto window = ParseWindowFormat(a.window);
  if (!window.ok()) return Fail(window.status().Context("--kv-window"));
  ComixBenchSetup setup{.prefill = a.prefill, .join_every = a.join_every, .answer_tokens = a.answer,
                        .sink_blocks = a.sink, .threads = a.threads, .window = *window};
  const std::string& t = text.value();
  const auto bos = model.tokenizer().bos();
  for (size_t i = 0; i < a.agents; ++i) {
    const size_t len = a.tokens * (2 + i % 3) / 3;
    const size_t off = t.size() * i / a.agents;
    std::vector<int32_t> ids = model.tokenizer().Encode(t.substr(off, len * 8), false, false);
    if (ids.size() < len + 1) return Fail(Status::Error("'{}' is too short for {} agents", a.file, a.agents));
    ids.erase(ids.begin());  // likely a partial word at the cut
    ids.resize(len);
    if (model.tokenizer().add_bos() && bos) ids.insert(ids.begin(), *bos), ids.pop_back();
    if (len <= a.prefill) return Fail(Status::Error("--tokens {} leaves no room after --prefill {}", a.tokens, a.prefill));
    setup.texts.push_back(std::move(ids));
  }

  std::vector<float> base_lp;
  Timer total;
  auto base = RunComixBench(model, setup, ComixBenchConfig{.name = "f16"}, &base_lp, true);
  if (!base.ok()) return Fail(base.status().Context("full KV run"));
  const double base_ppl = std::exp(base->nll / base->scored);
  const double base_speed = base->decode_tokens / base->decode_seconds;
  nlohmann::json out = {{"agents", a.agents},        {"tokens", a.tokens},   {"prefill", a.prefill},
                        {"join_every", a.join_every}, {"answer_tokens", a.answer}, {"threads", a.threads},
                        {"file", a.file},             {"scored", base->scored}, {"base_ppl", base_ppl},
                        {"base_peak_bytes", base->peak_bytes}, {"base_decode_tok_s", base_speed}};
  if (!a.json)
    std::printf("%zu agents (%zu-%zu tokens each, joining every %zu steps), %zu scored positions, %d thread(s)\n"
                "%-14s %9s %8s %9s %9s %7s %7s %7s %10s %7s %6s %9s %7s %12s\n",
                a.agents, a.tokens * 2 / 3, a.tokens * 4 / 3, a.join_every, base->scored, a.threads, "config", "PPL",
                "dPPL%", "meanKLD", "p99KLD", "top-1", "answers", "ans.tok", "peak KiB", "%fp16", "bits", "dec tok/s", "speed",
                "realloc us");
  if (!a.json)
    std::printf("%-14s %9.4f %8s %9s %9s %7s %7s %7s %10.1f %7.1f %6.2f %9.1f %7.2f %12s\n", "f16 (full)", base_ppl,
                "-", "-", "-", "-", "-", "-", base->peak_bytes / 1024.0, 100.0, 16.0, base_speed, 1.0, "-");
  std::fflush(stdout);
  std::map<std::string, size_t> peaks;  // config name -> measured peak bytes
  for (ComixBenchConfig cfg : configs) {
    if (cfg.fixed_budget) {
      const std::string uniform = fmt::format("{}{}", cfg.family, int(cfg.avg_bits));
      if (!peaks.count(uniform))
        return Fail(Status::Error("{} needs the uniform {} run before it in --configs (its measured peak is the budget)",
                                  cfg.name, uniform));
      cfg.budget_bytes = peaks[uniform];
    }
    auto r = RunComixBench(model, setup, cfg, &base_lp, false);
    if (!r.ok()) return Fail(r.status().Context(cfg.name));
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
    out["configs"].push_back({{"config", cfg.name}, {"budget_bytes", cfg.budget_bytes}, {"ppl", ppl}, {"ppl_delta_pct", 100.0 * (ppl / base_ppl - 1)},
                              {"kld_mean", mean}, {"kld_p99", p99}, {"top1", double(r->top1) / r->scored},
                              {"answers_identical", same}, {"answer_token_agreement", tok_agree}, {"peak_bytes", r->peak_bytes},
                              {"peak_pct_of_fp16", 100.0 * r->peak_bytes / base->peak_bytes},
                              {"bits_per_element_at_peak", bits}, {"decode_tok_s", speed},
                              {"decode_speed_vs_full", speed / base_speed}, {"reallocs", r->reallocs}, {"queued", r->queued},
                              {"realloc_mean_us", r->realloc_mean_us}, {"realloc_max_us", r->realloc_max_us},
                              {"heat_map", r->heat_map}, {"events", r->events}});
    if (!a.json) {
      std::printf("%-14s %9.4f %+8.2f %9.5f %9.5f %7.4f %4zu/%-2zu %7.3f %10.1f %7.1f %6.2f %9.1f %7.2f %12s\n",
                  cfg.name.c_str(), ppl, 100.0 * (ppl / base_ppl - 1), mean, p99, double(r->top1) / r->scored, same,
                  a.agents, tok_agree, r->peak_bytes / 1024.0, 100.0 * r->peak_bytes / base->peak_bytes, bits, speed,
                  speed / base_speed,
                  cfg.comix ? fmt::format("{:.0f}/{:.0f}", r->realloc_mean_us, r->realloc_max_us).c_str() : "-");
      std::fflush(stdout);
    }
    if (!a.json && cfg.comix) {
      std::fprintf(stderr, "%s: %zu agent(s) queued at join; allocation with 3 agents running:\n%s", cfg.name.c_str(),
                   r->queued, r->heat_map.c_str());
      for (const std::string& e : r->events) std::fprintf(stderr, "  realloc: %s\n", e.c_str());
    }
  }
  out["seconds"] = total.Seconds();
  if (a.json) PrintJson(out);
  return 0;
}

}  // namespace

std::pair<CLI::App*, RunFn> AddComixEval(CLI::App* eval) {
  auto a = std::make_shared<ComixArgs>();
  CLI::App* cmd = eval->add_subcommand(
      "comix", "CoMix vs uniform KV formats at equal average bits: several agents with their own WikiText-2 "
               "excerpts decoding together; PPL/KLD/top-1/answers vs full KV, peak KV bytes, decode speed.");
  cmd->add_option("-m,--model", a->model, "GGUF model file")->required();
  cmd->add_option("-f,--file", a->file, "text the agents read excerpts of")->capture_default_str();
  cmd->add_option("--agents", a->agents, "agents")->check(CLI::Range(1, 64))->capture_default_str();
  cmd->add_option("--tokens", a->tokens, "mean excerpt tokens per agent (2/3, 1, 4/3 of it in turn)")
      ->check(CLI::Range(64, 1 << 14))->capture_default_str();
  cmd->add_option("--prefill", a->prefill, "tokens each agent prefills when it joins")->check(CLI::Range(1, 512))
      ->capture_default_str();
  cmd->add_option("--join-every", a->join_every, "steps between agent joins")->capture_default_str();
  cmd->add_option("--answer", a->answer, "greedy answer tokens per agent")->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--kv-sink", a->sink, "leading 32-token blocks of a context kept f16")->capture_default_str();
  cmd->add_option("--kv-window", a->window, "window rows of the compressed configs: q8 or f16 (the f16 base: f16)")
      ->capture_default_str();
  cmd->add_option("--configs", a->configs, "uniform K/V (kivi3, q8/tq3) and comix-tq:B / comix-kivi:B (B = average "
                                           "bits 2..8; suffixes :cal, :m, :k4, :t348, :bound, :joint, :budget)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--comix-sensitivity", a->sensitivity, "the tables of the ':m' configs (measured ranking), one per "
                                                         "family, written by `chorus eval sensitivity -o FILE`")
      ->delimiter(',');
  cmd->add_option("-t,--threads", a->threads, "threads")->check(CLI::Range(1, 256))->capture_default_str();
  cmd->add_flag("--json", a->json, "print one JSON object");
  return {cmd, [a] { return RunComixEval(*a); }};
}

}  // namespace chorus::cli
