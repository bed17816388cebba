// Horizontal reductions of 16 AVX-512 float vectors at once (the AVX3 / AVX3_DL targets): the blocks'
// absolute maxima and code sums of the activation quantizer (int8_x86-inl.h), the block
// maxima and sums of 16 queries' score rows in the softmax fold, the weight maxima of the integer
// value kernel.

// Per-target include guard (the Highway convention for -inl.h files).
#if defined(CHORUS_OPS_REDUCE16_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CHORUS_OPS_REDUCE16_INL_H_
#undef CHORUS_OPS_REDUCE16_INL_H_
#else
#define CHORUS_OPS_REDUCE16_INL_H_
#endif

#include <hwy/highway.h>
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace chorus {
namespace HWY_NAMESPACE {

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// GCC's _mm512_reduce_add_ps / _max_ps tree (lanes i and i + 8, then i and i + 4, i and i + 2, i and
// i + 1) over 16 vectors at once, two shuffles and one op per pair of vectors per level instead of a
// serial chain per vector: lane 4k + j of the result reduces v[4j + k] (Reduce16Slot), bit for bit as
// the one-vector reduction (the same pairs in the same order; the op commutes).
template <class Op>
HWY_INLINE __m512 Reduce16(const __m512* v, const Op& op) {
  __m512 r[8], s[4], t[2];
#pragma GCC unroll 8
  for (int a = 0; a < 8; ++a)
    r[a] = op(_mm512_shuffle_f32x4(v[2 * a], v[2 * a + 1], _MM_SHUFFLE(1, 0, 1, 0)),
              _mm512_shuffle_f32x4(v[2 * a], v[2 * a + 1], _MM_SHUFFLE(3, 2, 3, 2)));
#pragma GCC unroll 4
  for (int b = 0; b < 4; ++b)
    s[b] = op(_mm512_shuffle_f32x4(r[2 * b], r[2 * b + 1], _MM_SHUFFLE(2, 0, 2, 0)),
              _mm512_shuffle_f32x4(r[2 * b], r[2 * b + 1], _MM_SHUFFLE(3, 1, 3, 1)));
#pragma GCC unroll 2
  for (int c = 0; c < 2; ++c)
    t[c] = op(_mm512_shuffle_ps(s[2 * c], s[2 * c + 1], _MM_SHUFFLE(1, 0, 1, 0)),
              _mm512_shuffle_ps(s[2 * c], s[2 * c + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  return op(_mm512_shuffle_ps(t[0], t[1], _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(t[0], t[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// The item whose reduction lands in lane `slot` of Reduce16 when v[slot] holds item
// Reduce16Slot(slot): the map is its own inverse.
HWY_INLINE size_t Reduce16Slot(size_t slot) { return (slot % 4) * 4 + slot / 4; }

HWY_INLINE __m512 Max16(const __m512* v) {
  return Reduce16(v, [](__m512 a, __m512 b) { return _mm512_max_ps(a, b); });
}
HWY_INLINE __m512 Sum16(const __m512* v) {
  return Reduce16(v, [](__m512 a, __m512 b) { return _mm512_add_ps(a, b); });
}
#endif

}  // namespace HWY_NAMESPACE
}  // namespace chorus
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
