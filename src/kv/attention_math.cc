// Vectorized softmax folding and fp16-row attention pieces (Highway dynamic dispatch).
#include "kv/attention_math.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "util/fp16.h"  // F16ToF32

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kv/attention_math.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include "ops/reduce16-inl.h"  // Max16, Sum16

HWY_BEFORE_NAMESPACE();
namespace chorus {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// e^x in 14 vector operations (Highway's Exp: ~22): n = round(x / ln 2) by vrndscaleps, r = x - n·ln 2
// in two parts (Cody-Waite, as Highway), e^r = 1 + r + r²·P(r) with Highway's degree-5 P by Horner,
// then · 2^n by vscalefps, which needs no exponent arithmetic and takes n down to the denormals.
// x < -104 (and -inf, NaN) gives 0, as Highway's. Within 2 ulp of e^x on [-104, 0] (a test).
HWY_INLINE __m512 ExpAvx512(__m512 x) {
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693145751953125f), x);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(-1.428606765330187045e-6f), r);
  __m512 p = _mm512_set1_ps(+0.000198527617612853646278381f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(+0.00139304355252534151077271f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(+0.00833336077630519866943359f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(+0.0416664853692054748535156f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(+0.166666671633720397949219f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(+0.5f));
  p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-104.0f), _CMP_GE_OQ);
  return _mm512_maskz_scalef_ps(keep, p, n);
}
#endif

// The fold's exp: ExpAvx512 on AVX-512, else Highway's.
template <class D, class V>
HWY_INLINE V FoldExp(D d, V x) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  (void)d;
  return V{ExpAvx512(x.raw)};
#else
  return hn::Exp(d, x);
#endif
}

// One query's rescale when its running max moves from m_old to m_new (> -inf): l and o times
// exp(m_old - m_new), 0 for a fresh state.
HWY_INLINE void RescaleState(float m_old, float m_new, float* l, float* oi, size_t hd) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  const float c = m_old == -INFINITY ? 0.0f : std::exp(m_old - m_new);
  *l *= c;
  const auto vc = hn::Set(d, c);
  size_t k = 0;
  for (; k + N <= hd; k += N) hn::StoreU(hn::Mul(hn::LoadU(d, oi + k), vc), d, oi + k);
  for (; k < hd; ++k) oi[k] *= c;
}

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// SoftmaxFold of nq <= 16 queries over a full tile of 32 rows: the per-query path's arithmetic in its
// order (the same vector exp, the sum of e(j) + e(j + 16) reduced by the same tree, then l + sum), with
// the block maxima and the sums reduced 16 queries at a time. Input slot k holds query Reduce16Slot(k),
// so that result lane i is query i.
HWY_INLINE void SoftmaxFold32x16(float* s, size_t ld, size_t nq, float* m, float* l, float* o, size_t hd) {
  const hn::ScalableTag<float> d;
  using V = decltype(hn::Zero(d));
  const __mmask16 live = static_cast<__mmask16>((1u << nq) - 1);
  __m512 v[16];
#pragma GCC unroll 16
  for (size_t slot = 0; slot < 16; ++slot) {
    const size_t i = Reduce16Slot(slot);
    const float* row = s + i * ld;
    v[slot] = i < nq ? _mm512_max_ps(_mm512_loadu_ps(row), _mm512_loadu_ps(row + 16)) : _mm512_set1_ps(-INFINITY);
  }
  const __m512 m_old = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), live, m);
  const __m512 m_new = _mm512_max_ps(m_old, Max16(v));
  alignas(64) float mn[16];
  _mm512_store_ps(mn, m_new);
  for (uint32_t moved = _mm512_mask_cmp_ps_mask(live, m_new, m_old, _CMP_NEQ_UQ); moved != 0; moved &= moved - 1) {
    const size_t i = static_cast<size_t>(__builtin_ctz(moved));
    RescaleState(m[i], mn[i], l + i, o + i * hd, hd);
  }
  _mm512_mask_storeu_ps(m, live, m_new);
  for (size_t slot = 0; slot < 16; ++slot) {
    const size_t i = Reduce16Slot(slot);
    v[slot] = _mm512_setzero_ps();
    if (i >= nq) continue;
    float* row = s + i * ld;
    if (mn[i] == -INFINITY) {  // every score so far masked: nothing to fold yet
      std::fill(row, row + ld, 0.0f);
      continue;
    }
    const V vm = hn::Set(d, mn[i]);
    const V e0 = FoldExp(d, hn::Sub(hn::LoadU(d, row), vm)), e1 = FoldExp(d, hn::Sub(hn::LoadU(d, row + 16), vm));
    hn::StoreU(e0, d, row);
    hn::StoreU(e1, d, row + 16);
    std::fill(row + 32, row + ld, 0.0f);
    v[slot] = _mm512_add_ps(e0.raw, e1.raw);
  }
  _mm512_mask_storeu_ps(l, live, _mm512_add_ps(_mm512_mask_loadu_ps(_mm512_setzero_ps(), live, l), Sum16(v)));
}
#endif

