// AVX3_DL activation quantization: x (n_tok, cols) f32 → int8 per 32 columns, in the layouts the
// VNNI kernels read. Invariant: |x - dx * q| ≤ dx / 2 per element with dx = max|x_block| / 127.
#if defined(CHORUS_OPS_VNNI_ACT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CHORUS_OPS_VNNI_ACT_INL_H_
#undef CHORUS_OPS_VNNI_ACT_INL_H_
#else
#define CHORUS_OPS_VNNI_ACT_INL_H_
#endif

#include <cstring>

#include "hwy/highway.h"
#include "ops/int8_ref.h"  // Align64

HWY_BEFORE_NAMESPACE();
#if HWY_TARGET == HWY_AVX3_DL
#pragma GCC target("avx512vnni")
#include <immintrin.h>

namespace chorus {
namespace HWY_NAMESPACE {
namespace mm {  // matmul internals (names private to these kernels)

using ops_internal::Align64;

// One block of 32: q (32 int8, round to nearest even), returns dx; sums of the two 16-halves.
HWY_INLINE float Quant32(const float* x, int8_t* q, int* sum0, int* sum1) {
  const __m512 a = _mm512_loadu_ps(x), b = _mm512_loadu_ps(x + 16);
  const float mx = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
  const float id = mx > 0.0f ? 127.0f / mx : 0.0f;
  const __m512 vid = _mm512_set1_ps(id);
  const __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, vid));
  const __m512i qb = _mm512_cvtps_epi32(_mm512_mul_ps(b, vid));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtsepi32_epi8(qa));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtsepi32_epi8(qb));
  *sum0 = _mm512_reduce_add_epi32(qa);
  *sum1 = _mm512_reduce_add_epi32(qb);
  return mx / 127.0f;
}

// ---- Decode layout for Q8_0 ("signed2"), per token, blocks padded to a multiple of 2:
//   q     [nb2 * 32] int8 codes (dpbusd's signed operand; the weights are the unsigned one, w + 128)
//   ncorr [nb2 * 8] i32 at ncorr_off: −128 × the sum of the 4 codes of each 4-column group (lane order
//         of one pair of blocks: 8 groups of block 2p, then 8 of block 2p + 1), the accumulator's start,
//         so that dpbusd(ncorr, w + 128, q) = Σ w · q per group exactly
//   dxe   [nb2 * 8] f32 at dxe_off: dx of block b repeated 8 times
struct Signed2Layout {
  size_t ncorr_off, dxe_off, stride;
};
inline Signed2Layout Signed2LayoutOf(size_t cols) {
  const size_t nb2 = (cols / 32 + 1) / 2 * 2;
  Signed2Layout l;
  l.ncorr_off = Align64(nb2 * 32);
  l.dxe_off = l.ncorr_off + nb2 * 8 * sizeof(int32_t);
  l.stride = l.dxe_off + nb2 * 8 * sizeof(float);
  return l;
}

inline void QuantizeSigned2(const float* x, size_t cols, size_t n_tok, uint8_t* out) {
  const Signed2Layout l = Signed2LayoutOf(cols);
  const size_t nb = cols / 32, nb2 = (nb + 1) / 2 * 2;
  for (size_t t = 0; t < n_tok; ++t) {
    uint8_t* base = out + t * l.stride;
    auto* ncorr = reinterpret_cast<int32_t*>(base + l.ncorr_off);
    auto* dxe = reinterpret_cast<float*>(base + l.dxe_off);
    for (size_t b = 0; b < nb2; ++b) {
      auto* blk = reinterpret_cast<int8_t*>(base + 32 * b);
      float d = 0.0f;
      if (b < nb) {
        int s0, s1;
        d = Quant32(x + t * cols + 32 * b, blk, &s0, &s1);
      } else {
        std::memset(blk, 0, 32);
      }
      for (int g = 0; g < 8; ++g) ncorr[8 * b + g] = -128 * (blk[4 * g] + blk[4 * g + 1] + blk[4 * g + 2] + blk[4 * g + 3]);
      for (int i = 0; i < 8; ++i) dxe[8 * b + i] = d;
    }
  }
}

}  // namespace mm
}  // namespace HWY_NAMESPACE
}  // namespace chorus
#endif  // HWY_TARGET == HWY_AVX3_DL
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
