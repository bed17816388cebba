// Elementwise and per-row CPU math for the forward pass: RMSNorm, RoPE, softmax, SwiGLU, dot/axpy.
// Each fast function has a scalar *Ref twin that tests compare against.
#pragma once
#include <cstddef>
#include <cstdint>

namespace chorus {

// out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i];  x, w, out: (n)
void RmsNorm(const float* x, const float* w, size_t n, float eps, float* out);
void RmsNormRef(const float* x, const float* w, size_t n, float eps, float* out);

// Rotary tables for one position: cos_sin: (rope_dim/2, 2) = {cos θ_i, sin θ_i}, θ_i = pos·base^(-2i/rope_dim).
void RopeTable(int64_t pos, size_t rope_dim, float base, float* cos_sin);
// The frequencies of a RoPE with scaling (llama.cpp's ggml_rope_ext without YaRN):
// θ_i = freq_scale · pos · base^(-2i/rope_dim) / freq_factors[i].
struct RopeParams {
  float base = 10000.0f;
  float freq_scale = 1.0f;               // linear position scaling (1 / rope.scaling.factor)
  const float* freq_factors = nullptr;   // (rope_dim/2) or null: Llama 3.1+'s rope_freqs tensor
};
void RopeTable(int64_t pos, size_t rope_dim, const RopeParams& params, float* cos_sin);
// "Normal" (GGML NORM / llama GGUF) rotation of adjacent pairs (x[2i], x[2i+1]) of one head, in place;
// head: (head_dim), only the first rope_dim coordinates rotate.
void RopeApply(float* head, size_t rope_dim, const float* cos_sin);
void RopeApplyRef(float* head, size_t rope_dim, int64_t pos, float base);
// "NeoX" (GGML NEOX: qwen2, gemma) rotation of the pairs (x[i], x[i + rope_dim/2]), in place.
void RopeApplyNeox(float* head, size_t rope_dim, const float* cos_sin);
void RopeApplyNeoxRef(float* head, size_t rope_dim, int64_t pos, const RopeParams& params);

// In place: x = softmax(x); returns nothing; x: (n), n >= 1.
void Softmax(float* x, size_t n);
// log(sum(exp(x))) computed stably; x: (n). Scalar, double exp per element (the evaluations' PPL).
double LogSumExp(const float* x, size_t n);
// The same in f32 SIMD (Highway's Exp, sums folded into a double every 1024 elements), within ~1e-6
// relative of LogSumExp: per generated token over the whole vocabulary (an agent's NLL), where the
// scalar form showed in a 15-agent decode step (docs/results/design-measurements.md, LogSumExpFast).
double LogSumExpFast(const float* x, size_t n);

// out[i] = silu(gate[i]) * up[i] = gate[i] / (1 + exp(-gate[i])) * up[i];  (n)
// SIMD (Highway's Exp, ≤ 1 ULP from std::exp); each element's value does not depend on n or the split.
void SwiGlu(const float* gate, const float* up, size_t n, float* out);
void SwiGluRef(const float* gate, const float* up, size_t n, float* out);
// out[i] = gelu_tanh(gate[i]) * up[i], gelu_tanh(x) = x/2 · (1 + tanh(√(2/π) · (x + 0.044715 x³)));  (n)
// SIMD (Highway's Tanh, ≤ 4 ULP from std::tanh); each element's value does not depend on n or the split.
void GeGluTanh(const float* gate, const float* up, size_t n, float* out);
void GeGluTanhRef(const float* gate, const float* up, size_t n, float* out);
// In place: x = cap · tanh(x / cap) (final-logit soft-capping); (n), cap > 0.
void SoftCap(float* x, size_t n, float cap);

float Dot(const float* a, const float* b, size_t n);
// y += a * x
void Axpy(float a, const float* x, size_t n, float* y);
// x *= a
void Scale(float* x, size_t n, float a);
// y += x
void Add(const float* x, size_t n, float* y);

}  // namespace chorus
