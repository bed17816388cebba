// `chorus eval ppl|logits`: perplexity the way llama.cpp's llama-perplexity computes it, and a
// full-logits dump for comparing against a reference implementation.
#include <cmath>
#include <fstream>

#include "model/forward.h"
#include "ops/elementwise.h"  // LogSumExp
#include "tools/common.h"
#include "util/timer.h"

namespace chorus::cli {
namespace {

struct EvalArgs {
  std::string model, file, out;
  int ctx = 512;
  int chunks = 0;  // 0 = all
  int n_tokens = 1024;
  int threads = DefaultThreads();
  bool json = false;
};

// Perplexity over non-overlapping chunks of n_ctx tokens, each from an empty cache, scoring the
// second half of each chunk (tokens n_ctx/2 .. n_ctx-1), BOS first when the model adds one.
int RunPpl(const EvalArgs& a) {
  auto text = ReadFile(a.file);
  if (!text.ok()) return Fail(text.status());
  auto model_r = LoadModel(a.model);
  if (!model_r.ok()) return Fail(model_r.status());
  const Model& model = *model_r.value();
  const ModelConfig& c = model.config();
  if (static_cast<size_t>(a.ctx) > c.n_ctx_train)
    return Fail(Status::Error("-c {} exceeds the model's training context of {}", a.ctx, c.n_ctx_train));
  Timer t_tok;
  std::vector<int32_t> tokens = model.tokenizer().Encode(text.value(), /*add_special=*/false, false);
  const double tok_s = t_tok.Seconds();
  const size_t n_ctx = a.ctx;
  size_t n_chunks = tokens.size() / n_ctx;
  if (n_chunks == 0)
    return Fail(Status::Error("'{}' has {} tokens, fewer than one chunk of -c {}", a.file, tokens.size(), n_ctx));
  if (a.chunks > 0) n_chunks = std::min<size_t>(n_chunks, a.chunks);
  const auto bos = model.tokenizer().bos();
  const bool add_bos = model.tokenizer().add_bos() && bos.has_value();

  ThreadPool pool(a.threads);
  ForwardPass fwd(model, 512);
  DenseKvCache kv = fwd.MakeCache(n_ctx);
  std::vector<float> logits(n_ctx * c.n_vocab);
  const size_t first = n_ctx / 2;
  double nll = 0, nll2 = 0;
  size_t count = 0;
  Timer t_eval;
  for (size_t ch = 0; ch < n_chunks; ++ch) {
    std::vector<int32_t> chunk(tokens.begin() + ch * n_ctx, tokens.begin() + (ch + 1) * n_ctx);
    if (add_bos) chunk[0] = *bos;
    kv.Clear();
    if (Status s = fwd.Run(chunk, kv, pool, LogitsFor::kAll, logits.data()); !s.ok()) return Fail(s);
    for (size_t j = first - 1; j + 1 < n_ctx; ++j) {
      const float* row = logits.data() + j * c.n_vocab;
      const double lp = row[chunk[j + 1]] - LogSumExp(row, c.n_vocab);
      nll -= lp;
      nll2 += lp * lp;
      ++count;
    }
    if (!a.json || isatty(2)) {
      const double eta = t_eval.Seconds() / (ch + 1) * (n_chunks - ch - 1);
      std::fprintf(stderr, "\r[%zu/%zu] ppl %.4f  (%.0f tok/s, ETA %.0f s)   ", ch + 1, n_chunks,
                   std::exp(nll / count), (ch + 1) * n_ctx / t_eval.Seconds(), eta);
    }
  }
  std::fprintf(stderr, "\n");
  const double mean = nll / count;
  const double var = nll2 / count - mean * mean;
  const double ppl = std::exp(mean);
  const double ppl_err = ppl * std::sqrt(std::max(0.0, var) / (count - 1 > 0 ? count - 1 : 1));
  const double secs = t_eval.Seconds();
  if (a.json) {
    PrintJson({{"ppl", ppl}, {"ppl_stderr", ppl_err}, {"ctx", n_ctx}, {"chunks", n_chunks},
               {"scored_tokens", count}, {"file_tokens", tokens.size()}, {"seconds", secs},
               {"tokenize_seconds", tok_s}, {"threads", a.threads}});
  } else {
    std::printf("perplexity %.4f ± %.4f over %zu chunks of %zu tokens (%zu scored) in %.1f s\n", ppl, ppl_err,
                n_chunks, n_ctx, count, secs);
  }
  return 0;
}

// Dumps raw little-endian f32 logits (n_tokens, n_vocab) for the first n tokens of a file, run as
// one sequence from position 0.
int RunLogits(const EvalArgs& a) {
  auto text = ReadFile(a.file);
  if (!text.ok()) return Fail(text.status());
  auto model_r = LoadModel(a.model);
  if (!model_r.ok()) return Fail(model_r.status());
  const Model& model = *model_r.value();
  const ModelConfig& c = model.config();
  std::vector<int32_t> tokens = model.tokenizer().Encode(text.value(), false, false);
  if (tokens.size() < static_cast<size_t>(a.n_tokens))
    return Fail(Status::Error("'{}' has only {} tokens, fewer than -n {}", a.file, tokens.size(), a.n_tokens));
  tokens.resize(a.n_tokens);
  if (tokens.size() > c.n_ctx_train)
    return Fail(Status::Error("-n {} exceeds the model's training context of {}", a.n_tokens, c.n_ctx_train));
  ThreadPool pool(a.threads);
  ForwardPass fwd(model, 512);
  DenseKvCache kv = fwd.MakeCache(tokens.size());
  std::vector<float> logits(tokens.size() * c.n_vocab);
  if (Status s = fwd.Run(tokens, kv, pool, LogitsFor::kAll, logits.data()); !s.ok()) return Fail(s);
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
                                              "second half of each chunk scored).");
  CLI::App* lg = cmd->add_subcommand("logits", "Write the raw f32 logits of the first -n tokens of a file.");
  for (CLI::App* s : {ppl, lg}) {
    s->add_option("-m,--model", a->model, "GGUF model file")->required();
    s->add_option("-f,--file", a->file, "text file (e.g. ../shared/data/wikitext-2/test.txt)")->required();
    s->add_option("-t,--threads", a->threads, "threads")->check(CLI::Range(1, 256))->capture_default_str();
    s->add_flag("--json", a->json, "print one JSON object");
  }
  ppl->add_option("-c,--ctx", a->ctx, "tokens per chunk")->check(CLI::Range(2, 1 << 20))->capture_default_str();
  ppl->add_option("--chunks", a->chunks, "evaluate only the first N chunks (default: all)")->check(CLI::Range(1, 1 << 30));
  lg->add_option("-n,--n-tokens", a->n_tokens, "tokens to evaluate")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  lg->add_option("-o,--out", a->out, "output file (raw f32, n_tokens x n_vocab)")->required();
  return [a, ppl] { return ppl->parsed() ? RunPpl(*a) : RunLogits(*a); };
}

}  // namespace chorus::cli
