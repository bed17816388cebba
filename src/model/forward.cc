// ForwardPass: embeddings → L × [RMSNorm, QKV (+bias), (QK-norm), RoPE, causal GQA attention (sliding
// window on local layers), out, (post-norm), RMSNorm, SwiGLU / GeGLU MLP, (post-norm)] → final norm →
// logits (soft-capped). One pass for every architecture: ModelConfig's switches pick the pieces.
// Matmuls read the quantized weights directly (ops/matmul).
#include "model/forward.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/elementwise.h"  // RmsNorm, RopeApply, SwiGlu

namespace chorus {

ForwardPass::ForwardPass(const Model& model, size_t max_batch, size_t max_rows)
    : model_(model), c_(model.config()), max_batch_(max_batch < 1 ? 1 : max_batch),
      max_rows_(std::max(max_rows, max_batch_)) {
  const size_t b = max_rows_;
  x_.Resize(b * c_.n_embd);
  xn_.Resize(b * c_.n_embd);
  q_.Resize(b * c_.q_dim());
  k_.Resize(b * c_.kv_dim());
  v_.Resize(b * c_.kv_dim());
  attn_.Resize(b * c_.q_dim());
  gate_.Resize(b * c_.n_ff);
  up_.Resize(b * c_.n_ff);
  proj_.Resize(b * c_.n_embd);
  rope_.Resize(b * c_.rope_dim);
  for (size_t l = 0; l < c_.n_layer; ++l) has_local_ = has_local_ || c_.is_local(l);
  if (has_local_) rope_local_.Resize(b * c_.rope_dim);
}

static AttentionShape ShapeOf(const ModelConfig& c) {
  return AttentionShape{.n_head = c.n_head, .n_head_kv = c.n_head_kv, .head_dim = c.head_dim};
}

DenseKvCache ForwardPass::MakeCache(size_t capacity) const {
  return DenseKvCache(c_.n_layer, capacity, ShapeOf(c_), c_.layer_window);
}

KvStoreOptions ForwardPass::StoreOptions(size_t budget_bytes) const {
  return KvStoreOptions{.n_layer = c_.n_layer, .shape = ShapeOf(c_), .budget_bytes = budget_bytes,
                        .layer_window = c_.layer_window};
}

Status ForwardPass::CheckInput(std::span<const int32_t> tokens, const SequenceKv& kv) const {
  if (tokens.empty()) return Status::Error("forward pass needs at least one token");
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || static_cast<size_t>(tokens[i]) >= c_.n_vocab)
      return Status::Error("token id {} at index {} is outside the vocabulary [0, {})", tokens[i], i, c_.n_vocab);
  if (kv.size() + tokens.size() > kv.capacity())
    return Status::Error("context overflow: {} cached + {} new tokens exceed the context of {} tokens",
                         kv.Position(0), tokens.size(), kv.Position(0) - kv.size() + kv.capacity());
  return Status::Ok();
}

Status ForwardPass::Run(std::span<const int32_t> tokens, SequenceKv& kv, ThreadPool& pool,
                        LogitsFor which, float* logits) {
  CHORUS_RETURN_IF_ERROR(CheckInput(tokens, kv));
  for (size_t done = 0; done < tokens.size(); done += max_batch_) {
    const size_t n = std::min(max_batch_, tokens.size() - done);
    const bool last_piece = done + n == tokens.size();
    float* out = nullptr;
    rows_.clear();
    if (logits && which == LogitsFor::kAll) {
      out = logits + done * c_.n_vocab;
      for (size_t t = 0; t < n; ++t) rows_.push_back(t);
    } else if (logits && last_piece) {
      out = logits;
      rows_.push_back(n - 1);
    }
    CHORUS_RETURN_IF_ERROR(RunBatch(tokens.subspan(done, n), kv, pool, rows_, out));
  }
  return Status::Ok();
}

