// Model loading: open the GGUF, read the config, bind and shape-check every tensor, build the tokenizer.
#include "model/model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <set>
#include <string_view>

#include "gguf/gguf.h"              // GgufFile, GgufTensor
#include "model/tokenizer_gguf.h"   // TokenizerDataFromGguf
#include "ops/dequant.h"            // DequantizeRow
#include "ops/repack.h"             // RepackPanels

namespace chorus {
namespace {

std::string DimsString(const std::vector<uint64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

class Binder {
 public:
  explicit Binder(const GgufFile& f) : f_(f) {}

  Result<WeightView> Matrix(const std::string& name, size_t rows, size_t cols) {
    const GgufTensor* t = f_.FindTensor(name);
    if (!t) return Status::Error("missing tensor '{}'", name);
    bound_.insert(name);
    if (t->dims.size() != 2 || t->dims[0] != cols || t->dims[1] != rows)
      return Status::Error("tensor '{}' has shape {}, expected [{}, {}]", name, DimsString(t->dims), cols, rows);
    const auto* traits = GgmlTraitsPtr(t->type);
    if (!traits || !traits->supported)
      return Status::Error("tensor '{}' has type {} which chorus cannot compute with", name,
                           traits ? traits->name : "unknown");
    auto row_bytes = GgmlRowBytes(t->type, cols);
    if (!row_bytes) return Status::Error("tensor '{}': row of {} is not whole blocks", name, cols);
    return WeightView{.type = t->type, .data = t->data, .rows = rows, .cols = cols, .row_bytes = *row_bytes};
  }

  Result<const float*> Vector(const std::string& name, size_t n) {
    const GgufTensor* t = f_.FindTensor(name);
    if (!t) return Status::Error("missing tensor '{}'", name);
    bound_.insert(name);
    if (t->type != GgmlType::kF32) return Status::Error("tensor '{}' must be F32 (norm weights, biases)", name);
    if (t->dims.size() != 1 || t->n_elements != n)
      return Status::Error("tensor '{}' has shape {}, expected [{}]", name, DimsString(t->dims), n);
    if (reinterpret_cast<uintptr_t>(t->data) % alignof(float) != 0)
      return Status::Error("tensor '{}' is not 4-byte aligned in the file", name);
    return reinterpret_cast<const float*>(t->data);
  }

  // A vector the file may lack: null then.
  Result<const float*> OptionalVector(const std::string& name, size_t n) {
    if (!f_.FindTensor(name)) return static_cast<const float*>(nullptr);
    return Vector(name, n);
  }

  // Every tensor of the file must have been bound: one chorus does not know is a feature it
  // would otherwise ignore (an FFN bias, a fused QKV, experts ...).
  Status CheckAllBound(const std::string& arch) const {
    for (const GgufTensor& t : f_.tensors())
      if (!bound_.count(t.name))
        return Status::Error("unexpected tensor '{}' (shape {}): chorus does not implement it for architecture '{}'",
                             t.name, DimsString(t.dims), arch);
    return Status::Ok();
  }

 private:
  const GgufFile& f_;
  std::set<std::string, std::less<>> bound_;
};

Result<ModelWeights> BindWeights(const GgufFile& f, ModelConfig& c) {
  Binder b(f);
  ModelWeights w;
  const GgufTensor* embd = f.FindTensor("token_embd.weight");
  if (!embd || embd->dims.size() != 2 || embd->dims[0] != c.n_embd)
    return Status::Error("missing or mis-shaped tensor 'token_embd.weight' (need [{}, n_vocab])", c.n_embd);
  c.n_vocab = embd->dims[1];
  CHORUS_ASSIGN_OR_RETURN(w.token_embd, b.Matrix("token_embd.weight", c.n_vocab, c.n_embd));
  CHORUS_ASSIGN_OR_RETURN(w.output_norm, b.Vector("output_norm.weight", c.n_embd));
  if (f.FindTensor("output.weight")) {
    CHORUS_ASSIGN_OR_RETURN(w.output, b.Matrix("output.weight", c.n_vocab, c.n_embd));
  } else {
    w.output = w.token_embd;
    w.tied_output = true;
  }
  CHORUS_ASSIGN_OR_RETURN(w.rope_freqs, b.OptionalVector("rope_freqs.weight", c.rope_dim / 2));
  if (w.rope_freqs && c.arch != "llama" && c.arch != "mistral")
    return Status::Error("RoPE frequency factors (rope_freqs.weight) on architecture '{}' are not implemented", c.arch);
  for (size_t l = 0; l < c.n_layer; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    LayerWeights L;
    CHORUS_ASSIGN_OR_RETURN(L.attn_norm, b.Vector(p + "attn_norm.weight", c.n_embd));
    CHORUS_ASSIGN_OR_RETURN(L.wq, b.Matrix(p + "attn_q.weight", c.q_dim(), c.n_embd));
    CHORUS_ASSIGN_OR_RETURN(L.wk, b.Matrix(p + "attn_k.weight", c.kv_dim(), c.n_embd));
    CHORUS_ASSIGN_OR_RETURN(L.wv, b.Matrix(p + "attn_v.weight", c.kv_dim(), c.n_embd));
    CHORUS_ASSIGN_OR_RETURN(L.wo, b.Matrix(p + "attn_output.weight", c.n_embd, c.q_dim()));
    CHORUS_ASSIGN_OR_RETURN(L.bq, b.OptionalVector(p + "attn_q.bias", c.q_dim()));
    CHORUS_ASSIGN_OR_RETURN(L.bk, b.OptionalVector(p + "attn_k.bias", c.kv_dim()));
    CHORUS_ASSIGN_OR_RETURN(L.bv, b.OptionalVector(p + "attn_v.bias", c.kv_dim()));
    CHORUS_ASSIGN_OR_RETURN(L.bo, b.OptionalVector(p + "attn_output.bias", c.n_embd));
    if (c.qk_norm) {
      CHORUS_ASSIGN_OR_RETURN(L.attn_q_norm, b.Vector(p + "attn_q_norm.weight", c.head_dim));
      CHORUS_ASSIGN_OR_RETURN(L.attn_k_norm, b.Vector(p + "attn_k_norm.weight", c.head_dim));
    }
    if (c.post_norms) {
      CHORUS_ASSIGN_OR_RETURN(L.attn_post_norm, b.Vector(p + "post_attention_norm.weight", c.n_embd));
      CHORUS_ASSIGN_OR_RETURN(L.ffn_post_norm, b.Vector(p + "post_ffw_norm.weight", c.n_embd));
    }
    CHORUS_ASSIGN_OR_RETURN(L.ffn_norm, b.Vector(p + "ffn_norm.weight", c.n_embd));
    CHORUS_ASSIGN_OR_RETURN(L.w_gate, b.Matrix(p + "ffn_gate.weight", c.n_ff, c.n_embd));
    CHORUS_ASSIGN_OR_RETURN(L.w_up, b.Matrix(p + "ffn_up.weight", c.n_ff, c.n_embd));
    CHORUS_ASSIGN_OR_RETURN(L.w_down, b.Matrix(p + "ffn_down.weight", c.n_embd, c.n_ff));
    w.layers.push_back(L);
  }
  CHORUS_RETURN_IF_ERROR(b.CheckAllBound(c.arch));
  return w;
}

}  // namespace

Model::~Model() = default;

Result<std::unique_ptr<Model>> Model::Load(const std::string& path, const ModelLoadOptions& options) {
  auto file = GgufFile::Open(path);
  if (!file.ok()) return file.status().Context(fmt::format("cannot load model '{}'", path));
  std::unique_ptr<Model> m(new Model());
  m->file_ = std::move(file).value();
  auto config = ReadModelConfig(*m->file_);
  if (!config.ok()) return config.status().Context(fmt::format("model '{}'", path));
  m->config_ = std::move(config).value();
  auto weights = BindWeights(*m->file_, m->config_);
  if (!weights.ok()) return weights.status().Context(fmt::format("model '{}'", path));
  m->weights_ = std::move(weights).value();
  if (options.f32_weights) {
    m->DequantizeMatrices();
  } else if (Status st = m->Repack(); !st.ok()) {
    return st.Context(fmt::format("model '{}'", path));
  }
  auto tok_data = TokenizerDataFromGguf(*m->file_);
  if (!tok_data.ok()) return tok_data.status().Context(fmt::format("tokenizer of '{}'", path));
  auto tok = Tokenizer::Create(tok_data.value());
  if (!tok.ok()) return tok.status().Context(fmt::format("tokenizer of '{}'", path));
  m->tokenizer_ = std::make_unique<Tokenizer>(std::move(tok).value());
  if (m->tokenizer_->n_vocab() != m->config_.n_vocab)
    return Status::Error("model '{}': tokenizer has {} tokens but token_embd has {} rows", path,
                         m->tokenizer_->n_vocab(), m->config_.n_vocab);
  return m;
}

std::optional<std::string_view> Model::chat_template() const {
  if (auto t = file_->GetString("tokenizer.chat_template")) return t;
  // Gemma's turn markers are in every Gemma 3 vocabulary, base models included (the 270M base
  // GGUF has no template): the family name, rendered as llama.cpp's LLM_CHAT_TEMPLATE_GEMMA.
  if (config_.arch == "gemma3" && tokenizer_ && tokenizer_->Find("<start_of_turn>")) return "gemma";
  return std::nullopt;
}

// The mapped rows of a repacked matrix are released (read again from the file only by what reads
// `data`: MatMulRef, a later --cpu-target cap, and — for a tied output — the embedding rows a token
// looks up, a page at a time). The copy is scalar byte moves, cheap beside the load (measured:
// docs/results/design-measurements.md, Model::Repack).
Status Model::Repack() {
  const char* env = std::getenv("CHORUS_REPACK");
  const std::string_view v = env ? env : "1";
  if (v == "0") return Status::Ok();
  if (v != "1") return Status::Error("CHORUS_REPACK must be 0 (weights read from the file) or 1 (repacked at load, the default), not '{}'", v);
  auto one = [&](WeightView& w) {
    if (w.rows == 0 || !IsRepackableType(w.type) || !MatMulReadsPacked(w.type)) return;
    AlignedBuffer<uint8_t>& buf = packed_.emplace_back(RepackedBytes(w));
    // 256 panels (4,096 rows) at a time, each range's mapped rows released after it: the file's copy
    // and the packed one of a large matrix (Gemma 3's 160 MiB output) are never resident together.
    constexpr size_t kChunk = 256;
    for (size_t p0 = 0; p0 * kPackedRows < w.rows; p0 += kChunk) {
      RepackPanels(w, buf.data(), p0, p0 + kChunk);
      const size_t r0 = p0 * kPackedRows, r1 = std::min(w.rows, (p0 + kChunk) * kPackedRows);
      file_->ReleasePages(w.data + r0 * w.row_bytes, (r1 - r0) * w.row_bytes);
    }
    w.packed = buf.data();
  };
  ForEachMatrix(one);
  return Status::Ok();
}

void Model::DequantizeMatrices() {
  auto one = [&](WeightView& w) {
    if (w.rows == 0 || w.type == GgmlType::kF32) return;
    AlignedBuffer<float>& buf = f32_.emplace_back(w.rows * w.cols);
    for (size_t r = 0; r < w.rows; ++r) DequantizeRow(w.type, w.data + r * w.row_bytes, buf.data() + r * w.cols, w.cols);
    w = WeightView{.type = GgmlType::kF32,
                   .data = reinterpret_cast<const uint8_t*>(buf.data()),
                   .rows = w.rows,
                   .cols = w.cols,
                   .row_bytes = w.cols * sizeof(float)};
  };
  ForEachMatrix(one);  // a tied output gets its own copy; token_embd (the lookup) stays as it is
}

void Model::ForEachMatrix(const std::function<void(WeightView&)>& fn) {
  for (LayerWeights& L : weights_.layers)
    for (WeightView* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) fn(*w);
  fn(weights_.output);
}

size_t Model::weight_bytes() const {
  size_t total = 0;
  for (const auto& t : file_->tensors()) total += t.n_bytes;
  return total;
}

}  // namespace chorus
