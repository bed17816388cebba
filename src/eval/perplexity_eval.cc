// Perplexity, KLD against the f16 KV, and logits dumps (see perplexity_eval.h).
#include "eval/perplexity_eval.h"

#include <fmt/format.h>
#include <unistd.h>  // isatty

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <optional>

#include "chorus/research.h"  // research::Open, ScoreSequence
#include "eval/harness.h"     // LoadModel, ReadFile
#include "eval/report.h"      // Versioned
#include "eval/uniform_kv.h"  // UniformKvConfig (logits)
#include "model/forward.h"    // ForwardPass (logits)
#include "ops/elementwise.h"  // LogSumExp
#include "util/thread_pool.h"  // ThreadPool
#include "util/timer.h"

namespace chorus::eval {
namespace {

// The text's tokens and chunks of a chunked evaluation (errors: ctx beyond the model's training
// context, a text shorter than one chunk).
struct Chunks {
  std::string text;
  std::vector<int32_t> tokens;
  size_t n_ctx = 0, n_chunks = 0;
  std::optional<int32_t> bos;  // replaces each chunk's first token when the model adds BOS
  double tokenize_seconds = 0;
  std::vector<int32_t> Chunk(size_t ch) const {
    std::vector<int32_t> chunk(tokens.begin() + ch * n_ctx, tokens.begin() + (ch + 1) * n_ctx);
    if (bos) chunk[0] = *bos;
    return chunk;
  }
};

// An engine for the chunks under `kv`; with `weights_of`, over that engine's weights (kld: one copy
// of the model for every row).
Result<std::unique_ptr<Engine>> OpenEngine(const ChunkedText& t, const KvOptions& kv,
                                           const Engine* weights_of = nullptr) {
  if (t.ctx < 3)  // a chunk's second half must hold a scored position (logits ctx/2 .. ctx-2)
    return Status::Error("-c {} is too short: a chunk needs at least 3 tokens", t.ctx);
  CHORUS_ASSIGN_OR_RETURN(
      std::unique_ptr<Engine> engine,
      research::Open(EvalEngineOptions(kv, t.model_path, t.threads, t.ctx),
                     {.f32_weights = t.f32_weights, .join_reserve = false, .weights_of = weights_of}));
  // A policy whose table is missing runs its fallback (:f) in the engine; a measurement must run
  // what its report names, so here that is an error carrying the engine's note.
  const auto settings = nlohmann::json::parse(engine->KvSettings(), nullptr, /*allow_exceptions=*/false);
  if (settings.is_object() && settings.contains("note"))
    return Status::Error("{}; an eval measures the policy it names, so pass the fallback's formats to measure them",
                         settings["note"].get<std::string>());
  return engine;
}

// The text tokenized through `engine` (opened with n_ctx = t.ctx, which Engine::Open checks against
// the model's training context).
Result<Chunks> LoadChunks(const ChunkedText& t, const std::string& text, const Engine& engine) {
  Chunks e;
  e.text = text;
  Timer t_tok;
  // As llama.cpp's -f: the whole file with add_special (a BOS first when the model adds one, e.g.
  // Gemma); each chunk's first token is then replaced by BOS (Chunk).
  e.tokens = engine.Tokenize(e.text, /*add_special=*/true, false);
  e.tokenize_seconds = t_tok.Seconds();
  e.n_ctx = t.ctx;
  e.n_chunks = e.tokens.size() / e.n_ctx;
  if (e.n_chunks == 0)
    return Status::Error("'{}' has {} tokens, fewer than one chunk of -c {}", t.text_path, e.tokens.size(), e.n_ctx);
  if (t.chunks > 0) e.n_chunks = std::min<size_t>(e.n_chunks, t.chunks);
  if (const std::vector<int32_t> bos = engine.Tokenize("", true, false); !bos.empty()) e.bos = bos[0];
  return e;
}

// What `write` prints, as a string (the text reports of KvRecord).
std::string Captured(const std::function<void(std::FILE*)>& write) {
  char* buf = nullptr;
  size_t size = 0;
  std::FILE* f = open_memstream(&buf, &size);
  if (f == nullptr) return {};
  write(f);
  std::fclose(f);
  std::string s(buf, size);
  std::free(buf);
  return s;
}

// Scores one chunk through the engine: its KV recorded, each logit row from `first` on handed to
// `row` (index from `first`).
Status ScoreChunk(Engine& engine, const KvOptions& kv, std::span<const int32_t> chunk, size_t index, size_t first,
                  KvRecord& record, const std::function<void(size_t r, std::span<const float> logits)>& row) {
  auto seq = research::ScoreSequence(engine, chunk,
                                     {.query = kv.query,
                                      .label = fmt::format("chunk {}", index + 1),
                                      .on_logits = [&](size_t j, std::span<const float> logits) {
                                        if (j >= first) row(j - first, logits);
                                      }});
  if (!seq.ok()) return seq.status().Context(fmt::format("chunk {} ({} tokens)", index + 1, chunk.size()));
  record.Add(*seq, chunk.size());
  return Status::Ok();
}

// The uniform formats' line of the text report (as DescribeKvUsage prints it).
std::string DescribeUniform(const KvOptions& kv, const research::SequenceKv& u, size_t tokens, const Engine& e) {
  const auto& f = std::get<KvPolicy::Uniform>(kv.policy.rule);
  return fmt::format(
      "K {} / V {} (sink blocks f16: {}): {:.2f} MiB held for {} tokens ({} blocks {:.2f} MiB + windows "
      "{:.2f} MiB + tables {:.1f} KiB) = {:.2f} bits/element (fp16 KV: {:.2f} MiB)",
      f.k, f.v, f.sink_blocks >= 0 ? size_t(f.sink_blocks) : kv.sink_blocks, u.total_bytes / 1048576.0, tokens,
      u.sealed_blocks, u.block_bytes / 1048576.0, u.window_bytes / 1048576.0, u.table_bytes / 1024.0,
      BitsPerElement(e, u.total_bytes, tokens), e.Fp16Bytes(tokens) / 1048576.0);
}

}  // namespace

Result<PerplexityReport> RunPerplexity(const PerplexityConfig& cfg) {
  CHORUS_ASSIGN_OR_RETURN(const std::string text, ReadFile(cfg.text.text_path));
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, OpenEngine(cfg.text, cfg.kv));
  CHORUS_ASSIGN_OR_RETURN(Chunks in, LoadChunks(cfg.text, text, *engine));
  const size_t V = engine->vocab_size();
  const size_t n_ctx = in.n_ctx, n_chunks = in.n_chunks;
  KvRecord record(cfg.kv, *engine);
  const size_t first = n_ctx / 2;
  double nll = 0, nll2 = 0;
  size_t count = 0;
  // A terminal gets one line rewritten per chunk; a log file (scripts, --json runs of an hour) one
  // line per tenth of the chunks, so a long evaluation is never silent.
  const bool tty = cfg.log != nullptr && isatty(fileno(cfg.log));
  Timer t_eval;
  for (size_t ch = 0; ch < n_chunks; ++ch) {
    const std::vector<int32_t> chunk = in.Chunk(ch);
    CHORUS_RETURN_IF_ERROR(ScoreChunk(*engine, cfg.kv, chunk, ch, first, record, [&](size_t r, auto row) {
      const size_t j = first + r;
      if (j + 1 >= n_ctx) return;  // llama-perplexity: logits first..n_ctx-2
      const double lp = row[chunk[j + 1]] - LogSumExp(row.data(), V);
      nll -= lp;
      nll2 += lp * lp;
      ++count;
    }));
    const bool tenth = n_chunks >= 10 && (ch + 1) % (n_chunks / 10) == 0;
    if (cfg.log && (tty || tenth || ch + 1 == n_chunks)) {
      const double eta = t_eval.Seconds() / (ch + 1) * (n_chunks - ch - 1);
      std::fprintf(cfg.log, "%s[%zu/%zu] ppl %.4f  (%.0f tok/s, ETA %.0f s)%s", tty ? "\r" : "", ch + 1, n_chunks,
                   std::exp(nll / count), (ch + 1) * n_ctx / t_eval.Seconds(), eta, tty ? "   " : "\n");
    }
  }
  if (tty) std::fprintf(cfg.log, "\n");
  PerplexityReport r;
  const double mean = nll / count;
  const double var = nll2 / count - mean * mean;
  r.ppl = std::exp(mean);
  r.ppl_stderr = r.ppl * std::sqrt(std::max(0.0, var) / (count - 1 > 0 ? count - 1 : 1));
  r.seconds = t_eval.Seconds();
  r.ctx = n_ctx, r.chunks = n_chunks, r.scored_tokens = count, r.file_tokens = in.tokens.size();
  r.tokenize_seconds = in.tokenize_seconds, r.threads = cfg.text.threads, r.kv_sink_blocks = cfg.kv.sink_blocks;
  r.kv_bytes_per_chunk = record.last_bytes();
  r.kv_bits_per_element = BitsPerElement(*engine, record.last_bytes(), n_ctx);
  if (const auto* u = std::get_if<KvPolicy::Uniform>(&cfg.kv.policy.rule)) r.kv_k = u->k, r.kv_v = u->v;
  if (record.has_policy()) {  // chunks differ under a policy: their mean
    r.kv_k = r.kv_v = record.Name();
    r.kv_bytes_per_chunk = record.mean_bytes();
    r.kv_bits_per_element = BitsPerElement(*engine, record.mean_bytes(), n_ctx);
    r.kv_policy = record.ReportJson(n_ctx);
    r.kv_text = Captured([&](std::FILE* f) { record.PrintReport(f, n_ctx); });
  } else {
    r.kv_text = DescribeUniform(cfg.kv, record.last(), n_ctx, *engine) + "\n";
  }
  return r;
}

