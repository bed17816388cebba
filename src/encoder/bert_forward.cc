// BertEncoder forward: all sequences' tokens share the linear layers (one PackedGemm per weight per
// layer over the concatenated tokens); attention runs per sequence and head (no padding, no mask).
// Post-LN BERT: x = LN(x + Attn(x)); x = LN(x + W2·gelu(W1·x)); then mean pooling and L2 norm.
#include <algorithm>
#include <cmath>

#include "encoder/bert_attention.h"  // BertAttention
#include "encoder/bert_gelu.h"       // GeluErf
#include "encoder/bert_weights.h"

namespace chorus {
namespace {

void Linear(const BertLinear& l, const float* x, size_t n_tok, float* y, ThreadPool& pool) {
  PackedGemm(l, x, n_tok, y, pool);
}

// x[t] = LN(x[t] + r[t]) (r may be null), in place; mean/variance in double for stability.
void AddLayerNorm(float* x, const float* r, size_t n_tok, size_t n, const BertNorm& ln, float eps) {
  for (size_t t = 0; t < n_tok; ++t) {
    float* row = x + t * n;
    if (r != nullptr) {
      const float* rr = r + t * n;
      for (size_t i = 0; i < n; ++i) row[i] += rr[i];
    }
    double mean = 0, var = 0;
    for (size_t i = 0; i < n; ++i) mean += row[i];
    mean /= n;
    for (size_t i = 0; i < n; ++i) var += (row[i] - mean) * (row[i] - mean);
    var /= n;
    const float m = static_cast<float>(mean), inv = static_cast<float>(1.0 / std::sqrt(var + eps));
    for (size_t i = 0; i < n; ++i) row[i] = (row[i] - m) * inv * ln.g[i] + ln.b[i];
  }
}

}  // namespace

Result<std::vector<std::vector<float>>> BertEncoder::EmbedIds(const std::vector<std::vector<int32_t>>& seqs) {
  const BertConfig& c = cfg_;
  const size_t H = c.hidden, nh = c.heads, hd = H / nh, F = c.intermediate;
  size_t total = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    if (seqs[s].empty()) return Status::Error("encoder: sequence {} is empty", s);
    if (seqs[s].size() > c.max_seq_len)
      return Status::Error("encoder: sequence {} has {} tokens, more than max_seq_length {}", s, seqs[s].size(),
                           c.max_seq_len);
    for (int32_t id : seqs[s])
      if (id < 0 || static_cast<size_t>(id) >= c.vocab)
        return Status::Error("encoder: token id {} outside the vocabulary [0, {})", id, c.vocab);
    total += seqs[s].size();
  }
  std::vector<std::vector<float>> out(seqs.size());
  if (total == 0) return out;
  ThreadPool& pool = *w_->pool;
  Weights& w = *w_;
  for (std::vector<float>* buf : {&w.x, &w.q, &w.k, &w.v, &w.ctx, &w.tmp})
    if (buf->size() < total * H) buf->resize(total * H);
  if (w.ff.size() < total * F) w.ff.resize(total * F);
  std::vector<float>&x = w.x, &q = w.q, &k = w.k, &v = w.v, &ctx = w.ctx, &tmp = w.tmp, &ff = w.ff;

  // Embeddings: word + position (restarting per sequence) + token type 0, then LayerNorm.
  size_t t = 0;
  for (const std::vector<int32_t>& seq : seqs) {
    for (size_t p = 0; p < seq.size(); ++p, ++t) {
      const float* we = w_->word.data() + static_cast<size_t>(seq[p]) * H;
      const float* pe = w_->pos.data() + p * H;
      const float* te = w_->type.data();
      float* row = x.data() + t * H;
      for (size_t i = 0; i < H; ++i) row[i] = we[i] + pe[i] + te[i];
    }
  }
  AddLayerNorm(x.data(), nullptr, total, H, w_->emb_ln, c.ln_eps);

  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (const BertLayer& L : w_->layers) {
    Linear(L.q, x.data(), total, q.data(), pool);
    Linear(L.k, x.data(), total, k.data(), pool);
    Linear(L.v, x.data(), total, v.data(), pool);
    // Self-attention within each sequence; every head reads its hd columns of q/k/v.
    size_t base = 0;
    for (const std::vector<int32_t>& seq : seqs) {
      BertAttention(q.data() + base * H, k.data() + base * H, v.data() + base * H, H, seq.size(), nh, hd, scale,
                    ctx.data() + base * H);
      base += seq.size();
    }
    Linear(L.o, ctx.data(), total, tmp.data(), pool);
    AddLayerNorm(x.data(), tmp.data(), total, H, L.attn_ln, c.ln_eps);
    Linear(L.ff_in, x.data(), total, ff.data(), pool);
    GeluErf(ff.data(), total * F);
    Linear(L.ff_out, ff.data(), total, tmp.data(), pool);
    AddLayerNorm(x.data(), tmp.data(), total, H, L.out_ln, c.ln_eps);
  }

  // Mean pooling over every token (the attention mask is all ones), then L2 normalization.
  size_t base = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const size_t n = seqs[s].size();
    std::vector<double> acc(H, 0.0);
    for (size_t i = 0; i < n; ++i)
      for (size_t d = 0; d < H; ++d) acc[d] += x[(base + i) * H + d];
    double ss = 0;
    for (size_t d = 0; d < H; ++d) {
      acc[d] /= n;
      ss += acc[d] * acc[d];
    }
    const double inv = 1.0 / std::max(std::sqrt(ss), 1e-12);  // torch.nn.functional.normalize's eps
    out[s].resize(H);
    for (size_t d = 0; d < H; ++d) out[s][d] = static_cast<float>(acc[d] * inv);
    base += n;
  }
  return out;
}

Result<std::vector<float>> BertEncoder::Embed(std::string_view text) {
  CHORUS_ASSIGN_OR_RETURN(std::vector<std::vector<float>> e, EmbedIds({Tokenize(text)}));
  return std::move(e[0]);
}

Result<std::vector<std::vector<float>>> BertEncoder::EmbedMany(const std::vector<std::string>& texts) {
  // Forwards of at most kGroupTokens tokens (or one text), so scratch stays bounded (~14 MB).
  constexpr size_t kGroupTokens = 2048;
  std::vector<std::vector<float>> out;
  out.reserve(texts.size());
  std::vector<std::vector<int32_t>> group;
  size_t group_tokens = 0;
  auto flush = [&]() -> Status {
    if (group.empty()) return Status::Ok();
    CHORUS_ASSIGN_OR_RETURN(std::vector<std::vector<float>> e, EmbedIds(group));
    for (std::vector<float>& v : e) out.push_back(std::move(v));
    group.clear();
    group_tokens = 0;
    return Status::Ok();
  };
  for (const std::string& t : texts) {
    std::vector<int32_t> ids = Tokenize(t);
    if (group_tokens + ids.size() > kGroupTokens) CHORUS_RETURN_IF_ERROR(flush());
    group_tokens += ids.size();
    group.push_back(std::move(ids));
  }
  CHORUS_RETURN_IF_ERROR(flush());
  return out;
}

}  // namespace chorus
