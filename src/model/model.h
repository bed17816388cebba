// Model: an opened GGUF file (mmap), its validated config, weight views into the mapping, and the
// tokenizer. Invariant: weights are copied only to be repacked — Q4_0 / Q4_1 / Q8_0 matrices the matmul
// path reads in 16-row panels (MatMulReadsPacked, ops/repack.h) get a packed copy at load
// (WeightView::packed; `data` stays a view into the mapping, its pages released) — or, on request only
// (ModelLoadOptions::f32_weights, a reference for measurements), dequantized.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/model_config.h"  // ModelConfig
#include "model/tokenizer.h"     // Tokenizer
#include "ops/matmul.h"          // WeightView
#include "util/aligned_buffer.h"  // AlignedBuffer
#include "util/status.h"         // Result

namespace chorus {

class GgufFile;

// Optional tensors are null when the file has none (biases) or the config does not use them.
struct LayerWeights {
  const float* attn_norm = nullptr;       // (n_embd)
  WeightView wq;                          // (q_dim, n_embd)
  WeightView wk;                          // (kv_dim, n_embd)
  WeightView wv;                          // (kv_dim, n_embd)
  WeightView wo;                          // (n_embd, q_dim)
  const float* bq = nullptr;              // (q_dim) optional bias (qwen2; llama when present)
  const float* bk = nullptr;              // (kv_dim)
  const float* bv = nullptr;              // (kv_dim)
  const float* bo = nullptr;              // (n_embd)
  const float* attn_q_norm = nullptr;     // (head_dim) ModelConfig::qk_norm
  const float* attn_k_norm = nullptr;     // (head_dim)
  const float* attn_post_norm = nullptr;  // (n_embd) ModelConfig::post_norms
  const float* ffn_norm = nullptr;        // (n_embd)
  WeightView w_gate;                      // (n_ff, n_embd)
  WeightView w_up;                        // (n_ff, n_embd)
  WeightView w_down;                      // (n_embd, n_ff)
  const float* ffn_post_norm = nullptr;   // (n_embd) ModelConfig::post_norms
};

struct ModelWeights {
  WeightView token_embd;     // (n_vocab, n_embd)
  const float* output_norm;  // (n_embd)
  WeightView output;         // (n_vocab, n_embd); token_embd when tied
  bool tied_output = false;
  const float* rope_freqs = nullptr;  // (rope_dim/2) optional RoPE frequency factors (Llama 3.1+)
  std::vector<LayerWeights> layers;   // (n_layer)
};

struct ModelLoadOptions {
  // Every quantized matrix dequantized to an f32 copy at load (no repacking): products then take their
  // activations in f32 instead of rounding them to int8 per 32 columns. Any change upstream (a KV
  // format, a thread count) re-draws that rounding everywhere downstream, a KLD of ~0.003 on SmolLM2
  // whatever the change's size; with f32 weights a change costs only its own error. A reference for
  // measurements (eval --f32-weights): ~4 bytes per weight and several times slower.
  bool f32_weights = false;
};

class Model {
 public:
  static Result<std::unique_ptr<Model>> Load(const std::string& path, const ModelLoadOptions& options = {});
  ~Model();

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const GgufFile& gguf() const { return *file_; }
  // tokenizer.chat_template, if the file has one; else for gemma3 the family name "gemma".
  std::optional<std::string_view> chat_template() const;
  // Bytes of all weight tensors in the file (mapped, not copied).
  size_t weight_bytes() const;

 private:
  Model() = default;
  // The Q4_0 / Q4_1 / Q8_0 matrices MatMul reads packed; CHORUS_REPACK=0 turns it off (1: on, the default;
  // another value is an error naming it).
  Status Repack();
  // ModelLoadOptions::f32_weights: every quantized matrix (embeddings excepted) becomes an F32 view of a copy.
  void DequantizeMatrices();
  // The matrices products read (every layer's seven and the output; not token_embd, a lookup).
  void ForEachMatrix(const std::function<void(WeightView&)>& fn);
  std::unique_ptr<GgufFile> file_;
  ModelConfig config_;
  ModelWeights weights_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<AlignedBuffer<uint8_t>> packed_;  // the repacked copies (WeightView::packed)
  std::vector<AlignedBuffer<float>> f32_;       // the dequantized copies (ModelLoadOptions::f32_weights)
};

}  // namespace chorus
