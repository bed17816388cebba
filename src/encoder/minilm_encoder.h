// The BERT sentence encoder of sentence-transformers' all-MiniLM-L6-v2 (and any BertModel with the
// same module stack): token ids → embeddings (word + position + token type 0) → LayerNorm → N post-LN
// layers (self-attention, erf-GELU FFN) → mean over all tokens → L2 normalization. f32 throughout;
// linear layers run on PackedGemm (f32 weights packed in memory; F16/BF16 files are converted on load).
// Invariants: the config is validated on open (BertModel, absolute positions, gelu, mean pooling);
// Embed returns dim() floats of unit L2 norm; texts longer than max_seq_length are truncated.
// One caller at a time per encoder (it owns a thread pool and scratch); open one per thread otherwise.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "encoder/bert_tokenizer.h"
#include "encoder/text_encoder.h"

namespace chorus {

struct BertConfig {
  size_t vocab = 0, hidden = 0, heads = 0, layers = 0, intermediate = 0, max_positions = 0, type_vocab = 0;
  float ln_eps = 1e-12f;
  size_t max_seq_len = 0;  // sentence_bert_config.json max_seq_length (≤ max_positions)
};

// Opens a sentence-transformers directory: config.json, tokenizer.json, model.safetensors,
// sentence_bert_config.json, 1_Pooling/config.json. n_threads ≥ 1 threads run the matmuls.
Result<std::unique_ptr<TextEncoder>> OpenMiniLmEncoder(const std::string& dir, int n_threads = 1);

// The concrete type, for tests and tools that want token ids or the config.
class BertEncoder : public TextEncoder {
 public:
  static Result<std::unique_ptr<BertEncoder>> Open(const std::string& dir, int n_threads = 1);
  ~BertEncoder() override;

  std::string name() const override { return name_; }
  size_t dim() const override { return cfg_.hidden; }
  Result<std::vector<float>> Embed(std::string_view text) override;
  // Forwards over many texts' tokens together (up to 2048 tokens each; attention stays within a text).
  Result<std::vector<std::vector<float>>> EmbedMany(const std::vector<std::string>& texts) override;

  std::vector<int32_t> Tokenize(std::string_view text) const { return tok_.Encode(text, cfg_.max_seq_len); }
  // Embeddings of already tokenized sequences (each non-empty, ids < vocab, length ≤ max_seq_len).
  Result<std::vector<std::vector<float>>> EmbedIds(const std::vector<std::vector<int32_t>>& seqs);
  const BertConfig& config() const { return cfg_; }
  const BertTokenizer& tokenizer() const { return tok_; }

  struct Weights;  // bert_weights.h (public so the loader's helpers can fill it)

 private:
  BertEncoder() = default;

  std::string name_;
  BertConfig cfg_;
  BertTokenizer tok_;
  std::unique_ptr<Weights> w_;
};

}  // namespace chorus
