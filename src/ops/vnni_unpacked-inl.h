// AVX3_DL decode for the types without a dedicated stream kernel (K-quants, Q5_0, Q5_1): each row
// is unpacked (SIMD for the K-quants) into L1 scratch as natural-order u8 codes + per-sub-block
// (dw, m), then dotted with natural-order int8 x, 16 sub-blocks per integer tree reduction.
#if defined(CHORUS_OPS_VNNI_UNPACKED_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CHORUS_OPS_VNNI_UNPACKED_INL_H_
#undef CHORUS_OPS_VNNI_UNPACKED_INL_H_
#else
#define CHORUS_OPS_VNNI_UNPACKED_INL_H_
#endif

#include <cstring>

#include "hwy/highway.h"
#include "ops/matmul_internal.h"  // Scratch
#include "ops/quant_blocks.h"     // Block*, KScaleMin
#include "ops/unpack-inl.h"       // UnpackBlocks
#include "ops/vnni_act-inl.h"     // Quant32
#include "ops/vnni_gemv-inl.h"    // BlockSums16, ForRows16

HWY_BEFORE_NAMESPACE();
#if HWY_TARGET == HWY_AVX3_DL
#pragma GCC target("avx512vnni")
#include <immintrin.h>

namespace chorus {
namespace HWY_NAMESPACE {
namespace mm {  // matmul internals (names private to these kernels)

// K-quant super-blocks → 256 natural-order codes + 8 (Q4_K/Q5_K) or 16 (Q6_K) (dw, m) pairs.
inline void UnpackKQuantSimd(GgmlType type, const uint8_t* src, size_t nb, uint8_t* q, float* dw, float* m) {
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  if (type == GgmlType::kQ6_K) {
    alignas(64) uint16_t c01[32], c23[32];
    for (int i = 0; i < 32; ++i) c01[i] = i < 16 ? 0 : 2, c23[i] = i < 16 ? 4 : 6;
    const __m512i cnt01 = _mm512_load_si512(c01), cnt23 = _mm512_load_si512(c23), three = _mm512_set1_epi8(3);
    for (size_t i = 0; i < nb; ++i, src += sizeof(BlockQ6_K), q += kQkK, dw += 16, m += 16) {
      for (int h = 0; h < 2; ++h) {
        const __m512i l = _mm512_loadu_si512(src + 64 * h);
        const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 128 + 32 * h)));
        auto high = [&](__m512i cnt) { return _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(hb, cnt), three), 4); };
        _mm512_storeu_si512(q + 128 * h, _mm512_or_si512(_mm512_and_si512(l, low4), high(cnt01)));
        _mm512_storeu_si512(q + 128 * h + 64, _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), low4), high(cnt23)));
      }
      uint16_t hd;
      std::memcpy(&hd, src + offsetof(BlockQ6_K, d), 2);
      const float d = _cvtsh_ss(hd);
      const int8_t* sc = reinterpret_cast<const int8_t*>(src + offsetof(BlockQ6_K, scales));
      for (int j = 0; j < 16; ++j) dw[j] = d * sc[j], m[j] = -32.0f * dw[j];
    }
    return;
  }
  const bool five = type == GgmlType::kQ5_K;
  const size_t bytes = five ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
  const size_t qs_off = five ? offsetof(BlockQ5_K, qs) : offsetof(BlockQ4_K, qs);
  const __m512i sixteen = _mm512_set1_epi8(16);
  for (size_t i = 0; i < nb; ++i, src += bytes, q += kQkK, dw += 8, m += 8) {
    const __m256i qh = five ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + offsetof(BlockQ5_K, qh)))
                            : _mm256_setzero_si256();
    for (int c = 0; c < 4; c += 2) {  // chunks c, c + 1: sub-blocks 2c .. 2c + 3
      const __m512i v = _mm512_loadu_si512(src + qs_off + 32 * c);
      const __m512i lo = _mm512_and_si512(v, low4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
      __m512i a = _mm512_shuffle_i64x2(lo, hi, 0x44), b = _mm512_shuffle_i64x2(lo, hi, 0xEE);
      if (five) {
        auto bits = [&](int j) {
          return static_cast<uint64_t>(_mm256_test_epi8_mask(qh, _mm256_set1_epi8(static_cast<char>(1 << j))));
        };
        a = _mm512_mask_add_epi8(a, bits(2 * c) | bits(2 * c + 1) << 32, a, sixteen);
        b = _mm512_mask_add_epi8(b, bits(2 * c + 2) | bits(2 * c + 3) << 32, b, sixteen);
      }
      _mm512_storeu_si512(q + 64 * c, a);
      _mm512_storeu_si512(q + 64 * c + 64, b);
    }
    uint16_t h[2];
    std::memcpy(h, src, 4);
    const float d = _cvtsh_ss(h[0]), dmin = _cvtsh_ss(h[1]);
    for (int j = 0; j < 8; ++j) {
      int sc, mn;
      KScaleMin(src + 4, j, &sc, &mn);
      dw[j] = d * sc;
      m[j] = -(dmin * mn);
    }
  }
}