nlohmann::json ToJson(const PerplexityReport& r) {
  nlohmann::json j = {{"ppl", r.ppl},
                      {"ppl_stderr", r.ppl_stderr},
                      {"ctx", r.ctx},
                      {"chunks", r.chunks},
                      {"scored_tokens", r.scored_tokens},
                      {"file_tokens", r.file_tokens},
                      {"seconds", r.seconds},
                      {"tokenize_seconds", r.tokenize_seconds},
                      {"threads", r.threads},
                      {"kv_sink_blocks", r.kv_sink_blocks},
                      {"kv_bytes_per_chunk", r.kv_bytes_per_chunk},
                      {"kv_bits_per_element", r.kv_bits_per_element}};
  if (!r.kv_k.empty()) j["kv_k"] = r.kv_k, j["kv_v"] = r.kv_v;
  if (!r.kv_policy.is_null()) j["kv_policy"] = r.kv_policy;
  return Versioned("perplexity", std::move(j));
}

void PrintText(const PerplexityReport& r, std::FILE* out) {
  std::fprintf(out, "perplexity %.4f ± %.4f over %zu chunks of %zu tokens (%zu scored) in %.1f s\n", r.ppl,
               r.ppl_stderr, r.chunks, r.ctx, r.scored_tokens, r.seconds);
  std::fputs(r.kv_text.c_str(), out);
}

