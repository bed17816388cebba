// ModelConfig: the hyper-parameters of a llama-family model, read and validated from GGUF metadata.
#pragma once
#include <cstddef>
#include <string>

#include "util/status.h"  // Result

namespace chorus {

class GgufFile;

struct ModelConfig {
  std::string arch;        // general.architecture ("llama" or "mistral")
  std::string name;        // general.name, may be empty
  size_t n_layer = 0;      // {arch}.block_count
  size_t n_embd = 0;       // {arch}.embedding_length
  size_t n_ff = 0;         // {arch}.feed_forward_length
  size_t n_head = 0;       // {arch}.attention.head_count
  size_t n_head_kv = 0;    // {arch}.attention.head_count_kv (defaults to n_head)
  size_t head_dim = 0;     // n_embd / n_head (or {arch}.attention.key_length)
  size_t rope_dim = 0;     // {arch}.rope.dimension_count (defaults to head_dim)
  size_t n_ctx_train = 0;  // {arch}.context_length
  size_t n_vocab = 0;      // rows of token_embd
  float rope_base = 10000.0f;  // {arch}.rope.freq_base
  float rms_eps = 1e-5f;       // {arch}.attention.layer_norm_rms_epsilon

  size_t q_dim() const { return n_head * head_dim; }
  size_t kv_dim() const { return n_head_kv * head_dim; }
};

// Reads and checks the config; an unsupported architecture or inconsistent shape is an error
// naming the key and the value.
Result<ModelConfig> ReadModelConfig(const GgufFile& file);

}  // namespace chorus
