// Elementwise math (Highway-vectorized where it matters) and scalar reference twins.
#include "ops/elementwise.h"

#include <algorithm>  // std::copy
#include <cmath>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/elementwise.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>  // Tanh (≤ 4 ULP), Exp (≤ 1 ULP)

HWY_BEFORE_NAMESPACE();
namespace chorus {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

float DotImpl(const float* a, const float* b, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  auto s0 = hn::Zero(d), s1 = hn::Zero(d);
  size_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    s0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), s0);
    s1 = hn::MulAdd(hn::LoadU(d, a + i + N), hn::LoadU(d, b + i + N), s1);
  }
  for (; i + N <= n; i += N) s0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), s0);
  float s = hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void AddImpl(const float* x, size_t n, float* y) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Add(hn::LoadU(d, y + i), hn::LoadU(d, x + i)), d, y + i);
  for (; i < n; ++i) y[i] += x[i];
}

void ScaleImpl(float* x, size_t n, float a) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto va = hn::Set(d, a);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::LoadU(d, x + i), va), d, x + i);
  for (; i < n; ++i) x[i] *= a;
}

// out[i] = x[i] · inv · w[i], the scalar loop's two products in its order.
void ScaleByImpl(const float* x, float inv, const float* w, size_t n, float* out) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto vi = hn::Set(d, inv);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(d, x + i), vi), hn::LoadU(d, w + i)), d, out + i);
  for (; i < n; ++i) out[i] = x[i] * inv * w[i];
}

void AxpyImpl(float a, const float* x, size_t n, float* y) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto va = hn::Set(d, a);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::MulAdd(va, hn::LoadU(d, x + i), hn::LoadU(d, y + i)), d, y + i);
  for (; i < n; ++i) y[i] += a * x[i];
}

// out[i] = f(gate[i], up[i]) through `lanes` (one vector of floats per call); the last n mod N elements
// through the same lanes too (zero-padded copies): one formula for every element, whatever n.
template <class Lanes>
HWY_INLINE void GatedLanes(const float* gate, const float* up, size_t n, float* out, const Lanes& lanes) {
  const size_t N = hn::Lanes(hn::ScalableTag<float>());
  size_t i = 0;
  for (; i + N <= n; i += N) lanes(gate + i, up + i, out + i);
  if (i == n) return;
  HWY_ALIGN float g[HWY_MAX_BYTES / sizeof(float)] = {}, u[HWY_MAX_BYTES / sizeof(float)] = {},
                  o[HWY_MAX_BYTES / sizeof(float)];
  std::copy(gate + i, gate + n, g);
  std::copy(up + i, up + n, u);
  lanes(g, u, o);
  std::copy(o, o + (n - i), out + i);
}

// silu(gate) · up = gate / (1 + exp(-gate)) · up with Highway's Exp (≤ 1 ULP from std::exp); glibc's
// scalar expf per element was the SwiGLU of every llama-family MLP. exp's argument is capped at 104 (the
// top of Highway's valid range; exp overflows to +inf from 88.7 as std::exp does, so gate < -88.7 gives -0).
void SwiGluImpl(const float* gate, const float* up, size_t n, float* out) {
  const hn::ScalableTag<float> d;
  const auto one = hn::Set(d, 1.0f), cap = hn::Set(d, 104.0f);
  auto lanes = [&](const float* gp, const float* up_p, float* op) {
    const auto g = hn::LoadU(d, gp);
    const auto e = hn::Exp(d, hn::Min(hn::Neg(g), cap));
    hn::StoreU(hn::Mul(hn::Div(g, hn::Add(one, e)), hn::LoadU(d, up_p)), d, op);
  };
  GatedLanes(gate, up, n, out, lanes);
}