Result<KldReport> RunKld(const KldConfig& cfg) {
  CHORUS_ASSIGN_OR_RETURN(const std::string text, ReadFile(cfg.text.text_path));
  KvOptions base_kv = cfg.kv;  // the f16 KV every row is compared with
  base_kv.policy = KvPolicy::Parse("f16").value(), base_kv.window = "f16";
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Engine> base, OpenEngine(cfg.text, base_kv));
  CHORUS_ASSIGN_OR_RETURN(Chunks in, LoadChunks(cfg.text, text, *base));
  const size_t V = base->vocab_size(), n_ctx = in.n_ctx, n_chunks = in.n_chunks;
  struct Run {
    KvOptions kv;
    std::unique_ptr<Engine> engine;
    std::unique_ptr<KvRecord> record;
    double nll = 0;
    size_t top1 = 0;
    std::vector<float> kl = {};
    size_t bytes = 0, peak = 0;
    std::vector<double> chunk_kld = {}, chunk_nll = {};
  };
  std::vector<Run> runs;
  for (const std::string& spec : cfg.specs) {
    KvOptions kv = cfg.kv;  // budget, encoder, query, sink, window
    auto policy = KvPolicy::Parse(spec);
    if (!policy.ok()) return policy.status();
    kv.policy = *policy;
    if (KvPolicy::Allocator* alloc = kv.policy.allocator(); alloc && !cfg.sensitivity.empty()) {
      alloc->sensitivity = cfg.sensitivity;
      if (alloc->rank == KvPolicy::Rank::kExpected) alloc->rank = KvPolicy::Rank::kMeasured;
    }
    if (kv.policy.needs_questions() && kv.query.find_first_not_of(" \t\r\n") == std::string::npos)
      return Status::Error("--configs {} needs --query TEXT (the question its chunks are weighed against)", spec);
    auto engine = OpenEngine(cfg.text, kv, base.get());
    if (!engine.ok()) return engine.status().Context(spec);
    auto record = std::make_unique<KvRecord>(kv, **engine);
    runs.push_back(Run{.kv = kv, .engine = std::move(engine).value(), .record = std::move(record)});
  }

  const size_t first = n_ctx / 2, n_scored = n_ctx - first - 1;  // rows first .. n_ctx-2
  std::vector<float> base_lp(n_scored * V);
  double base_nll = 0;
  KldReport report;
  size_t count = 0;
  Timer timer;
  for (size_t ch = 0; ch < n_chunks; ++ch) {
    const std::vector<int32_t> chunk = in.Chunk(ch);
    auto scored = research::ScoreSequence(*base, chunk, {.on_logits = [&](size_t j, std::span<const float> row) {
      if (j < first || j + 1 >= n_ctx) return;
      const size_t r = j - first;
      const float lse = static_cast<float>(LogSumExp(row.data(), V));
      for (size_t i = 0; i < V; ++i) base_lp[r * V + i] = row[i] - lse;
      base_nll -= base_lp[r * V + chunk[j + 1]];
    }});
    if (!scored.ok()) return scored.status().Context(fmt::format("f16 base, chunk {}", ch + 1));
    report.base_chunk_nll.push_back(0);
    for (size_t r = 0; r < n_scored; ++r) report.base_chunk_nll.back() -= base_lp[r * V + chunk[first + r + 1]];
    count += n_scored;
    for (Run& run : runs) {
      const double nll0 = run.nll;
      const size_t kl0 = run.kl.size();
      CHORUS_RETURN_IF_ERROR(
          ScoreChunk(*run.engine, run.kv, chunk, ch, first, *run.record, [&](size_t r, std::span<const float> row) {
            const size_t j = first + r;
            if (j + 1 >= n_ctx) return;
            const float lse = static_cast<float>(LogSumExp(row.data(), V));
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
          }));
      run.bytes = run.record->has_policy() ? run.record->mean_bytes() : run.record->last_bytes();
      run.peak = std::max(run.peak, run.record->last_bytes());
      double chunk_kl = 0;
      for (size_t i = kl0; i < run.kl.size(); ++i) chunk_kl += run.kl[i];
      run.chunk_kld.push_back(chunk_kl / double(std::max<size_t>(1, n_scored)));
      run.chunk_nll.push_back(run.nll - nll0);
    }
    if (cfg.log)
      std::fprintf(cfg.log, "\r[%zu/%zu] %zu configs, %.0f s elapsed   ", ch + 1, n_chunks, runs.size(),
                   timer.Seconds());
  }
  report.base_ppl = std::exp(base_nll / count);
  report.kv_sink_blocks = cfg.kv.sink_blocks, report.ctx = n_ctx, report.chunks = n_chunks;
  report.scored_tokens = count, report.seconds = timer.Seconds(), report.threads = cfg.text.threads;
  for (Run& run : runs) {
    std::vector<float> sorted = run.kl;
    std::sort(sorted.begin(), sorted.end());
    double mean = 0;
    for (float x : sorted) mean += x;
    mean /= sorted.size();
    KldRow row{.kld_mean = mean,
               .kld_p99 = sorted[std::min(sorted.size() - 1, static_cast<size_t>(0.99 * sorted.size()))],
               .kv_bytes = run.bytes,
               .kv_peak_bytes = run.peak,
               .bits_per_element = BitsPerElement(*run.engine, run.bytes, n_ctx),
               .chunk_kld = run.chunk_kld,
               .chunk_nll = run.chunk_nll};
    row.ppl = std::exp(run.nll / count);
    row.ppl_delta_pct = 100.0 * (row.ppl / report.base_ppl - 1);
    row.top1 = double(run.top1) / count;
    const bool policy = run.record->has_policy();
    if (policy) {
      row.name = row.k = row.v = run.record->Name();
      row.kv_policy = run.record->ReportJson(n_ctx);
      row.kv_text = Captured([&](std::FILE* f) { run.record->PrintReport(f, n_ctx); });
    } else {
      const auto& u = std::get<KvPolicy::Uniform>(run.kv.policy.rule);
      row.k = u.k, row.v = u.v, row.name = u.k + "/" + u.v;
    }
    report.configs.push_back(std::move(row));
  }
  return report;
}

