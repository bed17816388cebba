// MeasureSensitivity (sensitivity_eval.h): one f16 run, then one probe run per layer × side × width.
#include "eval/sensitivity_eval.h"

#include <fmt/format.h>

#include "engine/model_fingerprint.h"  // ModelFingerprint
#include "eval/divergence.h"           // KlFromLogProbs
#include "kv/window_codec.h"           // ParseWindowFormat
#include "model/forward.h"             // ForwardPass
#include "model/model.h"
#include "ops/elementwise.h"        // LogSumExp
#include "policy/comix_bound.h"     // ComixFormat
#include "policy/uniform_policy.h"  // UniformPolicy (the f16 run)
#include "util/thread_pool.h"
#include "util/timer.h"

namespace chorus::eval {

Result<SensitivityReport> MeasureSensitivity(const SensitivityConfig& cfg) {
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Load(cfg.model_path, {.f32_weights = cfg.f32_weights}));
  const ModelConfig& c = model->config();
  SensitivityReport rep;
  rep.model_fingerprint = ModelFingerprint(*model);
  ComixSensitivity& table = rep.table;
  table = {.family = cfg.family == KvPolicy::Family::kKivi ? ComixFamily::kKivi : ComixFamily::kTq,
           .n_layer = c.n_layer,
           .bits = cfg.bits};
  table.kld.assign(c.n_layer * 2 * table.bits.size(), 0.0);
  CHORUS_RETURN_IF_ERROR(table.Check().Context("widths"));
  CHORUS_ASSIGN_OR_RETURN(const WindowFormat window, ParseWindowFormat(cfg.window));
  if (cfg.ctx > c.n_ctx_train)
    return Status::Error("chunks of {} tokens: the model's training context is {}", cfg.ctx, c.n_ctx_train);
  // A scored row (second half) reads a sealed, compressed block only past the sink and one block.
  if (cfg.ctx < 32 * (cfg.sink_blocks + 2))
    return Status::Error(
        "chunks of {} tokens are too short: no scored token would read a compressed block (at "
        "least {} with {} sink block(s))",
        cfg.ctx, 32 * (cfg.sink_blocks + 2), cfg.sink_blocks);
  // As llama.cpp's -f: the whole text with add_special; each chunk's first token then becomes BOS.
  const std::vector<int32_t> tokens = model->tokenizer().Encode(cfg.text, /*add_special=*/true, false);
  const size_t n_ctx = cfg.ctx, n_chunks = std::min(cfg.chunks, tokens.size() / n_ctx);
  if (n_chunks == 0)
    return Status::Error("'{}' has {} tokens, fewer than one chunk of {}", cfg.text_name, tokens.size(), n_ctx);
  std::vector<std::vector<int32_t>> chunks(n_chunks);
  for (size_t ch = 0; ch < n_chunks; ++ch) {
    chunks[ch].assign(tokens.begin() + ch * n_ctx, tokens.begin() + (ch + 1) * n_ctx);
    if (model->tokenizer().add_bos() && model->tokenizer().bos()) chunks[ch][0] = *model->tokenizer().bos();
  }
  const size_t V = c.n_vocab;
  const size_t first = n_ctx / 2, n_scored = n_ctx - first - 1;  // rows first .. n_ctx-2, as eval kld
  std::vector<size_t> rows(n_scored);
  for (size_t r = 0; r < n_scored; ++r) rows[r] = first + r;
  ThreadPool pool(cfg.threads);
  ForwardPass fwd(*model, n_ctx);  // one micro-batch per chunk; logits of the scored rows only
  KvStoreOptions so = fwd.StoreOptions();
  so.window = window;
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
  CHORUS_RETURN_IF_ERROR(run_all(f16, true).status());
  const size_t total = table.kld.size();
  size_t done = 0;
  for (size_t l = 0; l < c.n_layer; ++l)
    for (KvSide side : {KvSide::kKey, KvSide::kValue})
      for (size_t w = 0; w < table.bits.size(); ++w) {
        LayerProbePolicy probe(l, side, ComixFormat(table.family, table.bits[w]), cfg.sink_blocks);
        auto kl = run_all(probe, false);
        if (!kl.ok()) return kl.status().Context(fmt::format("layer {}", l));
        table.kld[table.Index(l, side, w)] = *kl;
        if (cfg.progress)
          cfg.progress(
              ++done, total,
              fmt::format("layer {} {} {} bits: KLD {:.5f}", l, side == KvSide::kKey ? "K" : "V", table.bits[w], *kl));
      }
  table.source = fmt::format("{} ({} chunks x {} tokens, second halves scored; {}{})", cfg.text_name, n_chunks, n_ctx,
                             cfg.model_path, cfg.f32_weights ? ", f32 weights" : "");
  rep.scored_tokens = n_chunks * n_scored;
  rep.seconds = timer.Seconds();
  return rep;
}

Status SaveSensitivityReport(const SensitivityReport& r, const SensitivityConfig& cfg, const std::string& path) {
  return SaveComixSensitivity(r.table, path,
                              {{"kv_sink_blocks", double(cfg.sink_blocks)},
                               {"scored_tokens", double(r.scored_tokens)},
                               {"seconds", r.seconds},
                               {"threads", double(cfg.threads)},
                               {"f32_weights", cfg.f32_weights ? 1.0 : 0.0}});
}

Result<std::vector<std::string>> Calibrate(const SensitivityConfig& config,
                                           const std::vector<KvPolicy::Family>& families) {
  std::vector<std::string> paths;
  for (KvPolicy::Family family : families) {
    SensitivityConfig c = config;
    c.family = family;
    CHORUS_ASSIGN_OR_RETURN(const SensitivityReport r, MeasureSensitivity(c));
    const std::string path = CalibrationTablePath(config.model_path, r.model_fingerprint, r.table.family);
    CHORUS_RETURN_IF_ERROR(SaveSensitivityReport(r, c, path));
    paths.push_back(path);
  }
  return paths;
}

}  // namespace chorus::eval
