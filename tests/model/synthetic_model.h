// Random-weight GGUFs of the llama family's shapes (llama 3.x, qwen2, mistral, gemma3-like), written
// deterministically (splitmix64, no std:: distributions) so a golden made once by llama.cpp on the
// same file stays valid: tests/e2e/llama_shapes_test.cc, tests/model/model_config_test.cc and the
// writer tool behind scripts/ref/llama_shapes_goldens.py all build their files here.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "gguf/gguf_writer.h"  // GgufWriter
#include "util/fp16.h"         // F32ToF16

namespace chorus::testing {

struct SyntheticSpec {
  std::string name;           // file stem
  std::string arch = "llama";
  size_t n_layer = 2, n_embd = 256, n_head = 4, n_head_kv = 2, head_dim = 64, n_ff = 512, n_vocab = 512;
  float rope_base = 10000.0f;
  bool qkv_bias = false;      // attn_q/k/v.bias (qwen2)
  bool tied = false;          // no output.weight
  bool llama3_rope = false;   // rope_freqs.weight from Llama 3.1's scaling (factor 8, 1 / 4, 8192)
  float rope_linear = 0;      // rope.scaling.type linear with this factor (0 = none)
  uint32_t sliding_window = 0;  // gemma3: attention.sliding_window (every 6th layer global)
  GgmlType matrix_type = GgmlType::kQ8_0;
  uint64_t seed = 1;
  std::string omit;       // tests: leave this tensor out
  std::string misshape;   // tests: write this matrix with one row too many
  std::string chat_template;  // tokenizer.chat_template ("" = none)
};

// The 2-layer, 300-token random model the engine, server and eval tests open (written and loaded in
// well under a second).
inline SyntheticSpec TinySpec(std::string name, std::string chat_template = "") {
  return {.name = std::move(name),
          .n_layer = 2,
          .n_embd = 64,
          .n_head = 2,
          .n_head_kv = 1,
          .head_dim = 32,
          .n_ff = 128,
          .n_vocab = 300,
          .chat_template = std::move(chat_template)};
}

class SplitMix {
 public:
  explicit SplitMix(uint64_t seed) : s_(seed) {}
  uint64_t Next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float Uniform() { return static_cast<float>(Next() >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f; }  // [-1, 1)

 private:
  uint64_t s_;
};

inline std::vector<uint8_t> F32Bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// ggml's quantize_row_q8_0_ref: per 32 values d = amax / 127 (fp16), q = round(x / d).
inline std::vector<uint8_t> Q8_0Bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b;
  b.reserve(v.size() / 32 * 34);
  for (size_t i = 0; i < v.size(); i += 32) {
    float amax = 0;
    for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[i + j]));
    const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
    const uint16_t h = F32ToF16(d);
    b.push_back(static_cast<uint8_t>(h & 0xFF));
    b.push_back(static_cast<uint8_t>(h >> 8));
    for (size_t j = 0; j < 32; ++j) b.push_back(static_cast<uint8_t>(static_cast<int8_t>(std::lround(v[i + j] * id))));
  }
  return b;
}

// A (rows, cols) matrix, entries uniform with standard deviation `std`.
inline void AddMatrix(GgufWriter& w, SplitMix& rng, const std::string& name, size_t rows, size_t cols, float std,
                      GgmlType type, const SyntheticSpec* spec = nullptr) {
  if (spec && spec->misshape == name) ++rows;
  std::vector<float> m(rows * cols);
  const float a = std * std::sqrt(3.0f);
  for (auto& x : m) x = rng.Uniform() * a;
  if (spec && spec->omit == name) return;
  w.AddTensor(name, type, {cols, rows}, type == GgmlType::kF32 ? F32Bytes(m) : Q8_0Bytes(m));
}

inline void AddVector(GgufWriter& w, SplitMix& rng, const std::string& name, size_t n, float center, float spread,
                      const SyntheticSpec* spec = nullptr) {
  std::vector<float> v(n);
  for (auto& x : v) x = center + spread * rng.Uniform();
  if (spec && spec->omit == name) return;
  w.AddTensor(name, GgmlType::kF32, {n}, F32Bytes(v));
}

