// `chorus eval ppl|logits`: perplexity the way llama.cpp's llama-perplexity computes it, and a
// full-logits dump for comparing against a reference implementation.
#include <cmath>
#include <algorithm>
#include <fstream>

#include "engine/kv_config.h"  // MakeKvConfig, MakeKvRuntime
#include "model/forward.h"
#include "ops/elementwise.h"  // LogSumExp
#include "tools/eval_args.h"  // EvalArgs, LoadInputs, RunKld
#include "tools/eval_kv.h"  // EvalKv: uniform formats or --policy comix|cocktail|cocktail-paper
#include "util/timer.h"

namespace chorus::cli {

// The text file and the model of an eval command (errors name the path).
Result<EvalInputs> LoadInputs(const EvalArgs& a) {
  auto text = ReadFile(a.file);
  if (!text.ok()) return text.status();
  auto model = LoadModel(a.model, {.f32_weights = a.f32_weights});
  if (!model.ok()) return model.status();
  return EvalInputs{std::move(text).value(), std::move(model).value()};
}

Result<EvalChunks> LoadEvalChunks(const EvalArgs& a) {
  auto in = LoadInputs(a);
  if (!in.ok()) return in.status();
  EvalChunks e;
  static_cast<EvalInputs&>(e) = std::move(in).value();
  const ModelConfig& c = e.model->config();
  if (static_cast<size_t>(a.ctx) > c.n_ctx_train)
    return Status::Error("-c {} exceeds the model's training context of {}", a.ctx, c.n_ctx_train);
  Timer t_tok;
  // As llama.cpp's -f: the whole file with add_special (a BOS first when the model adds one, e.g.
  // Gemma); each chunk's first token is then replaced by BOS (Chunk).
  e.tokens = e.model->tokenizer().Encode(e.text, /*add_special=*/true, false);
  e.tokenize_seconds = t_tok.Seconds();
  e.n_ctx = a.ctx;
  e.n_chunks = e.tokens.size() / e.n_ctx;
  if (e.n_chunks == 0)
    return Status::Error("'{}' has {} tokens, fewer than one chunk of -c {}", a.file, e.tokens.size(), e.n_ctx);
  if (a.chunks > 0) e.n_chunks = std::min<size_t>(e.n_chunks, a.chunks);
  if (e.model->tokenizer().add_bos()) e.bos = e.model->tokenizer().bos();
  return e;
}

std::vector<int32_t> EvalChunks::Chunk(size_t ch) const {
  std::vector<int32_t> chunk(tokens.begin() + ch * n_ctx, tokens.begin() + (ch + 1) * n_ctx);
  if (bos) chunk[0] = *bos;
  return chunk;
}

namespace {

// Perplexity over non-overlapping chunks of n_ctx tokens, each from an empty cache, scoring the
// second half of each chunk (logits n_ctx/2 .. n_ctx-2 predict the next token: 255 per chunk at
// 512, exactly as llama-perplexity), the first token replaced by BOS when the model adds one.
int RunPpl(const EvalArgs& a) {
  auto in = LoadEvalChunks(a);
  if (!in.ok()) return Fail(in.status());
  const Model& model = *in->model;
  const ModelConfig& c = model.config();
  const double tok_s = in->tokenize_seconds;
  const size_t n_ctx = in->n_ctx, n_chunks = in->n_chunks;

  ThreadPool pool(a.threads);
  ForwardPass enc_fwd(model, 512);
  auto ekv = EvalKv::Open(a.pol, a.kv, model, a.model, enc_fwd, pool);
  if (!ekv.ok()) return Fail(ekv.status());
  ForwardPass fwd(model, (*ekv)->micro_batch());
  std::vector<float> logits(n_ctx * c.n_vocab);
  const size_t first = n_ctx / 2;
  KvUsage usage;
  double nll = 0, nll2 = 0;
  size_t count = 0;
  // A terminal gets one line rewritten per chunk; a log file (scripts, --json runs of an hour) one
  // line per tenth of the chunks, so a long evaluation is never silent.
  const bool tty = isatty(2);
  Timer t_eval;
  for (size_t ch = 0; ch < n_chunks; ++ch) {
    const std::vector<int32_t> chunk = in->Chunk(ch);
    auto kv = (*ekv)->Begin(chunk);
    if (!kv.ok()) return Fail(kv.status());
    if (Status s = fwd.Run(chunk, **kv, pool, LogitsFor::kAll, logits.data()); !s.ok()) return Fail(s);
    (*ekv)->End(**kv);
    usage = (*ekv)->last_usage();
    for (size_t j = first; j + 1 < n_ctx; ++j) {  // llama-perplexity: logits first..n_ctx-2
      const float* row = logits.data() + j * c.n_vocab;
      const double lp = row[chunk[j + 1]] - LogSumExp(row, c.n_vocab);
      nll -= lp;
      nll2 += lp * lp;
      ++count;
    }
    const bool tenth = n_chunks >= 10 && (ch + 1) % (n_chunks / 10) == 0;
    if (tty || tenth || ch + 1 == n_chunks) {
      const double eta = t_eval.Seconds() / (ch + 1) * (n_chunks - ch - 1);
      std::fprintf(stderr, "%s[%zu/%zu] ppl %.4f  (%.0f tok/s, ETA %.0f s)%s", tty ? "\r" : "", ch + 1, n_chunks,
                   std::exp(nll / count), (ch + 1) * n_ctx / t_eval.Seconds(), eta, tty ? "   " : "\n");
    }
  }
  if (tty) std::fprintf(stderr, "\n");
  const double mean = nll / count;
  const double var = nll2 / count - mean * mean;
  const double ppl = std::exp(mean);
  const double ppl_err = ppl * std::sqrt(std::max(0.0, var) / (count - 1 > 0 ? count - 1 : 1));
  const double secs = t_eval.Seconds();
  if (a.json) {
    nlohmann::json j = {{"ppl", ppl},
                        {"ppl_stderr", ppl_err},
                        {"ctx", n_ctx},
                        {"chunks", n_chunks},
                        {"scored_tokens", count},
                        {"file_tokens", in->tokens.size()},
                        {"seconds", secs},
                        {"tokenize_seconds", tok_s},
                        {"threads", a.threads},
                        {"kv_sink_blocks", a.kv.sink_blocks},
                        {"kv_bytes_per_chunk", usage.total()},
                        {"kv_bits_per_element", KvBitsPerElement(usage.total(), n_ctx, c)}};
    if (const auto* u = std::get_if<KvPolicy::Uniform>(&a.pol.policy.rule)) j["kv_k"] = u->k, j["kv_v"] = u->v;
    if ((*ekv)->has_policy()) {  // chunks differ under a policy: their mean
      j["kv_k"] = j["kv_v"] = (*ekv)->Name();
      j["kv_bytes_per_chunk"] = (*ekv)->mean_bytes();
      j["kv_bits_per_element"] = KvBitsPerElement((*ekv)->mean_bytes(), n_ctx, c);
      j["kv_policy"] = (*ekv)->ReportJson(n_ctx);
    }
    PrintJson(j);
  } else {
    std::printf("perplexity %.4f ± %.4f over %zu chunks of %zu tokens (%zu scored) in %.1f s\n", ppl, ppl_err,
                n_chunks, n_ctx, count, secs);
    if ((*ekv)->has_policy()) (*ekv)->PrintReport(stdout, n_ctx);
    else
      std::printf("%s\n", DescribeKvUsage(KvConfigFor(a.pol.policy, a.kv, c).value(), usage, n_ctx, c).c_str());
  }
  return 0;
}

// Dumps raw little-endian f32 logits (n_tokens, n_vocab) for the first n tokens of a file, run as
// one sequence from position 0.
int RunLogits(const EvalArgs& a) {
  auto in = LoadInputs(a);
  if (!in.ok()) return Fail(in.status());
  const Model& model = *in->model;
  const std::string& text = in->text;
  const ModelConfig& c = model.config();
  std::vector<int32_t> tokens = model.tokenizer().Encode(text, /*add_special=*/true, false);  // as llama_logits.py
  if (tokens.size() < static_cast<size_t>(a.n_tokens))
    return Fail(Status::Error("'{}' has only {} tokens, fewer than -n {}", a.file, tokens.size(), a.n_tokens));
  tokens.resize(a.n_tokens);
  if (tokens.size() > c.n_ctx_train)
    return Fail(Status::Error("-n {} exceeds the model's training context of {}", a.n_tokens, c.n_ctx_train));
  ThreadPool pool(a.threads);
  ForwardPass fwd(model, 512);
  auto kv_config = KvConfigFor(a.pol.policy, a.kv, c, "eval logits");
  if (!kv_config.ok()) return Fail(kv_config.status());
  KvRuntime kv_rt = MakeKvRuntime(c, kv_config.value());
  auto kv = kv_rt.store->NewSequence(tokens.size());
  std::vector<float> logits(tokens.size() * c.n_vocab);
  if (Status s = fwd.Run(tokens, *kv, pool, LogitsFor::kAll, logits.data()); !s.ok()) return Fail(s);
  std::ofstream out(a.out, std::ios::binary);
  if (!out) return Fail(Status::Error("cannot write '{}'", a.out));
  out.write(reinterpret_cast<const char*>(logits.data()), logits.size() * sizeof(float));
  if (!out) return Fail(Status::Error("writing '{}' failed", a.out));
  if (a.json) {
    PrintJson({{"out", a.out}, {"n_tokens", tokens.size()}, {"n_vocab", c.n_vocab}, {"tokens", tokens}});
  } else {
    std::printf("wrote %zu x %zu f32 logits to %s\n", tokens.size(), c.n_vocab, a.out.c_str());
  }
  return 0;
}


}  // namespace

RunFn AddEval(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand("eval", "Quality evaluations: perplexity, logits dumps.");
  cmd->require_subcommand(1);
  CLI::App* ppl = cmd->add_subcommand("ppl", "Perplexity of a text file (llama.cpp's method: chunks of -c, "
                                              "second half of each chunk scored); uniform KV formats or --policy "
                                              "comix|cocktail|cocktail-paper.");
  CLI::App* lg = cmd->add_subcommand("logits", "Write the raw f32 logits of the first -n tokens of a file.");
  CLI::App* kld = cmd->add_subcommand("kld", "Compressed KV vs f16 KV on the same positions: PPL delta, mean and "
                                             "p99 KL divergence, top-1 agreement, measured bits/element (--configs, and --policy comix|cocktail|"
                                             "cocktail-paper as one more row; --json: per-chunk KLD and NLL too).");
  CLI::App* sens = cmd->add_subcommand(
      "sensitivity", "Measure the KV's end-to-end sensitivity: for every layer, side (K/V) and width of a family, the "
                     "mean KLD against f16 KV with only that layer's side at that width (chunks of -c, second halves "
                     "scored); writes the table that `--comix-rank measured --comix-sensitivity FILE` allocates by.");
  for (CLI::App* s : {ppl, lg, kld, sens}) {
    s->add_option("-m,--model", a->model, "GGUF model file")->required();
    s->add_option("-f,--file", a->file, "text file: e.g. WikiText-2's test.txt (where to get it: docs/EVAL.md) or examples/du_fu.txt, which the repository ships")->required();
    s->add_option("-t,--threads", a->threads, "threads")->check(CLI::Range(1, 256))->capture_default_str();
  }
  for (CLI::App* s : {ppl, lg, kld}) s->add_flag("--json", a->json, "print one JSON object");
  for (CLI::App* s : {ppl, lg, kld, sens})
    s->add_flag("--f32-weights", a->f32_weights,
                "a reference: dequantize the weight matrices to f32 at load, so their products take f32 activations "
                "(the engine rounds activations to int8 per 32 columns; any change upstream, a KV format of any "
                "width, re-draws that rounding downstream: ~0.003 KLD on SmolLM2 whatever the change's size). About "
                "4 bytes per weight, several times slower");
  for (CLI::App* s : {ppl, kld, sens}) {
    s->add_option("-c,--ctx", a->ctx, "tokens per chunk (kld default: 2048; sensitivity: 256)")
        ->check(CLI::Range(2, 1 << 20))->capture_default_str();
    s->add_option("--chunks", a->chunks, "evaluate only the first N chunks (default: all; sensitivity: 4)")
        ->check(CLI::Range(1, 1 << 30));
  }
  sens->add_option("-o,--out", a->out, "the table (JSON)")->required();
  sens->add_option("--comix-family", a->family, "formats: tq (tq2/3/4) or kivi (kivi2/3/4); 8 = q8 in either")
      ->check(CLI::IsMember({"tq", "kivi"}))
      ->capture_default_str();
  sens->add_option("--comix-tiers", a->tiers, "widths to measure, ascending, of 2,3,4,8")->capture_default_str();
  sens->add_option("--kv-sink", a->kv.sink_blocks, "leading 32-token blocks kept f16 (as every compressed policy)")
      ->capture_default_str();
  sens->add_option("--kv-window", a->kv.window, "format of the newest < 32 rows: f16 or q8")->capture_default_str();
  for (CLI::App* s : {ppl, kld, lg}) {
    AddKvFlags(s, a->kv);
    AddPolicyFlags(s, a->pol,
                   {.default_spec = "f16",
                    .with_query = s != lg,
                    .where = s == lg ? "uniform formats only (K/V)"
                                     : "each chunk of -c tokens is one sequence under it (cocktail: its blocks "
                                       "weighted by their relevance to --query; cocktail-paper: its own chunk map "
                                       "from --query); kld: one more row after --configs"});
  }
  kld->add_option("--configs", a->configs,
                  "several policies at once, e.g. q8/q8,q8/tq3,comix-tq:3 (the f16 base runs once; each takes "
                  "--kv-budget, --comix-sensitivity, --encoder and --query as --policy does)")
      ->delimiter(',');
  lg->add_option("-n,--n-tokens", a->n_tokens, "tokens to evaluate")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  lg->add_option("-o,--out", a->out, "output file (raw f32, n_tokens x n_vocab)")->required();
  auto [polykv, polykv_run] = AddPolykvEval(cmd);
  auto [comix, comix_run] = AddComixEval(cmd);
  auto [needle, needle_run] = AddNeedleEval(cmd);
  auto [segments, segments_run] = AddSegmentEval(cmd);
  return [a, ppl, kld, lg, sens, polykv = polykv, polykv_run = polykv_run, comix = comix, comix_run = comix_run,
          needle = needle, needle_run = needle_run, segments = segments, segments_run = segments_run] {
    if (segments->parsed()) return segments_run();
    if (polykv->parsed()) return polykv_run();
    if (comix->parsed()) return comix_run();
    if (needle->parsed()) return needle_run();
    for (CLI::App* s : {ppl, kld, lg}) {
      if (!s->parsed()) continue;
      if (Status st = CheckPolicyFlags(s, a->pol, /*need_query=*/true); !st.ok()) return Fail(st);
      a->policy_given = s->count("--policy") > 0;
    }
    if (ppl->parsed()) return RunPpl(*a);
    if (sens->parsed()) {
      if (sens->count("--ctx") == 0) a->ctx = 256;
      if (sens->count("--chunks") == 0) a->chunks = 4;
      return RunSensitivity(*a);
    }
    if (kld->parsed()) {
      if (kld->count("--ctx") == 0) a->ctx = 2048;
      return RunKld(*a);
    }
    return RunLogits(*a);
  };
}

}  // namespace chorus::cli
