// FastWalshHadamard on the best target (Highway dispatch): on AVX-512, 16 floats per vector, the
// butterflies of distance 1, 2, 4 and 8 by a lane permutation and one masked add/sub, the longer ones
// across vectors. Every butterfly is the scalar one's (a + b, a − b on the same operands; the stages
// in the same order), so the result is FastWalshHadamardRef's bit for bit; other targets run that.
#include "kv/hadamard.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kv/hadamard_simd.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace chorus {
namespace HWY_NAMESPACE {

void FastWalshHadamardImpl(float* x, size_t d) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  if (d % 16 == 0) {
    for (size_t i = 0; i < d; i += 16) {
      __m512 v = _mm512_loadu_ps(x + i);
      // lane j meets lane j ^ h: lanes without bit h get v + p (x[j] + x[j + h]), lanes with it p − v
      // (x[j − h] − x[j])
      __m512 p = _mm512_permute_ps(v, 0xB1);  // h = 1: lanes 1 0 3 2 in each 128-bit block
      v = _mm512_mask_sub_ps(_mm512_add_ps(v, p), 0xAAAA, p, v);
      p = _mm512_permute_ps(v, 0x4E);  // h = 2: lanes 2 3 0 1
      v = _mm512_mask_sub_ps(_mm512_add_ps(v, p), 0xCCCC, p, v);
      p = _mm512_shuffle_f32x4(v, v, 0xB1);  // h = 4: 128-bit blocks 1 0 3 2
      v = _mm512_mask_sub_ps(_mm512_add_ps(v, p), 0xF0F0, p, v);
      p = _mm512_shuffle_f32x4(v, v, 0x4E);  // h = 8: blocks 2 3 0 1
      v = _mm512_mask_sub_ps(_mm512_add_ps(v, p), 0xFF00, p, v);
      _mm512_storeu_ps(x + i, v);
    }
    for (size_t h = 16; h < d; h *= 2)
      for (size_t i = 0; i < d; i += 2 * h)
        for (size_t j = i; j < i + h; j += 16) {
          const __m512 a = _mm512_loadu_ps(x + j), b = _mm512_loadu_ps(x + j + h);
          _mm512_storeu_ps(x + j, _mm512_add_ps(a, b));
          _mm512_storeu_ps(x + j + h, _mm512_sub_ps(a, b));
        }
    return;
  }
#endif
  FastWalshHadamardRef(x, d);
}

}  // namespace HWY_NAMESPACE
}  // namespace chorus
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace chorus {
HWY_EXPORT(FastWalshHadamardImpl);

void FastWalshHadamard(float* x, size_t d) { HWY_DYNAMIC_DISPATCH(FastWalshHadamardImpl)(x, d); }

}  // namespace chorus
#endif