// Llama 3.1's rope_freqs (convert_hf_to_gguf's llama3 factors) for rope_dim / 2 frequencies.
inline std::vector<float> Llama3RopeFreqs(size_t rope_dim, float base) {
  const double factor = 8, low = 1, high = 4, orig = 8192;
  const double low_wl = orig / low, high_wl = orig / high;
  std::vector<float> f;
  for (size_t i = 0; i < rope_dim; i += 2) {
    const double freq = 1.0 / std::pow(base, static_cast<double>(i) / rope_dim);
    const double wl = 2 * M_PI / freq;
    if (wl < high_wl) f.push_back(1.0f);
    else if (wl > low_wl) f.push_back(static_cast<float>(factor));
    else {
      const double smooth = (orig / wl - low) / (high - low);
      f.push_back(static_cast<float>(1.0 / ((1 - smooth) / factor + smooth)));
    }
  }
  return f;
}

// The GGUF of `s`: metadata llama.cpp needs to load it (and a small SentencePiece vocab: <unk>,
// <s>, </s>, the 256 byte tokens, then ▁t<i> fillers), weights scaled so activations stay O(1).
inline GgufWriter SyntheticModel(const SyntheticSpec& s) {
  GgufWriter w;
  const std::string a = s.arch + ".";
  w.SetString("general.architecture", s.arch);
  w.SetString("general.name", "synthetic " + s.name);
  w.SetScalar<uint32_t>(a + "context_length", 4096);
  w.SetScalar<uint32_t>(a + "embedding_length", static_cast<uint32_t>(s.n_embd));
  w.SetScalar<uint32_t>(a + "block_count", static_cast<uint32_t>(s.n_layer));
  w.SetScalar<uint32_t>(a + "feed_forward_length", static_cast<uint32_t>(s.n_ff));
  w.SetScalar<uint32_t>(a + "attention.head_count", static_cast<uint32_t>(s.n_head));
  w.SetScalar<uint32_t>(a + "attention.head_count_kv", static_cast<uint32_t>(s.n_head_kv));
  w.SetScalar<uint32_t>(a + "attention.key_length", static_cast<uint32_t>(s.head_dim));
  w.SetScalar<uint32_t>(a + "attention.value_length", static_cast<uint32_t>(s.head_dim));
  w.SetScalar<uint32_t>(a + "rope.dimension_count", static_cast<uint32_t>(s.head_dim));
  w.SetScalar<float>(a + "rope.freq_base", s.rope_base);
  w.SetScalar<float>(a + "attention.layer_norm_rms_epsilon", 1e-6f);
  if (s.rope_linear > 0) {
    w.SetString(a + "rope.scaling.type", "linear");
    w.SetScalar<float>(a + "rope.scaling.factor", s.rope_linear);
  }
  if (s.sliding_window > 0) w.SetScalar<uint32_t>(a + "attention.sliding_window", s.sliding_window);
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    tokens.push_back(buf);
    types.push_back(6);
  }
  while (tokens.size() < s.n_vocab) {
    tokens.push_back("\xe2\x96\x81t" + std::to_string(tokens.size()));
    types.push_back(1);
  }
  std::vector<float> scores(tokens.size());
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = -static_cast<float>(i);
  w.SetString("tokenizer.ggml.model", "llama");
  w.SetStringArray("tokenizer.ggml.tokens", tokens);
  w.Set("tokenizer.ggml.scores", GgufValue::Array(scores));
  w.Set("tokenizer.ggml.token_type", GgufValue::Array(types));
  w.SetScalar<uint32_t>("tokenizer.ggml.bos_token_id", 1);
  w.SetScalar<uint32_t>("tokenizer.ggml.eos_token_id", 2);
  w.SetScalar<uint32_t>("tokenizer.ggml.unknown_token_id", 0);
  if (!s.chat_template.empty()) w.SetString("tokenizer.chat_template", s.chat_template);

  SplitMix rng(s.seed);
  const float in_std = 1.0f / std::sqrt(static_cast<float>(s.n_embd));
  const size_t q_dim = s.n_head * s.head_dim, kv_dim = s.n_head_kv * s.head_dim;
  // Tied: the embeddings are the output matrix too, so they get its scale (logits of std ~4; a
  // larger one makes every distribution one-hot and the comparison blind).
  AddMatrix(w, rng, "token_embd.weight", s.n_vocab, s.n_embd, s.tied ? 4.0f * in_std : 1.0f, s.matrix_type, &s);
  AddVector(w, rng, "output_norm.weight", s.n_embd, 1.0f, 0.2f, &s);
  if (!s.tied) AddMatrix(w, rng, "output.weight", s.n_vocab, s.n_embd, 4.0f * in_std, s.matrix_type, &s);
  if (s.llama3_rope) {
    const auto f = Llama3RopeFreqs(s.head_dim, s.rope_base);
    w.AddTensor("rope_freqs.weight", GgmlType::kF32, {f.size()}, F32Bytes(f));
  }
  for (size_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    AddVector(w, rng, p + "attn_norm.weight", s.n_embd, 1.0f, 0.2f, &s);
    AddMatrix(w, rng, p + "attn_q.weight", q_dim, s.n_embd, 2.0f * in_std, s.matrix_type, &s);
    AddMatrix(w, rng, p + "attn_k.weight", kv_dim, s.n_embd, 2.0f * in_std, s.matrix_type, &s);
    AddMatrix(w, rng, p + "attn_v.weight", kv_dim, s.n_embd, in_std, s.matrix_type, &s);
    AddMatrix(w, rng, p + "attn_output.weight", s.n_embd, q_dim, 1.0f / std::sqrt(static_cast<float>(q_dim)),
              s.matrix_type, &s);
    if (s.qkv_bias) {
      AddVector(w, rng, p + "attn_q.bias", q_dim, 0.0f, 0.5f, &s);
      AddVector(w, rng, p + "attn_k.bias", kv_dim, 0.0f, 0.5f, &s);
      AddVector(w, rng, p + "attn_v.bias", kv_dim, 0.0f, 0.5f, &s);
    }
    if (s.arch == "gemma3") {
      AddVector(w, rng, p + "attn_q_norm.weight", s.head_dim, 1.0f, 0.2f, &s);
      AddVector(w, rng, p + "attn_k_norm.weight", s.head_dim, 1.0f, 0.2f, &s);
      AddVector(w, rng, p + "post_attention_norm.weight", s.n_embd, 1.0f, 0.2f, &s);
      AddVector(w, rng, p + "post_ffw_norm.weight", s.n_embd, 1.0f, 0.2f, &s);
    }
    AddVector(w, rng, p + "ffn_norm.weight", s.n_embd, 1.0f, 0.2f, &s);
    AddMatrix(w, rng, p + "ffn_gate.weight", s.n_ff, s.n_embd, 2.0f * in_std, s.matrix_type, &s);
    AddMatrix(w, rng, p + "ffn_up.weight", s.n_ff, s.n_embd, in_std, s.matrix_type, &s);
    AddMatrix(w, rng, p + "ffn_down.weight", s.n_embd, s.n_ff, 1.0f / std::sqrt(static_cast<float>(s.n_ff)),
              s.matrix_type, &s);
  }
  return w;
}

