// AVX3_DL decode kernels (few tokens): Q4_0 / Q4_1 / Q8_0 rows read straight from GGML blocks.
// Invariant: loads never touch bytes past the row's last block (tails use fault-free masked loads).
#if defined(CHORUS_OPS_VNNI_GEMV_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CHORUS_OPS_VNNI_GEMV_INL_H_
#undef CHORUS_OPS_VNNI_GEMV_INL_H_
#else
#define CHORUS_OPS_VNNI_GEMV_INL_H_
#endif

#include "hwy/highway.h"
#include "ops/vnni_act-inl.h"  // Split4Layout, Biased2Layout

HWY_BEFORE_NAMESPACE();
#if HWY_TARGET == HWY_AVX3_DL
#pragma GCC target("avx512vnni")
#include <immintrin.h>

namespace chorus {
namespace HWY_NAMESPACE {

// Mask of the first n (≤ 64) bytes.
HWY_INLINE __mmask64 FirstBytes(size_t n) {
  return n >= 64 ? ~__mmask64{0} : ((__mmask64{1} << n) - 1);
}

// Bytes [p, p + 64) and [p + 64, p + 128) of which only the first `valid` may be read.
HWY_INLINE void LoadPair(const uint8_t* p, size_t valid, __m512i* a, __m512i* b) {
  *a = valid >= 64 ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi8(FirstBytes(valid), p);
  *b = valid > 64 ? _mm512_maskz_loadu_epi8(FirstBytes(valid - 64), p + 64) : _mm512_setzero_si512();
}

// Q4_0 (kBS 18) / Q4_1 (kBS 20): 4 blocks per step. x in the split4 layout, so the low nibbles of
// the 4 blocks meet the first 16 codes of each block and the high nibbles the last 16.
template <int kBS, bool kHasMin, int kT>
void Q4Rows(const uint8_t* w, size_t row_bytes, size_t nb, size_t r0, size_t r1,
            const uint8_t* act, size_t ld_act, size_t cols, float* y, size_t ldy) {
  constexpr int kQsOff = kHasMin ? 4 : 2;
  constexpr size_t kGroup = 4 * kBS;
  alignas(64) uint8_t idx_q[64];
  alignas(64) uint16_t idx_dm[32];
  for (int i = 0; i < 64; ++i) idx_q[i] = static_cast<uint8_t>((i / 16) * kBS + kQsOff + i % 16);
  for (int i = 0; i < 32; ++i)
    idx_dm[i] = static_cast<uint16_t>(i < 16 ? (i / 4) * kBS / 2 : ((i - 16) / 4) * kBS / 2 + 1);
  const __m512i vidx_q = _mm512_load_si512(idx_q), vidx_dm = _mm512_load_si512(idx_dm);
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const Split4Layout l = Split4LayoutOf(cols);
  const size_t ng = (nb + 3) / 4, used = nb * kBS;
  for (size_t r = r0; r < r1; ++r) {
    const uint8_t* row = w + r * row_bytes;
    __m512 facc[kT], macc[kT];
    for (int t = 0; t < kT; ++t) facc[t] = macc[t] = _mm512_setzero_ps();
    for (size_t g = 0; g < ng; ++g) {
      const size_t off = g * kGroup;
      __m512i a, b;
      LoadPair(row + off, used - off < kGroup ? used - off : kGroup, &a, &b);
      const __m512i q = _mm512_permutex2var_epi8(a, vidx_q, b);
      const __m512i lo = _mm512_and_si512(q, low4);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), low4);
      const __m512i dm = _mm512_permutexvar_epi16(vidx_dm, a);
      const __m512 dw = _mm512_cvtph_ps(_mm512_castsi512_si256(dm));
      const __m512 mv = kHasMin ? _mm512_cvtph_ps(_mm512_extracti64x4_epi64(dm, 1))
                                : _mm512_mul_ps(dw, _mm512_set1_ps(-8.0f));
      for (int t = 0; t < kT; ++t) {
        const uint8_t* xa = act + t * ld_act;
        const uint8_t* xq = xa + g * 128;
        const float* dxe = reinterpret_cast<const float*>(xa + l.dxe_off) + g * 16;
        const float* s4 = reinterpret_cast<const float*>(xa + l.s4_off) + g * 16;
        __m512i acc = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_load_si512(xq));
        acc = _mm512_dpbusd_epi32(acc, hi, _mm512_load_si512(xq + 64));
        const __m512 sc = _mm512_mul_ps(dw, _mm512_load_ps(dxe));
        facc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), sc, facc[t]);
        macc[t] = _mm512_fmadd_ps(mv, _mm512_load_ps(s4), macc[t]);
      }
    }
    for (int t = 0; t < kT; ++t) y[t * ldy + r] = _mm512_reduce_add_ps(_mm512_add_ps(facc[t], macc[t]));
  }
}

// Q8_0: 2 blocks per step; x biased by +128 (unsigned operand), the bias removed per block with
// a second dpbusd of 128 × w that all tokens share.
template <int kT>
void Q8Rows(const uint8_t* w, size_t row_bytes, size_t nb, size_t r0, size_t r1,
            const uint8_t* act, size_t ld_act, size_t cols, float* y, size_t ldy) {
  constexpr size_t kBS = 34, kPair = 2 * kBS;
  alignas(64) uint8_t idx_q[64];
  alignas(64) uint16_t idx_d[32];
  for (int i = 0; i < 64; ++i) idx_q[i] = static_cast<uint8_t>((i / 32) * kBS + 2 + i % 32);
  for (int i = 0; i < 32; ++i) idx_d[i] = static_cast<uint16_t>(((i / 8) & 1) * kBS / 2);
  const __m512i vidx_q = _mm512_load_si512(idx_q), vidx_d = _mm512_load_si512(idx_d);
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  const Biased2Layout l = Biased2LayoutOf(cols);
  const size_t np = (nb + 1) / 2, used = nb * kBS;
  for (size_t r = r0; r < r1; ++r) {
    const uint8_t* row = w + r * row_bytes;
    __m512 facc[kT];
    for (int t = 0; t < kT; ++t) facc[t] = _mm512_setzero_ps();
    for (size_t p = 0; p < np; ++p) {
      const size_t off = p * kPair;
      __m512i a, b;
      LoadPair(row + off, used - off < kPair ? used - off : kPair, &a, &b);
      const __m512i q = _mm512_permutex2var_epi8(a, vidx_q, b);
      const __m512 dw = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(vidx_d, a)));
      const __m512i corr = _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, q);
      for (int t = 0; t < kT; ++t) {
        const uint8_t* xa = act + t * ld_act;
        const float* dxe = reinterpret_cast<const float*>(xa + l.dxe_off) + p * 16;
        __m512i acc = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_load_si512(xa + p * 64), q);
        acc = _mm512_sub_epi32(acc, corr);
        facc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(dw, _mm512_load_ps(dxe)), facc[t]);
      }
    }
    for (int t = 0; t < kT; ++t) y[t * ldy + r] = _mm512_reduce_add_ps(facc[t]);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace chorus
#endif  // HWY_TARGET == HWY_AVX3_DL
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
