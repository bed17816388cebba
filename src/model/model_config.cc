// ReadModelConfig: GGUF metadata -> ModelConfig with validation and refusal of what is not implemented.
#include "model/model_config.h"

#include <cmath>

#include "gguf/gguf.h"  // GgufFile

namespace chorus {
namespace {

constexpr size_t kMaxDim = 1 << 20;

Result<size_t> RequireUint(const GgufFile& f, const std::string& key, size_t max_value) {
  const GgufValue* v = f.Find(key);
  if (v && v->is_array())
    return Status::Error("metadata '{}' is a per-layer array: per-layer shapes are not implemented", key);
  auto u = f.GetUint(key);
  if (!u) return Status::Error("missing or non-integer metadata key '{}'", key);
  if (*u == 0 || *u > max_value) return Status::Error("metadata '{}' = {} is out of range [1, {}]", key, *u, max_value);
  return static_cast<size_t>(*u);
}

// A present, non-zero value of a key names a feature chorus does not implement.
Status RefuseIfSet(const GgufFile& f, const std::string& key, const char* feature) {
  const GgufValue* v = f.Find(key);
  if (!v) return Status::Ok();
  auto x = f.GetFloat(key);
  if (x && *x == 0) return Status::Ok();
  return Status::Error("{} is not implemented (metadata '{}' is set)", feature, key);
}

// Architecture-specific switches (llama.cpp: src/models/<arch>.cpp and llama_model_rope_type).
Status ReadArchFeatures(const GgufFile& f, const std::string& a, ModelConfig& c) {
  if (c.arch == "qwen2") c.rope_style = RopeStyle::kNeox;
  if (c.arch != "gemma3") {
    if (f.Find(a + "attention.sliding_window"))
      return Status::Error("sliding-window attention on architecture '{}' is not implemented "
                           "(metadata '{}attention.sliding_window'; chorus has it for gemma3)", c.arch, a);
    return RefuseIfSet(f, a + "final_logit_softcapping", "final logit soft-capping outside gemma3");
  }
  c.rope_style = RopeStyle::kNeox;
  c.ffn_act = FfnActivation::kGeluTanh;
  c.qk_norm = true;
  c.post_norms = true;
  c.embd_scale = std::sqrt(static_cast<float>(c.n_embd));
  // gemma_pytorch's query_pre_attn_scalar: n_embd / n_head for the 27B (62 layers), else head_dim.
  c.attn_scale = c.n_layer == 62 ? 1.0f / std::sqrt(static_cast<float>(c.n_embd / c.n_head))
                                 : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  if (auto cap = f.GetFloat(a + "final_logit_softcapping")) c.final_logit_softcap = static_cast<float>(*cap);
  if (!(c.final_logit_softcap >= 0)) return Status::Error("final_logit_softcapping must be >= 0");
  if (auto b = f.GetFloat(a + "rope.freq_base_swa")) c.rope_base_local = static_cast<float>(*b);
  if (!(c.rope_base_local > 0)) return Status::Error("rope.freq_base_swa must be positive, got {}", c.rope_base_local);
  c.layer_window.assign(c.n_layer, 0);
  const GgufValue* swa = f.Find(a + "attention.sliding_window");
  if (!swa) return Status::Ok();  // llama.cpp: no key = every layer global
  auto window = f.GetUint(a + "attention.sliding_window");
  if (!window || *window > (1u << 24)) return Status::Error("metadata '{}attention.sliding_window' is not a window size", a);
  if (*window == 0) return Status::Ok();
  size_t pattern = 6;  // llama.cpp's gemma3 default: every 6th layer global
  if (const GgufValue* p = f.Find(a + "attention.sliding_window_pattern")) {
    if (p->is_array())
      return Status::Error("a per-layer sliding_window_pattern array is not implemented (metadata '{}')",
                           a + "attention.sliding_window_pattern");
    auto n = f.GetUint(a + "attention.sliding_window_pattern");
    if (!n || *n > c.n_layer + 1) return Status::Error("metadata '{}attention.sliding_window_pattern' is invalid", a);
    pattern = *n;
  }
  for (size_t l = 0; l < c.n_layer; ++l)
    if (pattern == 0 || l % pattern < pattern - 1) c.layer_window[l] = static_cast<uint32_t>(*window);
  return Status::Ok();
}

}  // namespace

float ModelConfig::query_scale() const {
  return attn_scale > 0 ? attn_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

Result<ModelConfig> ReadModelConfig(const GgufFile& f) {
  ModelConfig c;
  auto arch = f.GetString("general.architecture");
  if (!arch) return Status::Error("missing metadata key 'general.architecture'");
  c.arch = std::string(*arch);
  if (c.arch != "llama" && c.arch != "mistral" && c.arch != "qwen2" && c.arch != "gemma3")
    return Status::Error("unsupported architecture '{}' (chorus runs llama, mistral, qwen2 and gemma3)", c.arch);
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
  if (f.Find(a + "attention.value_length")) {
    CHORUS_ASSIGN_OR_RETURN(const size_t v_len, RequireUint(f, a + "attention.value_length", 1024));
    if (v_len != c.head_dim)
      return Status::Error("attention.value_length {} != key_length {}: different K and V head sizes are not implemented",
                           v_len, c.head_dim);
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

  // What chorus does not implement is refused, never run silently wrong (llama.cpp's key names).
  CHORUS_RETURN_IF_ERROR(RefuseIfSet(f, a + "expert_count", "mixture of experts (MoE)"));
  CHORUS_RETURN_IF_ERROR(RefuseIfSet(f, a + "attn_logit_softcapping", "attention logit soft-capping"));
  CHORUS_RETURN_IF_ERROR(RefuseIfSet(f, a + "rope.dimension_sections", "multi-section RoPE (M-RoPE)"));
  if (f.Find(a + "attention.causal") && f.GetBool(a + "attention.causal") != std::optional<bool>(true))
    return Status::Error("non-causal attention is not implemented (metadata '{}attention.causal')", a);
  std::string scaling = "linear";  // llama.cpp's default when the key is missing
  if (f.Find(a + "rope.scaling.type")) {
    auto s = f.GetString(a + "rope.scaling.type");
    if (!s) return Status::Error("metadata '{}rope.scaling.type' is not a string", a);
    scaling = std::string(*s);
  }
  if (scaling != "none" && scaling != "linear")
    return Status::Error("RoPE scaling type '{}' is not implemented (chorus has none, linear and llama3 rope_freqs)",
                         scaling);
  double factor = 0;
  if (auto x = f.GetFloat(a + "rope.scaling.factor")) factor = *x;
  else if (auto y = f.GetFloat(a + "rope.scale_linear")) factor = *y;
  if (factor < 0 || !std::isfinite(factor)) return Status::Error("rope.scaling.factor {} is invalid", factor);
  // llama.cpp applies rope_freq_scale_train = 1/factor for "none" as well as "linear".
  if (factor != 0) c.rope_freq_scale = static_cast<float>(1.0 / factor);
  CHORUS_RETURN_IF_ERROR(ReadArchFeatures(f, a, c));
  return c;
}

}  // namespace chorus