// The shapes of issue 14 (real attention widths; 2 layers, a narrow FFN and a 512-token vocab
// keep the files small — the FFN width exercises no other code path).
inline std::vector<SyntheticSpec> LlamaFamilyShapes() {
  return {
      {.name = "llama3-hd64-gqa4", .arch = "llama", .n_embd = 2048, .n_head = 32, .n_head_kv = 8, .head_dim = 64,
       .n_ff = 1024, .rope_base = 500000.0f, .llama3_rope = true, .seed = 11},
      {.name = "llama3-hd128-gqa8", .arch = "llama", .n_embd = 2048, .n_head = 16, .n_head_kv = 2, .head_dim = 128,
       .n_ff = 1024, .rope_base = 500000.0f, .llama3_rope = true, .seed = 12},
      {.name = "qwen2.5-bias-tied", .arch = "qwen2", .n_embd = 896, .n_head = 14, .n_head_kv = 2, .head_dim = 64,
       .n_ff = 1024, .rope_base = 1000000.0f, .qkv_bias = true, .tied = true, .seed = 13},
      {.name = "mistral-hd128", .arch = "llama", .n_embd = 4096, .n_head = 32, .n_head_kv = 8, .head_dim = 128,
       .n_ff = 512, .rope_base = 1000000.0f, .seed = 14},
      {.name = "llama-linear-rope", .arch = "llama", .n_embd = 512, .n_head = 8, .n_head_kv = 2, .head_dim = 64,
       .n_ff = 512, .rope_base = 10000.0f, .rope_linear = 4.0f, .seed = 15},
  };
}

// 64-bit FNV-1a of a file's bytes: the golden records it, so a changed generator is noticed.
inline uint64_t Fnv1a(const std::vector<uint8_t>& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint8_t b : bytes) h = (h ^ b) * 0x100000001b3ull;
  return h;
}

}  // namespace chorus::testing