// The per-query path (every target, every n_rows).
void SoftmaxFoldEachImpl(float* s, size_t n_q, size_t ld, size_t n_rows, float* m, float* l, float* o, size_t hd) {
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
    if (m_new == -INFINITY) {  // every score so far masked: nothing to fold yet
      std::fill(row, row + ld, 0.0f);
      continue;
    }
    if (m_new != m[i]) {
      RescaleState(m[i], m_new, l + i, o + i * hd, hd);
      m[i] = m_new;
    }
    const auto vm = hn::Set(d, m_new);
    auto vsum = hn::Zero(d);
    j = 0;
    for (; j + N <= n_rows; j += N) {
      const auto e = FoldExp(d, hn::Sub(hn::LoadU(d, row + j), vm));
      vsum = hn::Add(vsum, e);
      hn::StoreU(e, d, row + j);
    }
    float sum = hn::GetLane(hn::SumOfLanes(d, vsum));
    for (; j < n_rows; ++j) sum += (row[j] = std::exp(row[j] - m_new));
    for (; j < ld; ++j) row[j] = 0.0f;
    l[i] += sum;
  }
}

void SoftmaxFoldImpl(float* s, size_t n_q, size_t ld, size_t n_rows, float* m, float* l, float* o, size_t hd) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  if (n_rows == 32) {
    for (size_t q0 = 0; q0 < n_q; q0 += 16)
      SoftmaxFold32x16(s + q0 * ld, ld, std::min<size_t>(16, n_q - q0), m + q0, l + q0, o + q0 * hd, hd);
    return;
  }
#endif
  SoftmaxFoldEachImpl(s, n_q, ld, n_rows, m, l, o, hd);
}

constexpr size_t kStackFloats = 8192;  // 32 KB of f32 rows on the stack (kAttendRows rows up to head_dim 256)

// Scores of QB queries (rows of q) against one transposed f32 tile kt: QB · kAttendRows / N accumulators,
// enough independent FMA chains to fill both FMA pipes (one query's chains alone would not).
template <size_t QB, class D>
HWY_INLINE void ScoreQueries(D df, const float* q, size_t hd, const float* kt, float* s, size_t ld) {
  constexpr size_t N = HWY_LANES(float), kVecs = kAttendRows / N;
  hn::Vec<D> acc[QB][kVecs];
#pragma GCC unroll 16
  for (size_t a = 0; a < QB; ++a)
#pragma GCC unroll 16
    for (size_t v = 0; v < kVecs; ++v) acc[a][v] = hn::Zero(df);
  for (size_t c = 0; c < hd; ++c) {
    const float* kc = kt + c * kAttendRows;
#pragma GCC unroll 16
    for (size_t a = 0; a < QB; ++a) {
      const auto qc = hn::Set(df, q[a * hd + c]);
#pragma GCC unroll 16
      for (size_t v = 0; v < kVecs; ++v) acc[a][v] = hn::MulAdd(qc, hn::LoadU(df, kc + v * N), acc[a][v]);
    }
  }
#pragma GCC unroll 16
  for (size_t a = 0; a < QB; ++a)
#pragma GCC unroll 16
    for (size_t v = 0; v < kVecs; ++v) hn::StoreU(acc[a][v], df, s + a * ld + v * N);
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

// One tile of kAttendRows keys stored transposed (kt[c * kAttendRows + j] = k_j[c], fp16): converted to
// f32 once, then every query's kAttendRows scores are hd broadcast-FMAs, no horizontal sums.
void ScoreF16TileImpl(const float* q, size_t n_q, size_t hd, const uint16_t* kt, float* s, size_t ld,
                      float* ktf) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  constexpr size_t N = HWY_LANES(float), kVecs = kAttendRows / N;
  constexpr size_t kQueries = kVecs >= 8 ? 1 : 8 / kVecs;
  static_assert(kAttendRows % N == 0);
  for (size_t e = 0; e < hd * kAttendRows; e += N)
    hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(kt + e))), df, ktf + e);
  size_t i = 0;
  for (; i + kQueries <= n_q; i += kQueries) ScoreQueries<kQueries>(df, q + i * hd, hd, ktf, s + i * ld, ld);
  for (; i < n_q; ++i) ScoreQueries<1>(df, q + i * hd, hd, ktf, s + i * ld, ld);
}