// gelu_tanh(gate) · up, the scalar GeGluTanh's expression with Highway's Tanh (≤ 4 ULP from std::tanh);
// glibc's scalar tanhf was a large share of a Gemma 3 prefill's CPU time (2,048 per token and layer;
// docs/results/design-measurements.md, GeGluTanh).
void GeGluTanhImpl(const float* gate, const float* up, size_t n, float* out) {
  const hn::ScalableTag<float> d;
  const auto k = hn::Set(d, 0.7978845608028654f), coef = hn::Set(d, 0.044715f), one = hn::Set(d, 1.0f),
             half = hn::Set(d, 0.5f);
  auto lanes = [&](const float* gp, const float* up_p, float* op) {
    const auto g = hn::LoadU(d, gp);
    const auto inner = hn::Mul(hn::Mul(k, g), hn::Add(one, hn::Mul(hn::Mul(coef, g), g)));
    const auto t = hn::Add(one, hn::Tanh(d, inner));
    hn::StoreU(hn::Mul(hn::Mul(hn::Mul(half, g), t), hn::LoadU(d, up_p)), d, op);
  };
  GatedLanes(gate, up, n, out, lanes);
}

// log Σ exp(x) in f32 vectors: the max, then Exp (≤ 1 ULP) of x − max summed by lanes in 4
// accumulators, folded into a double every 1024 elements (an f32 partial of ≤ 1024 terms each ≤ 1
// keeps ~1e-7 relative error).
double LogSumExpFastImpl(const float* x, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  auto vmax = hn::Set(d, -INFINITY);
  size_t i = 0;
  for (; i + N <= n; i += N) vmax = hn::Max(vmax, hn::LoadU(d, x + i));
  float m = hn::GetLane(hn::MaxOfLanes(d, vmax));
  for (; i < n; ++i) m = std::max(m, x[i]);
  if (m == -INFINITY || m == INFINITY || m != m) return m;  // all -inf, an inf or a NaN: as the scalar form
  const auto vm = hn::Set(d, m);
  double sum = 0;
  i = 0;
  while (i + 4 * N <= n) {
    auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
    const size_t end = std::min(n - n % (4 * N), i + 1024);
    for (; i < end; i += 4 * N) {
      a0 = hn::Add(a0, hn::Exp(d, hn::Sub(hn::LoadU(d, x + i), vm)));
      a1 = hn::Add(a1, hn::Exp(d, hn::Sub(hn::LoadU(d, x + i + N), vm)));
      a2 = hn::Add(a2, hn::Exp(d, hn::Sub(hn::LoadU(d, x + i + 2 * N), vm)));
      a3 = hn::Add(a3, hn::Exp(d, hn::Sub(hn::LoadU(d, x + i + 3 * N), vm)));
    }
    sum += hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  }
  for (; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - m);
  return m + std::log(sum);
}

}  // namespace HWY_NAMESPACE
}  // namespace chorus
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace chorus {
HWY_EXPORT(DotImpl);
HWY_EXPORT(LogSumExpFastImpl);
HWY_EXPORT(AxpyImpl);
HWY_EXPORT(AddImpl);
HWY_EXPORT(ScaleByImpl);
HWY_EXPORT(ScaleImpl);
HWY_EXPORT(GeGluTanhImpl);
HWY_EXPORT(SwiGluImpl);

float Dot(const float* a, const float* b, size_t n) { return HWY_DYNAMIC_DISPATCH(DotImpl)(a, b, n); }
void Axpy(float a, const float* x, size_t n, float* y) { HWY_DYNAMIC_DISPATCH(AxpyImpl)(a, x, n, y); }

void Scale(float* x, size_t n, float a) { HWY_DYNAMIC_DISPATCH(ScaleImpl)(x, n, a); }
void Add(const float* x, size_t n, float* y) { HWY_DYNAMIC_DISPATCH(AddImpl)(x, n, y); }

void RmsNorm(const float* x, const float* w, size_t n, float eps, float* out) {
  const float ss = Dot(x, x, n);
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  HWY_DYNAMIC_DISPATCH(ScaleByImpl)(x, inv, w, n, out);
}

void RmsNormRef(const float* x, const float* w, size_t n, float eps, float* out) {
  double ss = 0;
  for (size_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(x[i] * inv * w[i]);
}

void RopeTable(int64_t pos, size_t rope_dim, float base, float* cos_sin) {
  RopeTable(pos, rope_dim, RopeParams{.base = base}, cos_sin);
}

// θ_i in double (ggml accumulates pos · base^(-2/d) in float: a ~1e-7 relative difference).
static double RopeTheta(int64_t pos, size_t rope_dim, const RopeParams& p, size_t i) {
  double theta = static_cast<double>(pos) *
                 std::pow(static_cast<double>(p.base), -2.0 * static_cast<double>(i) / rope_dim);
  if (p.freq_factors) theta /= p.freq_factors[i];
  return theta * p.freq_scale;
}

void RopeTable(int64_t pos, size_t rope_dim, const RopeParams& params, float* cos_sin) {
  for (size_t i = 0; i < rope_dim / 2; ++i) {
    const double theta = RopeTheta(pos, rope_dim, params, i);
    cos_sin[2 * i] = static_cast<float>(std::cos(theta));
    cos_sin[2 * i + 1] = static_cast<float>(std::sin(theta));
  }
}

void RopeApplyNeox(float* head, size_t rope_dim, const float* cos_sin) {
  const size_t half = rope_dim / 2;
  for (size_t i = 0; i < half; ++i) {
    const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
    const float x0 = head[i], x1 = head[i + half];
    head[i] = x0 * c - x1 * s;
    head[i + half] = x0 * s + x1 * c;
  }
}

void RopeApplyNeoxRef(float* head, size_t rope_dim, int64_t pos, const RopeParams& params) {
  const size_t half = rope_dim / 2;
  for (size_t i = 0; i < half; ++i) {
    const double theta = RopeTheta(pos, rope_dim, params, i);
    const double x0 = head[i], x1 = head[i + half];
    head[i] = static_cast<float>(x0 * std::cos(theta) - x1 * std::sin(theta));
    head[i + half] = static_cast<float>(x0 * std::sin(theta) + x1 * std::cos(theta));
  }
}

void RopeApply(float* head, size_t rope_dim, const float* cos_sin) {
  for (size_t i = 0; i < rope_dim / 2; ++i) {
    const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
    const float x0 = head[2 * i], x1 = head[2 * i + 1];
    head[2 * i] = x0 * c - x1 * s;
    head[2 * i + 1] = x0 * s + x1 * c;
  }
}

void RopeApplyRef(float* head, size_t rope_dim, int64_t pos, float base) {
  for (size_t i = 0; i < rope_dim / 2; ++i) {
    const double theta = pos * std::pow(static_cast<double>(base), -2.0 * i / rope_dim);
    const double x0 = head[2 * i], x1 = head[2 * i + 1];
    head[2 * i] = static_cast<float>(x0 * std::cos(theta) - x1 * std::sin(theta));
    head[2 * i + 1] = static_cast<float>(x0 * std::sin(theta) + x1 * std::cos(theta));
  }
}

void Softmax(float* x, size_t n) {
  float m = x[0];
  for (size_t i = 1; i < n; ++i) m = std::max(m, x[i]);
  float sum = 0;
  for (size_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (size_t i = 0; i < n; ++i) x[i] *= inv;
}

double LogSumExp(const float* x, size_t n) {
  float m = x[0];
  for (size_t i = 1; i < n; ++i) m = std::max(m, x[i]);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - m);
  return m + std::log(sum);
}

double LogSumExpFast(const float* x, size_t n) { return HWY_DYNAMIC_DISPATCH(LogSumExpFastImpl)(x, n); }

void SwiGlu(const float* gate, const float* up, size_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(SwiGluImpl)(gate, up, n, out);
}

void SwiGluRef(const float* gate, const float* up, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) {
    const double g = gate[i];
    out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

void GeGluTanh(const float* gate, const float* up, size_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(GeGluTanhImpl)(gate, up, n, out);
}

void GeGluTanhRef(const float* gate, const float* up, size_t n, float* out) {
  const double k = std::sqrt(2.0 / 3.14159265358979323846);
  for (size_t i = 0; i < n; ++i) {
    const double g = gate[i];
    out[i] = static_cast<float>(0.5 * g * (1.0 + std::tanh(k * (g + 0.044715 * g * g * g))) * up[i]);
  }
}

void SoftCap(float* x, size_t n, float cap) {
  const float inv = 1.0f / cap;
  for (size_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] * inv);
}

}  // namespace chorus
#endif  // HWY_ONCE
