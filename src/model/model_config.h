// ModelConfig: the hyper-parameters and feature switches of a model chorus runs (llama, mistral,
// qwen2, gemma3), read and validated from GGUF metadata. One forward pass reads the switches;
// what chorus does not implement (MoE, YaRN / LongRoPE, attention soft-capping ...) is refused here.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "util/status.h"  // Result

namespace chorus {

class GgufFile;

// How RoPE pairs the coordinates of a head (llama.cpp's LLAMA_ROPE_TYPE_NORM / _NEOX).
enum class RopeStyle {
  kNormal,  // adjacent pairs (x[2i], x[2i+1]): llama, mistral
  kNeox,    // halves (x[i], x[i + rope_dim/2]): qwen2, gemma3
};

// The FFN's gate activation: out = act(gate) * up.
enum class FfnActivation {
  kSilu,      // SwiGLU: llama, mistral, qwen2
  kGeluTanh,  // GeGLU with the tanh approximation of GELU: gemma3
};

struct ModelConfig {
  std::string arch;        // general.architecture ("llama", "mistral", "qwen2", "gemma3")
  std::string name;        // general.name, may be empty
  size_t n_layer = 0;      // {arch}.block_count
  size_t n_embd = 0;       // {arch}.embedding_length
  size_t n_ff = 0;         // {arch}.feed_forward_length
  size_t n_head = 0;       // {arch}.attention.head_count
  size_t n_head_kv = 0;    // {arch}.attention.head_count_kv (defaults to n_head)
  size_t head_dim = 0;     // n_embd / n_head (or {arch}.attention.key_length; value_length must equal it)
  size_t rope_dim = 0;     // {arch}.rope.dimension_count (defaults to head_dim)
  size_t n_ctx_train = 0;  // {arch}.context_length
  size_t n_vocab = 0;      // rows of token_embd
  float rope_base = 10000.0f;  // {arch}.rope.freq_base (global layers)
  float rms_eps = 1e-5f;       // {arch}.attention.layer_norm_rms_epsilon

  // Feature switches (defaults = the llama graph).
  RopeStyle rope_style = RopeStyle::kNormal;
  // {arch}.rope.scaling.type "linear": positions are multiplied by freq_scale = 1/factor on the
  // global layers (llama.cpp's rope_freq_scale_train); 1 = no scaling. Per-frequency factors
  // (Llama 3.1+'s "llama3" scaling) come from the rope_freqs tensor (ModelWeights::rope_freqs).
  float rope_freq_scale = 1.0f;
  float rope_base_local = 10000.0f;  // {arch}.rope.freq_base_swa: sliding-window layers (scale 1)
  FfnActivation ffn_act = FfnActivation::kSilu;
  bool qk_norm = false;      // RMSNorm of each Q and K head (attn_q_norm / attn_k_norm) before RoPE
  bool post_norms = false;   // RMSNorm of the attention and FFN outputs before each residual add
  float embd_scale = 1.0f;   // token embeddings are multiplied by this (gemma: sqrt(n_embd))
  float attn_scale = 0.0f;   // query scale before attention (0 = 1/sqrt(head_dim))
  float final_logit_softcap = 0.0f;  // logits = cap * tanh(logits / cap) when > 0 (gemma)
  // Sliding-window attention: a local layer's token at position p attends keys at positions
  // (p - sliding_window, p] (llama.cpp LLAMA_SWA_TYPE_STANDARD). (n_layer) 0 = global layer.
  std::vector<uint32_t> layer_window;

  size_t q_dim() const { return n_head * head_dim; }
  size_t kv_dim() const { return n_head_kv * head_dim; }
  bool is_local(size_t layer) const { return layer < layer_window.size() && layer_window[layer] > 0; }
  float query_scale() const;
};

// Reads and checks the config; an unsupported architecture, feature or inconsistent shape is an
// error naming the key, the value and what chorus lacks.
Result<ModelConfig> ReadModelConfig(const GgufFile& file);

}  // namespace chorus
