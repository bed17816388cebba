// `chorus eval sensitivity`: the KV's end-to-end sensitivity per (layer, side, width), measured.
// For every layer, side (K, V) and width of the family, the text's chunks are run with only that
// layer's side stored at that width (LayerProbePolicy; everything else f16, the sink block f16) and
// the next-token distributions of each chunk's second half are compared with the f16 KV run: the
// mean KLD is the table's entry. `--comix-rank measured --comix-sensitivity FILE` ranks with it.
#include <fmt/format.h>

#include <sstream>

#include "model/forward.h"
#include "ops/elementwise.h"           // LogSumExp
#include "policy/comix_sensitivity.h"  // ComixSensitivity, LayerProbePolicy, SaveComixSensitivity
#include "policy/uniform_policy.h"     // UniformPolicy (the f16 run)
#include "tools/eval_args.h"
#include "util/timer.h"

namespace chorus::cli {
namespace {

// "2,3,4,8" → {2, 3, 4, 8}; an item that is not a number is an error naming it (the widths
// themselves are checked by ComixSensitivity::Check).
Result<std::vector<int>> ParseTiers(const std::string& list) {
  std::vector<int> bits;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) {
    char* end = nullptr;
    const long b = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != 0) return Status::Error("--comix-tiers '{}': '{}' is not a bit width", list, item);
    bits.push_back(int(b));
  }
  return bits;
}

}  // namespace

int RunSensitivity(const EvalArgs& a) {
  auto bits = ParseTiers(a.tiers);
  if (!bits.ok()) return Fail(bits.status());
  auto in = LoadEvalChunks(a);
  if (!in.ok()) return Fail(in.status());
  const Model& model = *in->model;
  const ModelConfig& c = model.config();
  ComixSensitivity table{
      .family = a.family == "kivi" ? ComixFamily::kKivi : ComixFamily::kTq, .n_layer = c.n_layer, .bits = *bits};
  table.kld.assign(c.n_layer * 2 * table.bits.size(), 0.0);
  if (Status st = table.Check(); !st.ok()) return Fail(st.Context("--comix-tiers"));
  auto kv_config = KvConfigFor(KvPolicy{}, a.kv, c);  // the sink and the window
  if (!kv_config.ok()) return Fail(kv_config.status());
  const size_t V = c.n_vocab, n_ctx = in->n_ctx, n_chunks = in->n_chunks;
  const size_t first = n_ctx / 2, n_scored = n_ctx - first - 1;  // rows first .. n_ctx-2, as eval kld
  std::vector<size_t> rows(n_scored);
  for (size_t r = 0; r < n_scored; ++r) rows[r] = first + r;
  ThreadPool pool(a.threads);
  ForwardPass fwd(model, n_ctx);  // one micro-batch per chunk; logits of the scored rows only
  KvStoreOptions so = fwd.StoreOptions();
  so.window = kv_config->window;
  std::vector<std::vector<int32_t>> chunks(n_chunks);
  for (size_t ch = 0; ch < n_chunks; ++ch) chunks[ch] = in->Chunk(ch);
  std::vector<float> base_lp(n_chunks * n_scored * V), logits(n_scored * V);
  // Runs every chunk under `policy`; base: stores log-probs, else returns the mean KLD against them.
  auto run_all = [&](PrecisionPolicy& policy, bool base) -> Result<double> {
    KvStore store(so, &policy);
    double kl_sum = 0;
    for (size_t ch = 0; ch < n_chunks; ++ch) {
      auto kv = store.NewSequence(n_ctx);
      CHORUS_RETURN_IF_ERROR(fwd.RunRows(chunks[ch], *kv, pool, rows, logits.data()));
      for (size_t r = 0; r < n_scored; ++r) {
        const float* row = logits.data() + r * V;
        const float lse = float(LogSumExp(row, V));
        float* b = base_lp.data() + (ch * n_scored + r) * V;
        if (base) {
          for (size_t i = 0; i < V; ++i) b[i] = row[i] - lse;
        } else {
          kl_sum += KlFromLogProbs(b, row, lse, V);
        }
      }
    }
    return kl_sum / double(n_chunks * n_scored);
  };
  Timer timer;
  UniformPolicy f16(KvFormat::kF16, KvFormat::kF16);
  if (auto r = run_all(f16, true); !r.ok()) return Fail(r.status());
  const size_t total = table.kld.size();
  size_t done = 0;
  for (size_t l = 0; l < c.n_layer; ++l)
    for (KvSide side : {KvSide::kKey, KvSide::kValue})
      for (size_t w = 0; w < table.bits.size(); ++w) {
        LayerProbePolicy probe(l, side, ComixFormat(table.family, table.bits[w]), a.kv.sink_blocks);
        auto kl = run_all(probe, false);
        if (!kl.ok()) return Fail(kl.status().Context(fmt::format("layer {}", l)));
        table.kld[table.Index(l, side, w)] = *kl;
        ++done;
        const double el = timer.Seconds();
        std::fprintf(stderr, "\r[%zu/%zu] layer %zu %s %d bits: KLD %.5f  %.0f s, ~%.0f s left   ", done, total, l,
                     side == KvSide::kKey ? "K" : "V", table.bits[w], *kl, el, el / done * double(total - done));
      }
  std::fprintf(stderr, "\n");
  table.source = fmt::format("{} ({} chunks x {} tokens, second halves scored; {}{})", a.file, n_chunks, n_ctx, a.model,
                             a.f32_weights ? ", f32 weights" : "");
  if (Status st = SaveComixSensitivity(table, a.out,
                                       {{"kv_sink_blocks", double(a.kv.sink_blocks)},
                                        {"scored_tokens", double(n_chunks * n_scored)},
                                        {"seconds", timer.Seconds()},
                                        {"threads", double(a.threads)},
                                        {"f32_weights", a.f32_weights ? 1.0 : 0.0}});
      !st.ok())
    return Fail(st);
  std::printf("%-6s", "layer");
  for (const char* s : {"K", "V"})
    for (int b : table.bits) std::printf(" %9s", fmt::format("{}{}", s, b).c_str());
  std::printf("\n");
  for (size_t l = 0; l < c.n_layer; ++l) {
    std::printf("%-6zu", l);
    for (KvSide side : {KvSide::kKey, KvSide::kValue})
      for (size_t w = 0; w < table.bits.size(); ++w) std::printf(" %9.5f", table.kld[table.Index(l, side, w)]);
    std::printf("\n");
  }
  std::printf("wrote %s (%.0f s)\n", a.out.c_str(), timer.Seconds());
  return 0;
}

}  // namespace chorus::cli
