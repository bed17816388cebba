// `chorus embed`: sentence embeddings with the in-tree BERT encoder (all-MiniLM-L6-v2): per text the
// token count, the dimension, the L2 norm (1 by construction), the cosine with the previous text, and
// the time per text (wall and CPU of the calling thread, one text at a time after one warm-up embed).
#include <chrono>
#include <cmath>
#include <ctime>

#include "chorus/embedder.h"  // Embedder
#include "tools/common.h"

namespace chorus::cli {
namespace {

struct EmbedArgs {
  std::string encoder = "models/all-MiniLM-L6-v2";
  std::vector<std::string> texts;
  int threads = 1;
  bool json = false;
};

double CpuMs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

int RunEmbed(const EmbedArgs& a) {
  auto enc_r = Embedder::Open(a.encoder, a.threads);
  if (!enc_r.ok()) return Fail(enc_r.status());
  Embedder& enc = **enc_r;
  if (auto warm = enc.Embed({"warm-up"}); !warm.ok()) return Fail(warm.status());
  nlohmann::json out = {{"encoder", enc.name()}, {"dim", enc.dim()}, {"threads", a.threads}};
  if (!a.json) std::printf("encoder: %s, dim %zu, %d thread(s)\n", enc.name().c_str(), enc.dim(), a.threads);
  std::vector<float> prev;
  for (size_t i = 0; i < a.texts.size(); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = CpuMs();
    auto batch = enc.Embed({a.texts[i]});
    const double cpu = CpuMs() - c0;
    const double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!batch.ok()) return Fail(batch.status());
    std::vector<float>& e = batch->vectors[0];
    double norm = 0, cos = 0;
    for (size_t d = 0; d < e.size(); ++d) {
      norm += double(e[d]) * e[d];
      if (!prev.empty()) cos += double(e[d]) * prev[d];
    }
    const size_t n_tok = batch->tokens;  // with [CLS]/[SEP], after truncation
    nlohmann::json row = {{"text", a.texts[i]}, {"tokens", n_tok}, {"norm", std::sqrt(norm)}, {"ms", wall},
                          {"cpu_ms", cpu}};
    if (!prev.empty()) row["cos_prev"] = cos;
    out["texts"].push_back(row);
    if (!a.json) {
      std::printf("[%zu] %3zu tokens  norm %.6f  %7.2f ms (%.2f ms CPU)", i, n_tok, std::sqrt(norm), wall, cpu);
      if (!prev.empty()) std::printf("  cos(prev) %+.4f", cos);
      std::printf("  %.60s\n", a.texts[i].c_str());
    }
    prev = std::move(e);
  }
  if (a.json) PrintJson(out);
  return 0;
}

}  // namespace

RunFn AddEmbed(CLI::App& app) {
  auto a = std::make_shared<EmbedArgs>();
  CLI::App* cmd = app.add_subcommand(
      "embed",
      "Embed texts with the sentence encoder (all-MiniLM-L6-v2: BERT, mean pooling, L2 norm).\n"
      "Prints per text: tokens (with [CLS]/[SEP], truncated at 256), the norm (1), the cosine with the\n"
      "previous text (1 = same meaning direction, ~0 = unrelated) and the time per text.\n"
      "Fetch the encoder first: scripts/fetch_encoder.sh\n"
      "Example: chorus embed \"A man is eating food.\" \"A man eats bread.\" \"Stocks fell today.\"");
  cmd->add_option("--encoder", a->encoder, "sentence-transformers directory (config.json, tokenizer.json, "
                                           "model.safetensors, ...)")
      ->capture_default_str();
  cmd->add_option("texts", a->texts, "texts to embed")->required();
  cmd->add_option("-t,--threads", a->threads, "threads for the matmuls")->capture_default_str()->check(CLI::Range(1, 256));
  cmd->add_flag("--json", a->json, "print one JSON object");
  return [a] { return RunEmbed(*a); };
}

}  // namespace chorus::cli
