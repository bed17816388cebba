// ReadModelConfig: GGUF metadata -> ModelConfig with validation.
#include "model/model_config.h"

#include "gguf/gguf.h"  // GgufFile

namespace chorus {
namespace {

constexpr size_t kMaxDim = 1 << 20;

Result<size_t> RequireUint(const GgufFile& f, const std::string& key, size_t max_value) {
  auto v = f.GetUint(key);
  if (!v) return Status::Error("missing or non-integer metadata key '{}'", key);
  if (*v == 0 || *v > max_value) return Status::Error("metadata '{}' = {} is out of range [1, {}]", key, *v, max_value);
  return static_cast<size_t>(*v);
}

}  // namespace

Result<ModelConfig> ReadModelConfig(const GgufFile& f) {
  ModelConfig c;
  auto arch = f.GetString("general.architecture");
  if (!arch) return Status::Error("missing metadata key 'general.architecture'");
  c.arch = std::string(*arch);
  if (c.arch != "llama" && c.arch != "mistral")
    return Status::Error("unsupported architecture '{}' (chorus runs the llama family: llama, mistral)", c.arch);
  if (auto n = f.GetString("general.name")) c.name = std::string(*n);
  const std::string a = c.arch + ".";
  CHORUS_ASSIGN_OR_RETURN(c.n_layer, RequireUint(f, a + "block_count", 1024));
  CHORUS_ASSIGN_OR_RETURN(c.n_embd, RequireUint(f, a + "embedding_length", kMaxDim));
  CHORUS_ASSIGN_OR_RETURN(c.n_ff, RequireUint(f, a + "feed_forward_length", kMaxDim));
  CHORUS_ASSIGN_OR_RETURN(c.n_head, RequireUint(f, a + "attention.head_count", 4096));
  c.n_head_kv = c.n_head;
  if (f.Find(a + "attention.head_count_kv")) {
    CHORUS_ASSIGN_OR_RETURN(c.n_head_kv, RequireUint(f, a + "attention.head_count_kv", 4096));
  }
  if (c.n_head % c.n_head_kv != 0)
    return Status::Error("head_count {} is not a multiple of head_count_kv {}", c.n_head, c.n_head_kv);
  c.head_dim = c.n_embd / c.n_head;
  if (f.Find(a + "attention.key_length")) {
    CHORUS_ASSIGN_OR_RETURN(c.head_dim, RequireUint(f, a + "attention.key_length", 1024));
  } else if (c.n_embd % c.n_head != 0) {
    return Status::Error("embedding_length {} is not a multiple of head_count {}", c.n_embd, c.n_head);
  }
  if (c.head_dim % 2 != 0) return Status::Error("head dimension {} must be even for RoPE", c.head_dim);
  c.rope_dim = c.head_dim;
  if (f.Find(a + "rope.dimension_count")) {
    CHORUS_ASSIGN_OR_RETURN(c.rope_dim, RequireUint(f, a + "rope.dimension_count", c.head_dim));
  }
  if (c.rope_dim % 2 != 0) return Status::Error("rope.dimension_count {} must be even", c.rope_dim);
  CHORUS_ASSIGN_OR_RETURN(c.n_ctx_train, RequireUint(f, a + "context_length", 1u << 24));
  if (auto b = f.GetFloat(a + "rope.freq_base")) c.rope_base = static_cast<float>(*b);
  if (auto e = f.GetFloat(a + "attention.layer_norm_rms_epsilon")) c.rms_eps = static_cast<float>(*e);
  if (!(c.rope_base > 0)) return Status::Error("rope.freq_base must be positive, got {}", c.rope_base);
  if (!(c.rms_eps > 0)) return Status::Error("layer_norm_rms_epsilon must be positive, got {}", c.rms_eps);
  return c;
}

}  // namespace chorus
