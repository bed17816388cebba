// Vectorized softmax folding and fp16-row attention pieces (Highway dynamic dispatch).
#include "kv/attention_math.h"

#include <algorithm>
#include <cmath>

#include "util/fp16.h"  // F16ToF32

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kv/attention_math.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

HWY_BEFORE_NAMESPACE();
namespace chorus {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void SoftmaxFoldImpl(float* s, size_t n_q, size_t ld, size_t n_rows, float* m, float* l, float* o, size_t hd) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const auto neg_inf = hn::Set(d, -INFINITY);
  for (size_t i = 0; i < n_q; ++i) {
    float* row = s + i * ld;
    auto vmax = neg_inf;
    size_t j = 0;
    for (; j + N <= n_rows; j += N) vmax = hn::Max(vmax, hn::LoadU(d, row + j));
    float mb = hn::GetLane(hn::MaxOfLanes(d, vmax));
    for (; j < n_rows; ++j) mb = std::max(mb, row[j]);
    const float m_new = std::max(m[i], mb);
    if (m_new != m[i]) {
      const float c = m[i] == -INFINITY ? 0.0f : std::exp(m[i] - m_new);
      l[i] *= c;
      float* oi = o + i * hd;
      const auto vc = hn::Set(d, c);
      size_t k = 0;
      for (; k + N <= hd; k += N) hn::StoreU(hn::Mul(hn::LoadU(d, oi + k), vc), d, oi + k);
      for (; k < hd; ++k) oi[k] *= c;
      m[i] = m_new;
    }
    const auto vm = hn::Set(d, m_new);
    auto vsum = hn::Zero(d);
    j = 0;
    for (; j + N <= n_rows; j += N) {
      const auto e = hn::Exp(d, hn::Sub(hn::LoadU(d, row + j), vm));
      vsum = hn::Add(vsum, e);
      hn::StoreU(e, d, row + j);
    }
    float sum = hn::GetLane(hn::SumOfLanes(d, vsum));
    for (; j < n_rows; ++j) sum += (row[j] = std::exp(row[j] - m_new));
    for (; j < ld; ++j) row[j] = 0.0f;
    l[i] += sum;
  }
}

void ScoreF16RowsImpl(const float* q, size_t n_q, size_t hd, const uint16_t* k, size_t stride, size_t n_rows,
                      float* s, size_t ld) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const size_t N = hn::Lanes(df);
  for (size_t j = 0; j < n_rows; ++j) {
    const uint16_t* kj = k + j * stride;
    for (size_t i = 0; i < n_q; ++i) {
      const float* qi = q + i * hd;
      auto acc = hn::Zero(df);
      size_t c = 0;
      for (; c + N <= hd; c += N)
        acc = hn::MulAdd(hn::LoadU(df, qi + c),
                         hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(kj + c))), acc);
      float sum = hn::GetLane(hn::SumOfLanes(df, acc));
      for (; c < hd; ++c) sum += qi[c] * F16ToF32(kj[c]);
      s[i * ld + j] = sum;
    }
  }
}

void AccumulateF16RowsImpl(const float* p, size_t n_q, size_t ld, const uint16_t* v, size_t stride, size_t n_rows,
                           float* o, size_t hd) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const size_t N = hn::Lanes(df);
  for (size_t j = 0; j < n_rows; ++j) {
    const uint16_t* vj = v + j * stride;
    size_t c = 0;
    for (; c + N <= hd; c += N) {
      const auto vv = hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(vj + c)));
      for (size_t i = 0; i < n_q; ++i) {
        float* oi = o + i * hd + c;
        hn::StoreU(hn::MulAdd(hn::Set(df, p[i * ld + j]), vv, hn::LoadU(df, oi)), df, oi);
      }
    }
    for (; c < hd; ++c)
      for (size_t i = 0; i < n_q; ++i) o[i * hd + c] += p[i * ld + j] * F16ToF32(vj[c]);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace chorus
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace chorus {
HWY_EXPORT(SoftmaxFoldImpl);
HWY_EXPORT(ScoreF16RowsImpl);
HWY_EXPORT(AccumulateF16RowsImpl);

void SoftmaxFold(float* s, size_t n_q, size_t ld, size_t n_rows, float* m, float* l, float* o, size_t hd) {
  HWY_DYNAMIC_DISPATCH(SoftmaxFoldImpl)(s, n_q, ld, n_rows, m, l, o, hd);
}

void SoftmaxFoldRef(float* s, size_t n_q, size_t ld, size_t n_rows, float* m, float* l, float* o, size_t hd) {
  for (size_t i = 0; i < n_q; ++i) {
    float* row = s + i * ld;
    float mb = -INFINITY;
    for (size_t j = 0; j < n_rows; ++j) mb = std::max(mb, row[j]);
    const float m_new = std::max(m[i], mb);
    const double c = m[i] == -INFINITY ? 0.0 : std::exp(double(m[i]) - m_new);
    l[i] = static_cast<float>(l[i] * c);
    for (size_t k = 0; k < hd; ++k) o[i * hd + k] = static_cast<float>(o[i * hd + k] * c);
    m[i] = m_new;
    double sum = 0;
    for (size_t j = 0; j < n_rows; ++j) sum += (row[j] = static_cast<float>(std::exp(double(row[j]) - m_new)));
    for (size_t j = n_rows; j < ld; ++j) row[j] = 0.0f;
    l[i] = static_cast<float>(l[i] + sum);
  }
}

void ScoreF16Rows(const float* q, size_t n_q, size_t hd, const uint16_t* k, size_t stride, size_t n_rows,
                  float* s, size_t ld) {
  HWY_DYNAMIC_DISPATCH(ScoreF16RowsImpl)(q, n_q, hd, k, stride, n_rows, s, ld);
}

void AccumulateF16Rows(const float* p, size_t n_q, size_t ld, const uint16_t* v, size_t stride, size_t n_rows,
                       float* o, size_t hd) {
  HWY_DYNAMIC_DISPATCH(AccumulateF16RowsImpl)(p, n_q, ld, v, stride, n_rows, o, hd);
}

}  // namespace chorus
#endif  // HWY_ONCE