nlohmann::json ToJson(const KldReport& r) {
  nlohmann::json out = {{"kv_sink_blocks", r.kv_sink_blocks},
                        {"ctx", r.ctx},
                        {"chunks", r.chunks},
                        {"scored_tokens", r.scored_tokens},
                        {"base_ppl", r.base_ppl},
                        {"base_kv_bits_per_element", 16.0},
                        {"seconds", r.seconds},
                        {"threads", r.threads},
                        {"base_chunk_nll", r.base_chunk_nll}};
  for (const KldRow& row : r.configs) {
    out["configs"].push_back({{"k", row.k},
                              {"v", row.v},
                              {"ppl", row.ppl},
                              {"ppl_delta_pct", row.ppl_delta_pct},
                              {"kld_mean", row.kld_mean},
                              {"kld_p99", row.kld_p99},
                              {"top1", row.top1},
                              {"kv_bytes", row.kv_bytes},
                              {"kv_peak_bytes", row.kv_peak_bytes},
                              {"bits_per_element", row.bits_per_element},
                              {"chunk_kld", row.chunk_kld},
                              {"chunk_nll", row.chunk_nll}});
    if (!row.kv_policy.is_null()) out["configs"].back()["kv_policy"] = row.kv_policy;
  }
  return Versioned("kld", std::move(out));
}