// o_i[c0, c0 + NB·N) += Σ_j p_i[j] · vf_j over nr f32 rows vf (row stride hd), the NB vectors in registers.
template <size_t NB, class D>
HWY_INLINE void AccumulateBlock(D df, const float* pi, const float* vf, size_t nr, size_t hd, float* oi) {
  constexpr size_t N = HWY_LANES(float);
  hn::Vec<D> acc[NB];
#pragma GCC unroll 16
  for (size_t b = 0; b < NB; ++b) acc[b] = hn::LoadU(df, oi + b * N);
  for (size_t j = 0; j < nr; ++j) {
    const auto pj = hn::Set(df, pi[j]);
    const float* vj = vf + j * hd;
#pragma GCC unroll 16
    for (size_t b = 0; b < NB; ++b) acc[b] = hn::MulAdd(pj, hn::LoadU(df, vj + b * N), acc[b]);
  }
#pragma GCC unroll 16
  for (size_t b = 0; b < NB; ++b) hn::StoreU(acc[b], df, oi + b * N);
}

// AccumulateBlock<nb> for a run-time nb ≤ NB (a compile-time count each; 0: nothing).
template <size_t NB, class D>
HWY_INLINE void AccumulateTail(size_t nb, D df, const float* pi, const float* vf, size_t nr, size_t hd, float* oi) {
  if (nb == NB) return AccumulateBlock<NB>(df, pi, vf, nr, hd, oi);
  if constexpr (NB > 1) AccumulateTail<NB - 1>(nb, df, pi, vf, nr, hd, oi);
}

