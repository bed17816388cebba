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

// ---- Decode layout for Q8_0 ("biased2"), per token, blocks padded to a multiple of 2:
//   q   [nb2 * 32] u8 = int8 code + 128 (dpbusd's unsigned operand)
//   dxe [nb2 * 8] f32: dx of block b repeated 8 times
struct Biased2Layout {
  size_t dxe_off, stride;
};
inline Biased2Layout Biased2LayoutOf(size_t cols) {
  const size_t nb2 = (cols / 32 + 1) / 2 * 2;
  Biased2Layout l;
  l.dxe_off = Align64(nb2 * 32);
  l.stride = l.dxe_off + nb2 * 8 * sizeof(float);
  return l;
}

inline void QuantizeBiased2(const float* x, size_t cols, size_t n_tok, uint8_t* out) {
  const Biased2Layout l = Biased2LayoutOf(cols);
  const size_t nb = cols / 32, nb2 = (nb + 1) / 2 * 2;
  for (size_t t = 0; t < n_tok; ++t) {
    uint8_t* base = out + t * l.stride;
    auto* dxe = reinterpret_cast<float*>(base + l.dxe_off);
    alignas(64) int8_t blk[32];
    for (size_t b = 0; b < nb2; ++b) {
      float d = 0.0f;
      if (b < nb) {
        int s0, s1;
        d = Quant32(x + t * cols + 32 * b, blk, &s0, &s1);
      } else {
        std::memset(blk, 0, sizeof(blk));
      }
      for (int i = 0; i < 32; ++i) base[32 * b + i] = static_cast<uint8_t>(blk[i] ^ 0x80);
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