void PrintText(const KldReport& r, std::FILE* out) {
  std::fprintf(out, "%-20s %10s %9s %11s %11s %8s %10s\n", "K/V", "PPL", "dPPL %", "mean KLD", "p99 KLD", "top-1",
               "bits/elem");
  std::fprintf(out, "%-20s %10.4f %9s %11s %11s %8s %10.2f\n", "f16/f16 (base)", r.base_ppl, "-", "-", "-", "-", 16.0);
  for (const KldRow& row : r.configs) {
    std::fprintf(out, "%-20s %10.4f %+9.3f %11.5f %11.5f %8.4f %10.2f\n", row.name.c_str(), row.ppl, row.ppl_delta_pct,
                 row.kld_mean, row.kld_p99, row.top1, row.bits_per_element);
    std::fputs(row.kv_text.c_str(), out);
  }
}

Result<LogitsReport> RunLogits(const LogitsConfig& cfg) {
  CHORUS_ASSIGN_OR_RETURN(std::string text, ReadFile(cfg.text_path));
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, LoadModel(cfg.model_path, {.f32_weights = cfg.f32_weights}));
  const ModelConfig& c = model->config();
  std::vector<int32_t> tokens = model->tokenizer().Encode(text, /*add_special=*/true, false);  // as llama_logits.py
  if (tokens.size() < cfg.n_tokens)
    return Status::Error("'{}' has only {} tokens, fewer than -n {}", cfg.text_path, tokens.size(), cfg.n_tokens);
  tokens.resize(cfg.n_tokens);
  if (tokens.size() > c.n_ctx_train)
    return Status::Error("-n {} exceeds the model's training context of {}", cfg.n_tokens, c.n_ctx_train);
  ThreadPool pool(cfg.threads);
  ForwardPass fwd(*model, 512);
  CHORUS_ASSIGN_OR_RETURN(KvConfig kv_config,
                          UniformKvConfig(cfg.kv.policy, cfg.kv.sink_blocks, cfg.kv.window, c, "eval logits"));
  KvRuntime kv_rt = MakeKvRuntime(c, kv_config);
  auto kv = kv_rt.store->NewSequence(tokens.size());
  std::vector<float> logits(tokens.size() * c.n_vocab);
  CHORUS_RETURN_IF_ERROR(fwd.Run(tokens, *kv, pool, LogitsFor::kAll, logits.data()));
  std::ofstream out(cfg.out_path, std::ios::binary);
  if (!out) return Status::Error("cannot write '{}'", cfg.out_path);
  out.write(reinterpret_cast<const char*>(logits.data()), logits.size() * sizeof(float));
  if (!out) return Status::Error("writing '{}' failed", cfg.out_path);
  return LogitsReport{.out = cfg.out_path, .tokens = std::move(tokens), .n_vocab = c.n_vocab};
}

nlohmann::json ToJson(const LogitsReport& r) {
  return Versioned("logits",
                   {{"out", r.out}, {"n_tokens", r.tokens.size()}, {"n_vocab", r.n_vocab}, {"tokens", r.tokens}});
}

}  // namespace chorus::eval