// Values of one chunk of rows as f32 once, whatever n_q is; each query's output, 8 vectors at a time,
// stays in registers over the chunk's rows. Per query the same FMAs in the same order alone or stacked
// with others (batched agents answer as alone).
void AccumulateF16RowsImpl(const float* p, size_t n_q, size_t ld, const uint16_t* v, size_t stride, size_t n_rows,
                           float* o, size_t hd) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  constexpr size_t N = HWY_LANES(float), kBlockVecs = 8;
  HWY_ALIGN float vf[kStackFloats];  // no heap: the KV layer's allocations are all counted
  const size_t hd_vec = hd / N * N, chunk = std::min(kAttendRows, kStackFloats / hd);
  for (size_t r0 = 0; r0 < n_rows; r0 += chunk) {
    const size_t nr = std::min(chunk, n_rows - r0);
    for (size_t j = 0; j < nr; ++j) {
      const uint16_t* vj = v + (r0 + j) * stride;
      float* dst = vf + j * hd;
      size_t c = 0;
      for (; c + N <= hd; c += N)
        hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(vj + c))), df, dst + c);
      for (; c < hd; ++c) dst[c] = F16ToF32(vj[c]);
    }
    for (size_t i = 0; i < n_q; ++i) {
      const float* pi = p + i * ld + r0;
      float* oi = o + i * hd;
      size_t c0 = 0;
      for (; c0 + kBlockVecs * N <= hd_vec; c0 += kBlockVecs * N)
        AccumulateBlock<kBlockVecs>(df, pi, vf + c0, nr, hd, oi + c0);
      AccumulateTail<kBlockVecs - 1>((hd_vec - c0) / N, df, pi, vf + c0, nr, hd, oi + c0);  // the last < 8 vectors
      for (size_t c = hd_vec; c < hd; ++c) {
        float acc = oi[c];
        for (size_t j = 0; j < nr; ++j) acc += pi[j] * vf[j * hd + c];
        oi[c] = acc;
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace chorus
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace chorus {
HWY_EXPORT(SoftmaxFoldImpl);
HWY_EXPORT(SoftmaxFoldEachImpl);
HWY_EXPORT(ScoreF16RowsImpl);
HWY_EXPORT(ScoreF16TileImpl);
HWY_EXPORT(AccumulateF16RowsImpl);

void SoftmaxFold(float* s, size_t n_q, size_t ld, size_t n_rows, float* m, float* l, float* o, size_t hd) {
  HWY_DYNAMIC_DISPATCH(SoftmaxFoldImpl)(s, n_q, ld, n_rows, m, l, o, hd);
}

void SoftmaxFoldEach(float* s, size_t n_q, size_t ld, size_t n_rows, float* m, float* l, float* o, size_t hd) {
  HWY_DYNAMIC_DISPATCH(SoftmaxFoldEachImpl)(s, n_q, ld, n_rows, m, l, o, hd);
}

void SoftmaxFoldRef(float* s, size_t n_q, size_t ld, size_t n_rows, float* m, float* l, float* o, size_t hd) {
  for (size_t i = 0; i < n_q; ++i) {
    float* row = s + i * ld;
    float mb = -INFINITY;
    for (size_t j = 0; j < n_rows; ++j) mb = std::max(mb, row[j]);
    const float m_new = std::max(m[i], mb);
    if (m_new == -INFINITY) {
      std::fill(row, row + ld, 0.0f);
      continue;
    }
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

void ScoreF16Tile(const float* q, size_t n_q, size_t hd, const uint16_t* kt, float* s, size_t ld, float* scratch) {
  HWY_DYNAMIC_DISPATCH(ScoreF16TileImpl)(q, n_q, hd, kt, s, ld, scratch);
}

void AccumulateF16Rows(const float* p, size_t n_q, size_t ld, const uint16_t* v, size_t stride, size_t n_rows,
                       float* o, size_t hd) {
  HWY_DYNAMIC_DISPATCH(AccumulateF16RowsImpl)(p, n_q, ld, v, stride, n_rows, o, hd);
}

void AttendF16Ranges(const float* q, size_t n_q, const uint32_t* first, const uint32_t* end, const uint16_t* kt,
                     size_t kt_stride, const uint16_t* v, size_t v_stride, size_t hd, AttendScratch& sc, float* out,
                     size_t out_stride) {
  constexpr size_t ld = kAttendRows;
  sc.m.assign(n_q, -INFINITY);
  sc.l.assign(n_q, 0.0f);
  sc.o.assign(n_q * hd, 0.0f);
  sc.s.resize(n_q * ld);
  sc.kt.resize(hd * ld);
  uint32_t lo = UINT32_MAX, hi = 0;
  for (size_t i = 0; i < n_q; ++i) {
    lo = std::min(lo, first[i]);
    hi = std::max(hi, end[i]);
  }
  for (size_t t = lo / ld; t * ld < hi; ++t) {
    const size_t r0 = t * ld, nr = std::min<size_t>(ld, hi - r0);
    ScoreF16Tile(q, n_q, hd, kt + t * kt_stride, sc.s.data(), ld, sc.kt.data());
    for (size_t i = 0; i < n_q; ++i) {  // rows query i does not see (a causal tail, a window's head)
      float* si = sc.s.data() + i * ld;
      for (size_t j = 0; j < nr; ++j)
        if (r0 + j < first[i] || r0 + j >= end[i]) si[j] = -INFINITY;
    }
    SoftmaxFold(sc.s.data(), n_q, ld, nr, sc.m.data(), sc.l.data(), sc.o.data(), hd);
    AccumulateF16Rows(sc.s.data(), n_q, ld, v + r0 * v_stride, v_stride, nr, sc.o.data(), hd);
  }
  for (size_t i = 0; i < n_q; ++i) {
    const float inv = sc.l[i] > 0 ? 1.0f / sc.l[i] : 0.0f;
    for (size_t c = 0; c < hd; ++c) out[i * out_stride + c] = sc.o[i * hd + c] * inv;
  }
}

}  // namespace chorus
#endif  // HWY_ONCE