// ---- Natural activation layout, per token, padded to chunks of 16 sub-blocks:
//   q [nchunk * 16 * sub] int8, dxs [nchunk * 16] f32 (dx of each sub-block), s [nchunk * 16] f32.
struct NaturalLayout {
  size_t chunks, dxs_off, s_off, stride;
};
inline NaturalLayout NaturalLayoutOf(size_t cols, int sub) {
  NaturalLayout l;
  l.chunks = (cols / sub + 15) / 16;
  l.dxs_off = l.chunks * 16 * sub;
  l.s_off = l.dxs_off + l.chunks * 16 * sizeof(float);
  l.stride = l.s_off + l.chunks * 16 * sizeof(float);
  return l;
}

inline void QuantizeNatural(const float* x, size_t cols, size_t n_tok, int sub, uint8_t* out) {
  const NaturalLayout l = NaturalLayoutOf(cols, sub);
  for (size_t t = 0; t < n_tok; ++t) {
    uint8_t* base = out + t * l.stride;
    std::memset(base, 0, l.stride);
    auto* q = reinterpret_cast<int8_t*>(base);
    auto* dxs = reinterpret_cast<float*>(base + l.dxs_off);
    auto* s = reinterpret_cast<float*>(base + l.s_off);
    for (size_t b = 0; b < cols / 32; ++b) {
      int s0, s1;
      const float d = Quant32(x + t * cols + 32 * b, q + 32 * b, &s0, &s1);
      if (sub == 32) {
        dxs[b] = d, s[b] = d * static_cast<float>(s0 + s1);
      } else {
        dxs[2 * b] = dxs[2 * b + 1] = d;
        s[2 * b] = d * static_cast<float>(s0), s[2 * b + 1] = d * static_cast<float>(s1);
      }
    }
  }
}

HWY_INLINE __m512i PairSums(__m512i a, __m512i b) {
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  return _mm512_add_epi32(_mm512_permutex2var_epi32(a, even, b), _mm512_permutex2var_epi32(a, odd, b));
}

// Rows [r0, r1) of w (any quantized type) × kT tokens in the natural layout.
template <int kSub, int kT>
void UnpackedRows(const WeightView& w, const uint8_t* act, size_t ld_act, float* y, size_t r0, size_t r1) {
  const NaturalLayout l = NaturalLayoutOf(w.cols, kSub);
  const size_t padded = l.chunks * 16 * kSub, nb = w.cols / GgmlTraitsOf(w.type).block_elems;
  uint8_t* scratch = ops_internal::TileScratch().Get(padded + 2 * l.chunks * 16 * sizeof(float));
  uint8_t* q = scratch;
  float* dw = reinterpret_cast<float*>(scratch + padded);
  float* m = dw + l.chunks * 16;
  std::memset(scratch, 0, padded + 2 * l.chunks * 16 * sizeof(float));  // pads stay zero
  const bool kquant = w.type == GgmlType::kQ4_K || w.type == GgmlType::kQ5_K || w.type == GgmlType::kQ6_K;
  ForRows16<kT>(r0, r1, y, w.rows, [&](size_t r, __m512* out) {
    const uint8_t* row = w.data + r * w.row_bytes;
    if (kquant) {
      UnpackKQuantSimd(w.type, row, nb, q, dw, m);
    } else {
      UnpackBlocks(w.type, row, nb, q, dw, m);
    }
#pragma GCC unroll 4
    for (int t = 0; t < kT; ++t) {
      const uint8_t* xa = act + t * ld_act;
      __m512 facc = _mm512_setzero_ps();
      for (size_t c = 0; c < l.chunks; ++c) {
        const uint8_t* qc = q + c * 16 * kSub;
        const uint8_t* xc = xa + c * 16 * kSub;
        __m512i acc[4];
        if (kSub == 32) {
          for (int g = 0; g < 4; ++g) {
            const __m512i a = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_load_si512(qc + 128 * g),
                                                  _mm512_load_si512(xc + 128 * g));
            const __m512i b = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_load_si512(qc + 128 * g + 64),
                                                  _mm512_load_si512(xc + 128 * g + 64));
            acc[g] = PairSums(a, b);
          }
        } else {
          for (int g = 0; g < 4; ++g)
            acc[g] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_load_si512(qc + 64 * g),
                                         _mm512_load_si512(xc + 64 * g));
        }
        const __m512 dx16 = _mm512_load_ps(reinterpret_cast<const float*>(xa + l.dxs_off) + 16 * c);
        const __m512 s16 = _mm512_load_ps(reinterpret_cast<const float*>(xa + l.s_off) + 16 * c);
        facc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(BlockSums16(acc)), _mm512_mul_ps(_mm512_load_ps(dw + 16 * c), dx16), facc);
        facc = _mm512_fmadd_ps(_mm512_load_ps(m + 16 * c), s16, facc);
      }
      out[t] = facc;
    }
  });
}

}  // namespace mm
}  // namespace HWY_NAMESPACE
}  // namespace chorus
#endif  // HWY_TARGET == HWY_AVX3_DL
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
