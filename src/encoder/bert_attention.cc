// BertAttention: Highway kernel and scalar reference (see bert_attention.h). Per (head, query): the
// scores against every key (dot products head_dim long), a max-subtracted softmax with Highway's Exp,
// then the weighted sum of the value rows.
#include "encoder/bert_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "encoder/bert_attention.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>  // Exp

HWY_BEFORE_NAMESPACE();
namespace chorus {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void AttentionImpl(const float* HWY_RESTRICT q, const float* HWY_RESTRICT k, const float* HWY_RESTRICT v,
                   size_t ld, size_t n, size_t heads, size_t hd, float scale, float* HWY_RESTRICT ctx) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  thread_local std::vector<float> buf;
  const size_t n_pad = (n + N - 1) / N * N;
  if (buf.size() < n_pad) buf.resize(n_pad);
  float* s = buf.data();
  const bool vec_hd = hd % N == 0;
  for (size_t h = 0; h < heads; ++h) {
    for (size_t i = 0; i < n; ++i) {
      const float* qi = q + i * ld + h * hd;
      float mx = -INFINITY;
      for (size_t j = 0; j < n; ++j) {
        const float* kj = k + j * ld + h * hd;
        float dot = 0;
        if (vec_hd) {
          auto acc = hn::Zero(d);
          for (size_t c = 0; c < hd; c += N) acc = hn::MulAdd(hn::LoadU(d, qi + c), hn::LoadU(d, kj + c), acc);
          dot = hn::GetLane(hn::SumOfLanes(d, acc));
        } else {
          for (size_t c = 0; c < hd; ++c) dot += qi[c] * kj[c];
        }
        s[j] = dot * scale;
        mx = std::max(mx, s[j]);
      }
      for (size_t j = n; j < n_pad; ++j) s[j] = -INFINITY;  // exp → 0
      const auto vmx = hn::Set(d, mx);
      auto vsum = hn::Zero(d);
      for (size_t j = 0; j < n_pad; j += N) {
        const auto e = hn::Exp(d, hn::Sub(hn::LoadU(d, s + j), vmx));
        hn::StoreU(e, d, s + j);
        vsum = hn::Add(vsum, e);
      }
      const float inv = 1.0f / hn::GetLane(hn::SumOfLanes(d, vsum));
      float* ci = ctx + i * ld + h * hd;
      std::fill(ci, ci + hd, 0.0f);
      for (size_t j = 0; j < n; ++j) {
        const float p = s[j] * inv;
        const float* vj = v + j * ld + h * hd;
        if (vec_hd) {
          const auto vp = hn::Set(d, p);
          for (size_t c = 0; c < hd; c += N) hn::StoreU(hn::MulAdd(vp, hn::LoadU(d, vj + c), hn::LoadU(d, ci + c)), d, ci + c);
        } else {
          for (size_t c = 0; c < hd; ++c) ci[c] += p * vj[c];
        }
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace chorus
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace chorus {
HWY_EXPORT(AttentionImpl);

void BertAttention(const float* q, const float* k, const float* v, size_t ld, size_t n, size_t heads,
                   size_t head_dim, float scale, float* ctx) {
  if (n == 0) return;
  HWY_DYNAMIC_DISPATCH(AttentionImpl)(q, k, v, ld, n, heads, head_dim, scale, ctx);
}

void BertAttentionRef(const float* q, const float* k, const float* v, size_t ld, size_t n, size_t heads,
                      size_t head_dim, float scale, float* ctx) {
  std::vector<double> s(n);
  for (size_t h = 0; h < heads; ++h) {
    for (size_t i = 0; i < n; ++i) {
      double mx = -INFINITY;
      for (size_t j = 0; j < n; ++j) {
        double dot = 0;
        for (size_t c = 0; c < head_dim; ++c) dot += double(q[i * ld + h * head_dim + c]) * k[j * ld + h * head_dim + c];
        s[j] = dot * scale;
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (size_t j = 0; j < n; ++j) sum += (s[j] = std::exp(s[j] - mx));
      for (size_t c = 0; c < head_dim; ++c) {
        double acc = 0;
        for (size_t j = 0; j < n; ++j) acc += s[j] * v[j * ld + h * head_dim + c];
        ctx[i * ld + h * head_dim + c] = static_cast<float>(acc / sum);
      }
    }
  }
}

}  // namespace chorus
#endif  // HWY_ONCE