Status ForwardPass::RunRows(std::span<const int32_t> tokens, SequenceKv& kv, ThreadPool& pool,
                            std::span<const size_t> logit_rows, float* logits) {
  CHORUS_RETURN_IF_ERROR(CheckInput(tokens, kv));
  if (tokens.size() > max_rows_)
    return Status::Error("a batch of {} rows exceeds the forward pass's {} rows", tokens.size(), max_rows_);
  for (size_t i = 0; i < logit_rows.size(); ++i)
    if (logit_rows[i] >= tokens.size() || (i > 0 && logit_rows[i] <= logit_rows[i - 1]))
      return Status::Error("logit rows must be ascending indices below {}", tokens.size());
  return RunBatch(tokens, kv, pool, logit_rows, logits);
}

Status ForwardPass::MeanHidden(std::span<const int32_t> tokens, SequenceKv& kv, ThreadPool& pool, float* mean) {
  CHORUS_RETURN_IF_ERROR(CheckInput(tokens, kv));
  const size_t d = c_.n_embd;
  std::vector<double> acc(d, 0.0);
  std::vector<float> row(d);
  for (size_t done = 0; done < tokens.size(); done += max_batch_) {
    const size_t n = std::min(max_batch_, tokens.size() - done);
    CHORUS_RETURN_IF_ERROR(RunBatch(tokens.subspan(done, n), kv, pool, {}, nullptr));
    for (size_t t = 0; t < n; ++t) {  // x_ still holds this micro-batch's final residual stream
      RmsNorm(x_.data() + t * d, model_.weights().output_norm, d, c_.rms_eps, row.data());
      for (size_t i = 0; i < d; ++i) acc[i] += row[i];
    }
  }
  for (size_t i = 0; i < d; ++i) mean[i] = static_cast<float>(acc[i] / tokens.size());
  return Status::Ok();
}

