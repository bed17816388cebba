// GELU (erf form): Highway kernel and scalar reference (see bert_gelu.h).
#include "encoder/bert_gelu.h"

#include <algorithm>
#include <cmath>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "encoder/bert_gelu.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>  // Exp

HWY_BEFORE_NAMESPACE();
namespace chorus {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class D, class V>
HWY_INLINE V GeluVec(D d, V x) {
  const V z = hn::Mul(hn::Abs(x), hn::Set(d, 0.70710678118654752f));  // |x|/√2
  const V t = hn::Div(hn::Set(d, 1.0f), hn::MulAdd(hn::Set(d, 0.3275911f), z, hn::Set(d, 1.0f)));
  V poly = hn::Set(d, 1.061405429f);
  poly = hn::MulAdd(poly, t, hn::Set(d, -1.453152027f));
  poly = hn::MulAdd(poly, t, hn::Set(d, 1.421413741f));
  poly = hn::MulAdd(poly, t, hn::Set(d, -0.284496736f));
  poly = hn::MulAdd(poly, t, hn::Set(d, 0.254829592f));
  poly = hn::Mul(poly, t);
  const V e = hn::Exp(d, hn::Neg(hn::Mul(z, z)));
  const V erf_abs = hn::NegMulAdd(poly, e, hn::Set(d, 1.0f));  // erf(|x|/√2)
  const V erf = hn::CopySign(erf_abs, x);
  return hn::Mul(hn::Mul(hn::Set(d, 0.5f), x), hn::Add(hn::Set(d, 1.0f), erf));
}

void GeluImpl(float* HWY_RESTRICT x, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(GeluVec(d, hn::LoadU(d, x + i)), d, x + i);
  if (i < n) {  // tail through a padded buffer (this Highway has no LoadN/StoreN)
    HWY_ALIGN float tmp[HWY_MAX_BYTES / sizeof(float)] = {};
    std::copy(x + i, x + n, tmp);
    hn::Store(GeluVec(d, hn::Load(d, tmp)), d, tmp);
    std::copy(tmp, tmp + (n - i), x + i);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace chorus
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace chorus {
HWY_EXPORT(GeluImpl);

void GeluErf(float* x, size_t n) { HWY_DYNAMIC_DISPATCH(GeluImpl)(x, n); }

void GeluErfRef(float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
}

}  // namespace chorus
#endif  // HWY_ONCE