Status ForwardPass::RunBatch(std::span<const int32_t> tokens, SequenceKv& kv, ThreadPool& pool,
                             std::span<const size_t> logit_rows, float* logits) {
  const size_t n = tokens.size(), d = c_.n_embd;
  const ModelWeights& w = model_.weights();
  // Global layers: rope.freq_base with the linear scale and rope_freqs; local (sliding-window)
  // layers: rope.freq_base_swa, unscaled (llama.cpp's get_rope_freq_base / _scale).
  const RopeParams global{.base = c_.rope_base, .freq_scale = c_.rope_freq_scale, .freq_factors = w.rope_freqs};
  const RopeParams local{.base = c_.rope_base_local};
  for (size_t t = 0; t < n; ++t) {
    DequantizeRow(w.token_embd.type, w.token_embd.data + tokens[t] * w.token_embd.row_bytes,
                  x_.data() + t * d, d);
    if (c_.embd_scale != 1.0f) Scale(x_.data() + t * d, d, c_.embd_scale);
    const auto pos = static_cast<int64_t>(kv.Position(t));
    RopeTable(pos, c_.rope_dim, global, rope_.data() + t * c_.rope_dim);
    if (has_local_) RopeTable(pos, c_.rope_dim, local, rope_local_.data() + t * c_.rope_dim);
  }
  // In place: rows of n_embd normalized (the post-norms normalize a matmul's output). A thread takes
  // at least ~16K values (a decode step's few rows: on the calling thread, no pool round trip).
  const size_t norm_grain = std::max<size_t>(1, 16384 / d);
  auto norm_rows = [&](const float* weight, const float* src, float* dst) {
    pool.ParallelFor(n, norm_grain, [&](size_t b, size_t e) {
      for (size_t t = b; t < e; ++t) RmsNorm(src + t * d, weight, d, c_.rms_eps, dst + t * d);
    });
  };
  auto add_bias = [&](const float* bias, float* y, size_t cols) {
    if (!bias) return;
    for (size_t t = 0; t < n; ++t) Add(bias, cols, y + t * cols);
  };
  for (size_t l = 0; l < c_.n_layer; ++l) {
    const LayerWeights& L = w.layers[l];
    norm_rows(L.attn_norm, x_.data(), xn_.data());
    // q, k, v (and below gate, up) in one MatMulMany: those of one type share a dispatch (one barrier).
    const WeightView qkv[3] = {L.wq, L.wk, L.wv};
    float* const qkv_out[3] = {q_.data(), k_.data(), v_.data()};
    MatMulMany(qkv, xn_.data(), n, qkv_out, pool);
    add_bias(L.bq, q_.data(), c_.q_dim());
    add_bias(L.bk, k_.data(), c_.kv_dim());
    add_bias(L.bv, v_.data(), c_.kv_dim());
    PrepareQk(l, n, pool);
    // All or nothing: a layer that cannot store its K/V undoes the layers before it.
    if (Status s = kv.AppendAndAttend(l, n, k_.data(), v_.data(), q_.data(), attn_.data(), pool); !s.ok()) {
      kv.Rollback();
      return s;
    }
    MatMul(L.wo, attn_.data(), n, proj_.data(), pool);
    add_bias(L.bo, proj_.data(), d);
    if (L.attn_post_norm) norm_rows(L.attn_post_norm, proj_.data(), proj_.data());
    Add(proj_.data(), n * d, x_.data());
    norm_rows(L.ffn_norm, x_.data(), xn_.data());
    const WeightView gu[2] = {L.w_gate, L.w_up};
    float* const gu_out[2] = {gate_.data(), up_.data()};
    MatMulMany(gu, xn_.data(), n, gu_out, pool);
    const bool gelu = c_.ffn_act == FfnActivation::kGeluTanh;
    pool.ParallelFor(n, 1, [&](size_t b, size_t e) {
      for (size_t t = b; t < e; ++t) {
        float* g = gate_.data() + t * c_.n_ff;
        if (gelu) GeGluTanh(g, up_.data() + t * c_.n_ff, c_.n_ff, g);
        else SwiGlu(g, up_.data() + t * c_.n_ff, c_.n_ff, g);
      }
    });
    MatMul(L.w_down, gate_.data(), n, proj_.data(), pool);
    if (L.ffn_post_norm) norm_rows(L.ffn_post_norm, proj_.data(), proj_.data());
    Add(proj_.data(), n * d, x_.data());
  }
  kv.Commit(n);
  if (!logits || logit_rows.empty()) return Status::Ok();
  for (size_t i = 0; i < logit_rows.size(); ++i)
    RmsNorm(x_.data() + logit_rows[i] * d, w.output_norm, d, c_.rms_eps, xn_.data() + i * d);
  MatMul(w.output, xn_.data(), logit_rows.size(), logits, pool);
  if (c_.final_logit_softcap > 0) SoftCap(logits, logit_rows.size() * c_.n_vocab, c_.final_logit_softcap);
  return Status::Ok();
}

void ForwardPass::PrepareQk(size_t layer, size_t n, ThreadPool& pool) {
  const size_t hd = c_.head_dim, q_dim = c_.q_dim(), kv_dim = c_.kv_dim();
  const float scale = c_.query_scale();
  const LayerWeights& L = model_.weights().layers[layer];
  const float* table = c_.is_local(layer) ? rope_local_.data() : rope_.data();
  const bool neox = c_.rope_style == RopeStyle::kNeox;
  auto rotate = [&](float* head, const float* norm, const float* cs) {
    if (norm) RmsNorm(head, norm, hd, c_.rms_eps, head);
    if (neox) RopeApplyNeox(head, c_.rope_dim, cs);
    else RopeApply(head, c_.rope_dim, cs);
  };
  pool.ParallelFor(n, 1, [&](size_t b, size_t e) {
    for (size_t t = b; t < e; ++t) {
      const float* cs = table + t * c_.rope_dim;
      for (size_t h = 0; h < c_.n_head; ++h) {
        float* qh = q_.data() + t * q_dim + h * hd;
        rotate(qh, L.attn_q_norm, cs);
        Scale(qh, hd, scale);
      }
      for (size_t h = 0; h < c_.n_head_kv; ++h) rotate(k_.data() + t * kv_dim + h * hd, L.attn_k_norm, cs);
    }
  });
}

}  // namespace chorus
