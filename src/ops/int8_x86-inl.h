// x86 int8 kernels for the AVX2, AVX3 and AVX3_DL targets: eight weight rows in the eight 32-bit lanes
// (AVX3_DL runs them for the types its own 512-bit VNNI kernels unpack per row: matmul_kernels.cc).
// A panel of 8 rows is packed per call (codes [cols/4][8 rows][4 bytes], dw/m [sub-block][8]);
// every 4 bytes of a token's int8 activations are broadcast against it, so each lane ends a
// sub-block holding that row's exact integer dot product — the arithmetic of int8_ref.h, in the
// same order, whatever the number of tokens (bit-identical to the scalar twin and across n_tok).
// The products are vpmaddubsw + vpmaddwd (AVX2), or vpdpbusd on CPUs with AVX-VNNI (same sums).
#if defined(CHORUS_OPS_INT8_X86_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CHORUS_OPS_INT8_X86_INL_H_
#undef CHORUS_OPS_INT8_X86_INL_H_
#else
#define CHORUS_OPS_INT8_X86_INL_H_
#endif

#include <algorithm>
#include <cstring>

#include "hwy/highway.h"
#include "ops/int8_ref.h"         // Int8ActLayout, Int8SubOf
#include "ops/matmul_internal.h"  // Scratch, JobList, TokenPasses
#include "ops/reduce16-inl.h"     // Max16, Sum16, Reduce16Slot
#include "ops/unpack-inl.h"       // UnpackBlocks

HWY_BEFORE_NAMESPACE();
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#include <immintrin.h>

namespace chorus {
namespace HWY_NAMESPACE {
namespace mm {  // matmul internals (names private to these kernels)
using ops_internal::Align64;
using ops_internal::Int8ActLayout;
using ops_internal::Int8ActLayoutOf;

inline constexpr size_t kPanelRows8 = 8;

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// Blocks [b0, b0 + 16) of one token (sub 32): their absolute maxima reduced together (Max16), 127 / amax
// and amax / 127 by one vector division each, their code sums by Sum16 (integers ≤ 32 · 127 in
// magnitude: exact as floats, in any order). Every value is QuantizeActsAvx2's: the max is exact, the
// divisions and products the same IEEE operations, the codes the same round-to-even conversions.
HWY_INLINE void QuantizeActs16Blocks(const float* xt, size_t b0, uint8_t* codes, float* dx, float* s) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
  __m512 m[16];
#pragma GCC unroll 16
  for (size_t slot = 0; slot < 16; ++slot) {
    const float* xb = xt + 32 * (b0 + Reduce16Slot(slot));
    m[slot] = _mm512_max_ps(_mm512_and_ps(_mm512_loadu_ps(xb), abs_mask), _mm512_and_ps(_mm512_loadu_ps(xb + 16), abs_mask));
  }
  const __m512 amax = Max16(m);  // lane j: block b0 + j
  const __mmask16 live = _mm512_cmp_ps_mask(amax, _mm512_setzero_ps(), _CMP_GT_OQ);
  alignas(64) float id[16];
  _mm512_store_ps(id, _mm512_maskz_div_ps(live, _mm512_set1_ps(127.0f), amax));
  const __m512 d = _mm512_div_ps(amax, _mm512_set1_ps(127.0f));
  _mm512_storeu_ps(dx + b0, d);
  __m512 sums[16];
#pragma GCC unroll 16
  for (size_t slot = 0; slot < 16; ++slot) {
    const size_t j = Reduce16Slot(slot);
    const float* xb = xt + 32 * (b0 + j);
    const __m512 vid = _mm512_set1_ps(id[j]);
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb), vid));  // half to even
    const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + 16), vid));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + 32 * (b0 + j)), _mm512_cvtepi32_epi8(q0));  // |q| ≤ 127
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + 32 * (b0 + j) + 16), _mm512_cvtepi32_epi8(q1));
    sums[slot] = _mm512_cvtepi32_ps(_mm512_add_epi32(q0, q1));
  }
  _mm512_storeu_ps(s + b0, _mm512_mul_ps(d, Sum16(sums)));
}
#endif

// ---- Activations: x (n_tok, cols) → Int8ActLayout, exactly QuantizeActsRef.
inline void QuantizeActsAvx2(const float* x, size_t cols, size_t n_tok, int sub, uint8_t* act) {
  const Int8ActLayout l = Int8ActLayoutOf(cols, sub);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (size_t t = 0; t < n_tok; ++t) {
    const float* xt = x + t * cols;
    uint8_t* base = act + t * l.stride;
    auto* dx = reinterpret_cast<float*>(base + l.dx_off);
    auto* s = reinterpret_cast<float*>(base + l.s_off);
    size_t b = 0;
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
    if (sub == 32)
      for (; b + 16 <= cols / 32; b += 16) QuantizeActs16Blocks(xt, b, base, dx, s);
#endif
    for (; b < cols / 32; ++b) {
      __m256 v[4];
      for (int k = 0; k < 4; ++k) v[k] = _mm256_loadu_ps(xt + 32 * b + 8 * k);
      __m256 mx = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v[0], abs_mask), _mm256_and_ps(v[1], abs_mask)),
                                _mm256_max_ps(_mm256_and_ps(v[2], abs_mask), _mm256_and_ps(v[3], abs_mask)));
      __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
      m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
      m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
      const float amax = _mm_cvtss_f32(m4);
      const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
      const __m256 vid = _mm256_set1_ps(id);
      __m256i q[4];
      for (int k = 0; k < 4; ++k) q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], vid));  // half to even
      const __m256i bytes = _mm256_permutevar8x32_epi32(
          _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3])), order);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(base + 32 * b), bytes);
      auto hsum = [](__m256i a) {
        __m128i h = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1));
        return _mm_cvtsi128_si32(h);
      };
      const int s0 = hsum(_mm256_add_epi32(q[0], q[1])), s1 = hsum(_mm256_add_epi32(q[2], q[3]));
      dx[b] = amax / 127.0f;
      if (sub == 32) {
        s[b] = dx[b] * static_cast<float>(s0 + s1);
      } else {
        s[2 * b] = dx[b] * static_cast<float>(s0);
        s[2 * b + 1] = dx[b] * static_cast<float>(s1);
      }
    }
  }
}

// QuantizeActsAvx2 for n_tok tokens into act (Int8ActLayoutOf(cols, sub).stride apart): from 32 tokens on,
// 8-token ranges over the pool.
inline void QuantizeActsPool(const float* x, size_t cols, size_t n_tok, int sub, uint8_t* act, ThreadPool& pool) {
  if (n_tok < 32) return QuantizeActsAvx2(x, cols, n_tok, sub, act);
  const size_t stride = Int8ActLayoutOf(cols, sub).stride;
  ops_internal::ParallelRanges(pool, n_tok, 8, [&](size_t t0, size_t t1) {
    QuantizeActsAvx2(x + t0 * cols, cols, t1 - t0, sub, act + t0 * stride);
  });
}

// ---- Panels: 8 rows (lanes past the matrix repeat its last row; their results are never stored).
//   codes [cols / 4][8][4] (32-byte vectors), dw [cols / sub][8] f32, m [cols / sub][8] f32.
struct Panel8 {
  uint8_t* codes;
  float* dw;
  float* m;
};
inline size_t Panel8Bytes(size_t cols, int sub) { return Align64(cols * 8) + 2 * (cols / sub) * 8 * sizeof(float); }
// Scratch for unpacking the generic types' rows before the transpose.
inline size_t StageBytes(size_t cols, int sub) { return 8 * Align64(cols) + 2 * 8 * (cols / sub) * sizeof(float); }
inline Panel8 Panel8At(uint8_t* p, size_t cols, int sub) {
  Panel8 pn;
  pn.codes = p;
  pn.dw = reinterpret_cast<float*>(p + Align64(cols * 8));
  pn.m = pn.dw + (cols / sub) * 8;
  return pn;
}

// out[g] lane i = dword g of r[i] (an 8 × 8 transpose of 32-bit elements).
HWY_INLINE void Transpose8x8(const __m256i* r, __m256i* out) {
  __m256i t[8], u[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
  }
#pragma GCC unroll 8
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
#pragma GCC unroll 8
  for (int g = 0; g < 4; ++g) {
    out[g] = _mm256_permute2x128_si256(u[g], u[4 + g], 0x20);
    out[4 + g] = _mm256_permute2x128_si256(u[g], u[4 + g], 0x31);
  }
}

// out[j] lane i = float j of r[i] (Transpose8x8 of 8 rows of float bits).
HWY_INLINE void TransposeFloats8x8(const __m256i* r, __m256* out) {
  __m256i t[8];
  Transpose8x8(r, t);
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) out[j] = _mm256_castsi256_ps(t[j]);
}

// The f16 at byte `off` of each of the 8 rows, as 8 floats.
// (Inserted lane by lane: eight 2-byte stores read back as one vector would stall store forwarding.)
HWY_INLINE __m256 Halves8(const uint8_t* const* rp, size_t off) {
  auto at = [&](int i) {
    uint16_t h;
    std::memcpy(&h, rp[i] + off, 2);
    return static_cast<int>(h);
  };
  __m128i v = _mm_cvtsi32_si128(at(0));
  v = _mm_insert_epi16(v, at(1), 1);
  v = _mm_insert_epi16(v, at(2), 2);
  v = _mm_insert_epi16(v, at(3), 3);
  v = _mm_insert_epi16(v, at(4), 4);
  v = _mm_insert_epi16(v, at(5), 5);
  v = _mm_insert_epi16(v, at(6), 6);
  v = _mm_insert_epi16(v, at(7), 7);
  return _mm256_cvtph_ps(v);
}

// Lane i = the 4 bytes at byte `off` of row i (Q5_0's qh words, Q4_1's (d, m) pairs of 8 rows).
HWY_INLINE __m256i Words8(const uint8_t* const* rp, size_t off) {
  auto at = [&](int i) {
    int32_t v;
    std::memcpy(&v, rp[i] + off, 4);
    return v;
  };
  __m128i a = _mm_cvtsi32_si128(at(0)), b = _mm_cvtsi32_si128(at(4));
  a = _mm_insert_epi32(a, at(1), 1);
  b = _mm_insert_epi32(b, at(5), 1);
  a = _mm_insert_epi32(a, at(2), 2);
  b = _mm_insert_epi32(b, at(6), 2);
  a = _mm_insert_epi32(a, at(3), 3);
  b = _mm_insert_epi32(b, at(7), 3);
  return _mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1);
}

// The two f16 at byte `off` of each of the 8 rows (Q4_1's d and m), as 8 + 8 floats: one 4-byte
// load per row instead of two 2-byte ones (the same bits as Halves8(rp, off), Halves8(rp, off + 2)).
HWY_INLINE void HalfPairs8(const uint8_t* const* rp, size_t off, __m256* first, __m256* second) {
  const __m256i split = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,  //
                                         0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
  // [first 0-3 | second 0-3 | first 4-7 | second 4-7] → [first 0-7 | second 0-7]
  const __m256i v = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(Words8(rp, off), split), 0xD8);
  *first = _mm256_cvtph_ps(_mm256_castsi256_si128(v));
  *second = _mm256_cvtph_ps(_mm256_extracti128_si256(v, 1));
}

// A panel's rows are read one after the other into `stage` (kCode bytes at byte kOff of every
// kBS-byte block), so the weights stream from memory in address order — the hardware prefetcher
// follows one long stream, which it does not for 8 interleaved rows of a few cache lines each —
// and the transposes then read L1.
inline constexpr size_t kStagePrefetch = 2048;  // bytes ahead in the stream (rows are contiguous)

template <size_t kBS, size_t kOff, size_t kCode>
HWY_INLINE void StageRows(const uint8_t* const* rp, size_t nb, uint8_t* stage) {
  static_assert(kCode == 16 || kCode == 32);
  for (int i = 0; i < 8; ++i) {
    const uint8_t* src = rp[i] + kOff;
    uint8_t* dst = stage + i * nb * kCode;
    for (size_t b = 0; b < nb; ++b) {
      _mm_prefetch(reinterpret_cast<const char*>(src + b * kBS + kStagePrefetch), _MM_HINT_T0);
      if (kCode == 16) {
        _mm_store_si128(reinterpret_cast<__m128i*>(dst + 16 * b),
                        _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + b * kBS)));
      } else {
        _mm256_store_si256(reinterpret_cast<__m256i*>(dst + 32 * b),
                           _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + b * kBS)));
      }
    }
  }
}

// Q8_0: 32 signed codes per block and row, one 8 × 8 transpose per block.
inline void PackQ8(const uint8_t* const* rp, size_t nb, Panel8 pn, uint8_t* stage) {
  StageRows<sizeof(BlockQ8_0), 2, 32>(rp, nb, stage);
  const size_t ld = nb * 32;
  for (size_t b = 0; b < nb; ++b) {
    __m256i r[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) r[i] = _mm256_load_si256(reinterpret_cast<const __m256i*>(stage + i * ld + 32 * b));
    __m256i out[8];
    Transpose8x8(r, out);
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) _mm256_store_si256(reinterpret_cast<__m256i*>(pn.codes + b * 256) + g, out[g]);
    _mm256_store_ps(pn.dw + 8 * b, Halves8(rp, b * sizeof(BlockQ8_0)));
  }
}

// Q6KScales of 8 rows' super-blocks at byte off, transposed: dw[j] lane i = d_i · sc_ij (j < 16).
HWY_INLINE void Q6KScales8(const uint8_t* const* rp, size_t off, __m256* dw) {
  __m256i a[8], b[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    const uint8_t* blk = rp[i] + off;
    uint16_t h;
    std::memcpy(&h, blk + offsetof(BlockQ6_K, d), 2);
    const __m256 d = _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
    const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + offsetof(BlockQ6_K, scales)));
    a[i] = _mm256_castps_si256(_mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))));
    b[i] = _mm256_castps_si256(_mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8)))));
  }
  TransposeFloats8x8(a, dw);
  TransposeFloats8x8(b, dw + 8);
}

// ---- Codes and scales of the types Gemma 3's Q4_K_M file holds most (Q5_0, Q4_K, Q6_K) in AVX2
// registers, for the decode kernels and the panel packing: the same codes (integer bit moves) and
// the same (dw, m) (the same float expressions) as the per-target scalar UnpackBlocks, which the
// other types (Q5_1, Q5_K) keep.
HWY_INLINE __m256i Lo4(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0F)); }
HWY_INLINE __m256i Hi4(__m256i v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F)); }

// Byte j = 0x10 where bit j of qh is set (the 5th bit of element j of a Q5_0 block).
HWY_INLINE __m256i FifthBits(uint32_t qh) {
  const __m256i which = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                         2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)), which);
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// The 32 nibble codes of a 32-element block's 16 bytes at qs, in element order (byte k holds
// elements k, low nibble, and k + 16, high nibble: Q4_0, Q4_1, Q5_0's low 4 bits).
// The 16 bytes in both halves (one broadcast load), the upper half shifted down a nibble: 2 operations.
HWY_INLINE __m256i Nibbles32(const uint8_t* qs) {
  const __m256i v2 = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  return _mm256_and_si256(_mm256_srlv_epi64(v2, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0F));
}

// The 32 codes of the Q5_0 block at blk, in element order. With AVX-512 (BW + VL) qh is itself
// the byte mask of the fifth bits: one masked add instead of FifthBits's five vector operations.
HWY_INLINE __m256i Q5_0Codes(const uint8_t* blk) {
  uint32_t qh;
  std::memcpy(&qh, blk + offsetof(BlockQ5_0, qh), 4);
  const __m256i low = Nibbles32(blk + offsetof(BlockQ5_0, qs));
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  return _mm256_mask_add_epi8(low, _cvtu32_mask32(qh), low, _mm256_set1_epi8(0x10));  // low < 16: + is |
#else
  return _mm256_or_si256(low, FifthBits(qh));
#endif
}

// One 32-element block of kType (Q4_0, Q4_1, Q5_0): its bytes and its codes at blk, in element order.
template <GgmlType kType>
inline constexpr size_t kBlock32Bytes = kType == GgmlType::kQ5_0   ? sizeof(BlockQ5_0)
                                        : kType == GgmlType::kQ4_1 ? sizeof(BlockQ4_1)
                                                                   : sizeof(BlockQ4_0);
template <GgmlType kType>
HWY_INLINE __m256i Block32Codes(const uint8_t* blk) {
  if constexpr (kType == GgmlType::kQ5_0) return Q5_0Codes(blk);
  else if constexpr (kType == GgmlType::kQ4_1) return Nibbles32(blk + offsetof(BlockQ4_1, qs));
  else return Nibbles32(blk + offsetof(BlockQ4_0, qs));
}

// Row i's 8 scales (bytes 0-7) and 8 mins (bytes 8-15) of a Q4_K / Q5_K super-block's scales[12],
// KScaleMin's 6-bit fields moved by 32-bit masks and shifts instead of 16 scalar extractions.
HWY_INLINE __m128i KScaleMin16(const uint8_t* scales) {
  uint32_t u[3];
  std::memcpy(u, scales, 12);
  constexpr uint32_t k6 = 0x3F3F3F3Fu, k4 = 0x0F0F0F0Fu, k2 = 0x03030303u;
  const uint32_t sc_lo = u[0] & k6, mn_lo = u[1] & k6;                  // j < 4
  const uint32_t sc_hi = (u[2] & k4) | (((u[0] >> 6) & k2) << 4);        // j ≥ 4
  const uint32_t mn_hi = ((u[2] >> 4) & k4) | (((u[1] >> 6) & k2) << 4);
  return _mm_setr_epi32(static_cast<int>(sc_lo), static_cast<int>(sc_hi), static_cast<int>(mn_lo),
                        static_cast<int>(mn_hi));
}

// KQuantScales of 8 rows' super-blocks at byte off, transposed: dw[j] lane i = d_i · sc_ij,
// m[j] lane i = −(dmin_i · mn_ij) — the same float expressions (an exact int → float, one product).
HWY_INLINE void KQuantScales8(const uint8_t* const* rp, size_t off, __m256* dw, __m256* m) {
  __m256i a[8], b[8];
  const __m256 neg = _mm256_set1_ps(-0.0f);
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    const uint8_t* blk = rp[i] + off;
    int32_t dd;  // d, dmin: two adjacent halves
    std::memcpy(&dd, blk, 4);
    const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(dd));
    const __m128i sm = KScaleMin16(blk + offsetof(BlockQ4_K, scales));
    const __m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sm));
    const __m256 mn = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8)));
    a[i] = _mm256_castps_si256(_mm256_mul_ps(_mm256_broadcastss_ps(dm), sc));
    b[i] = _mm256_castps_si256(
        _mm256_xor_ps(_mm256_mul_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(dm)), mn), neg));
  }
  TransposeFloats8x8(a, dw);
  TransposeFloats8x8(b, m);
}

// Codes of elements 128 h + 32 k + [0, 32) of the Q6_K super-block at blk (k < 4): the 4 low bits
// from ql, bits (2k, 2k + 1) of qh[32 h + l] as bits 4-5 (16-bit shifts: the bits that cross a byte
// boundary land outside the 0x30 mask).
HWY_INLINE __m256i Q6KCodes(const uint8_t* blk, int h, int k) {
  const __m256i l = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + offsetof(BlockQ6_K, ql) + 64 * h + 32 * (k & 1)));
  const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + offsetof(BlockQ6_K, qh) + 32 * h));
  const __m256i hs = k == 0 ? _mm256_slli_epi16(hb, 4) : k == 1 ? _mm256_slli_epi16(hb, 2) : k == 2 ? hb : _mm256_srli_epi16(hb, 2);
  return _mm256_or_si256(k < 2 ? Lo4(l) : Hi4(l), _mm256_and_si256(hs, _mm256_set1_epi8(0x30)));
}

// Q5_0's fifth bits of panel group g (elements 4g..4g+3) for 8 rows: lane i of qh8 is row i's qh
// word; byte k of lane i of the result = 0x10 where bit 4g + k of it is set (FifthBits, 8 rows at once).
template <int kG>
HWY_INLINE __m256i FifthBitsGroup(__m256i qh8) {
  constexpr char s = kG / 2;  // the qh byte holding bits 4g..4g+3
  const __m256i sel = _mm256_setr_epi8(s, s, s, s, 4 + s, 4 + s, 4 + s, 4 + s, 8 + s, 8 + s, 8 + s, 8 + s, 12 + s,
                                       12 + s, 12 + s, 12 + s, s, s, s, s, 4 + s, 4 + s, 4 + s, 4 + s, 8 + s, 8 + s,
                                       8 + s, 8 + s, 12 + s, 12 + s, 12 + s, 12 + s);
  const __m256i bit = _mm256_set1_epi32(static_cast<int>(0x08040201u << (4 * (kG & 1))));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(qh8, sel), bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// Q4_0 / Q4_1 / Q5_0: the 16 nibble bytes of a block, 4 × 4 bytes per row, transposed before
// splitting: dword g's low nibbles are elements 4g..4g+3, its high nibbles 16+4g..16+4g+3 (Q5_0:
// or'ed with their fifth bits, FifthBitsGroup). (dw, m) as UnpackBlocks: m = −8 dw, the Q4_1 min,
// −16 dw.
template <GgmlType kType>
inline void PackQ4(const uint8_t* const* rp, size_t nb, Panel8 pn, uint8_t* stage) {
  constexpr bool kHasMin = kType == GgmlType::kQ4_1, kFive = kType == GgmlType::kQ5_0;
  constexpr size_t kBS = kBlock32Bytes<kType>;
  constexpr size_t kQs = kFive ? offsetof(BlockQ5_0, qs) : kHasMin ? offsetof(BlockQ4_1, qs) : offsetof(BlockQ4_0, qs);
  StageRows<kBS, kQs, 16>(rp, nb, stage);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256 minus_bias = _mm256_set1_ps(kFive ? -16.0f : -8.0f);
  const size_t ld = nb * 16;
  auto pair = [&](int r, size_t b) {  // [row r | row r + 4] of block b
    return _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(stage + r * ld + 16 * b))),
        _mm_load_si128(reinterpret_cast<const __m128i*>(stage + (r + 4) * ld + 16 * b)), 1);
  };
  for (size_t b = 0; b < nb; ++b) {
    const size_t off = b * kBS;
    const __m256i y0 = pair(0, b), y1 = pair(1, b), y2 = pair(2, b), y3 = pair(3, b);
    const __m256i t0 = _mm256_unpacklo_epi32(y0, y1), t1 = _mm256_unpackhi_epi32(y0, y1);
    const __m256i t2 = _mm256_unpacklo_epi32(y2, y3), t3 = _mm256_unpackhi_epi32(y2, y3);
    const __m256i d[4] = {_mm256_unpacklo_epi64(t0, t2), _mm256_unpackhi_epi64(t0, t2),
                          _mm256_unpacklo_epi64(t1, t3), _mm256_unpackhi_epi64(t1, t3)};
    __m256i c[8];
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      c[g] = _mm256_and_si256(d[g], low4);
      c[4 + g] = _mm256_and_si256(_mm256_srli_epi16(d[g], 4), low4);
    }
    if constexpr (kFive) {
      const __m256i qh8 = Words8(rp, off + offsetof(BlockQ5_0, qh));
      c[0] = _mm256_or_si256(c[0], FifthBitsGroup<0>(qh8));
      c[1] = _mm256_or_si256(c[1], FifthBitsGroup<1>(qh8));
      c[2] = _mm256_or_si256(c[2], FifthBitsGroup<2>(qh8));
      c[3] = _mm256_or_si256(c[3], FifthBitsGroup<3>(qh8));
      c[4] = _mm256_or_si256(c[4], FifthBitsGroup<4>(qh8));
      c[5] = _mm256_or_si256(c[5], FifthBitsGroup<5>(qh8));
      c[6] = _mm256_or_si256(c[6], FifthBitsGroup<6>(qh8));
      c[7] = _mm256_or_si256(c[7], FifthBitsGroup<7>(qh8));
    }
    auto* out = reinterpret_cast<__m256i*>(pn.codes + b * 256);
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) _mm256_store_si256(out + g, c[g]);
    const __m256 dw = Halves8(rp, off);
    _mm256_store_ps(pn.dw + 8 * b, dw);
    _mm256_store_ps(pn.m + 8 * b, kHasMin ? Halves8(rp, off + 2) : _mm256_mul_ps(dw, minus_bias));
  }
}

// The next panel's rows (8 rows on from rp, `bytes` each) requested toward L1, a panel ahead.
HWY_INLINE void PrefetchNextPanel(const uint8_t* const* rp, size_t row_bytes, size_t bytes) {
  for (int i = 0; i < 8; ++i)
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(rp[i] + 8 * row_bytes + o), _MM_HINT_T0);
}

// Q4_K straight from the 8 rows' blocks (no stage): per super-block the scales of 8 rows at once
// (KQuantScales8, transposed: the panel's (dw, m) layout), per 64 elements one 8 × 8 transpose of
// the rows' 32 nibble bytes, split after it as in PackQ4 — dword g of chunk c holds elements
// 64c + 4g.. (low nibbles) and 64c + 32 + 4g.. (high). The codes and (dw, m) of UnpackBlocks.
inline void PackQ4K(const uint8_t* const* rp, size_t row_bytes, size_t nb, Panel8 pn) {
  PrefetchNextPanel(rp, row_bytes, nb * sizeof(BlockQ4_K));
  for (size_t b = 0; b < nb; ++b) {
    const size_t off = b * sizeof(BlockQ4_K);
    __m256 dw[8], mn[8];
    KQuantScales8(rp, off, dw, mn);
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      _mm256_store_ps(pn.dw + 8 * (8 * b + j), dw[j]);
      _mm256_store_ps(pn.m + 8 * (8 * b + j), mn[j]);
    }
    for (int c = 0; c < 4; ++c) {
      __m256i r[8], t[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i)
        r[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rp[i] + off + offsetof(BlockQ4_K, qs) + 32 * c));
      Transpose8x8(r, t);
      auto* out = reinterpret_cast<__m256i*>(pn.codes + 32 * (64 * b + 16 * c));
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        _mm256_store_si256(out + g, Lo4(t[g]));
        _mm256_store_si256(out + 8 + g, Hi4(t[g]));
      }
    }
  }
}

// Q6_K straight from the 8 rows' blocks: scales by Q6KScales8 (m = −32 dw), the codes of each 32
// elements by Q6KCodes per row and one 8 × 8 transpose (no stage, no scalar scale transpose).
inline void PackQ6K(const uint8_t* const* rp, size_t row_bytes, size_t nb, Panel8 pn) {
  PrefetchNextPanel(rp, row_bytes, nb * sizeof(BlockQ6_K));
  const __m256 m32 = _mm256_set1_ps(-32.0f);
  for (size_t b = 0; b < nb; ++b) {
    const size_t off = b * sizeof(BlockQ6_K);
    __m256 dw[16];
    Q6KScales8(rp, off, dw);
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) {
      _mm256_store_ps(pn.dw + 8 * (16 * b + j), dw[j]);
      _mm256_store_ps(pn.m + 8 * (16 * b + j), _mm256_mul_ps(m32, dw[j]));
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        __m256i r[8], t[8];
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) r[i] = Q6KCodes(rp[i] + off, h, k);
        Transpose8x8(r, t);
        auto* out = reinterpret_cast<__m256i*>(pn.codes + 32 * (64 * b + 32 * h + 8 * k));
#pragma GCC unroll 8
        for (int g = 0; g < 8; ++g) _mm256_store_si256(out + g, t[g]);
      }
    }
  }
}

// Q5_1 and Q5_K: each row unpacked (the per-target UnpackBlocks) into `stage`, then transposed.
inline void PackGeneric(GgmlType type, const uint8_t* const* rp, size_t row_bytes, size_t cols, int sub, Panel8 pn,
                        uint8_t* stage) {
  const size_t ldq = Align64(cols), nsub = cols / sub;
  float* sdw = reinterpret_cast<float*>(stage + 8 * ldq);
  float* sm = sdw + 8 * nsub;
  const GgmlTypeTraits& tr = GgmlTraitsOf(type);
  const size_t nb = cols / tr.block_elems;
  PrefetchNextPanel(rp, row_bytes, tr.block_bytes * nb);  // a panel ahead (see StageRows)
  for (int i = 0; i < 8; ++i) {
    UnpackBlocks(type, rp[i], nb, stage + i * ldq, sdw + i * nsub, sm + i * nsub);
  }
  for (size_t c = 0; c < cols; c += 32) {
    __m256i r[8], out[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm256_load_si256(reinterpret_cast<const __m256i*>(stage + i * ldq + c));
    Transpose8x8(r, out);
    for (int g = 0; g < 8; ++g) _mm256_store_si256(reinterpret_cast<__m256i*>(pn.codes + c * 8) + g, out[g]);
  }
  for (size_t j = 0; j < nsub; ++j) {
    for (int i = 0; i < 8; ++i) {
      pn.dw[8 * j + i] = sdw[i * nsub + j];
      pn.m[8 * j + i] = sm[i * nsub + j];
    }
  }
}

// Rows [r0, r0 + 8) of w (clamped to the last row) → panel.
inline void PackPanel8(const WeightView& w, size_t r0, Panel8 pn, uint8_t* stage) {
  const uint8_t* rp[8];
  for (size_t i = 0; i < 8; ++i) rp[i] = w.data + std::min(r0 + i, w.rows - 1) * w.row_bytes;
  switch (w.type) {
    case GgmlType::kQ4_0: return PackQ4<GgmlType::kQ4_0>(rp, w.cols / 32, pn, stage);
    case GgmlType::kQ4_1: return PackQ4<GgmlType::kQ4_1>(rp, w.cols / 32, pn, stage);
    case GgmlType::kQ5_0: return PackQ4<GgmlType::kQ5_0>(rp, w.cols / 32, pn, stage);
    case GgmlType::kQ8_0: return PackQ8(rp, w.cols / 32, pn, stage);
    case GgmlType::kQ4_K: return PackQ4K(rp, w.row_bytes, w.cols / 256, pn);
    case GgmlType::kQ6_K: return PackQ6K(rp, w.row_bytes, w.cols / 256, pn);
    default: return PackGeneric(w.type, rp, w.row_bytes, w.cols, ops_internal::Int8SubOf(w.type), pn, stage);
  }
}

HWY_INLINE __m256i Bcast4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// Stores the first n lanes of v to p.
HWY_INLINE void StoreRows(float* p, __m256 v, size_t n) {
  if (n == 8) return _mm256_storeu_ps(p, v);
  alignas(32) float tmp[8];
  _mm256_store_ps(tmp, v);
  std::memcpy(p, tmp, n * sizeof(float));
}

// Lane i of *lo = the sum of lanes 0-3 of v[i], of *hi = of its lanes 4-7 (exact: 32-bit integers).
HWY_INLINE void TransposeSum8Halves(const __m256i* v, __m256i* lo, __m256i* hi) {
  auto pair32 = [](__m256i a, __m256i b) {
    return _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
  };
  auto pair64 = [](__m256i a, __m256i b) {
    return _mm256_add_epi32(_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b));
  };
  const __m256i r03 = pair64(pair32(v[0], v[1]), pair32(v[2], v[3]));  // rows 0-3 (lanes 0-3) | rows 0-3 (4-7)
  const __m256i r47 = pair64(pair32(v[4], v[5]), pair32(v[6], v[7]));  // rows 4-7 (lanes 0-3) | rows 4-7 (4-7)
  *lo = _mm256_permute2x128_si256(r03, r47, 0x20);
  *hi = _mm256_permute2x128_si256(r03, r47, 0x31);
}
// Lane i = the sum of the 8 lanes of v[i].
HWY_INLINE __m256i TransposeSum8(const __m256i* v) {
  __m256i lo, hi;
  TransposeSum8Halves(v, &lo, &hi);
  return _mm256_add_epi32(lo, hi);
}

// Group g's weight vector w (codes + 32 g) and the operand vpmaddubsw / vpdpbusd take for it:
// w itself, or |w| for the signed codes (whose sign then moves to x: OperandX).
template <bool kSigned>
HWY_INLINE __m256i LoadGroup(const uint8_t* codes, int g, __m256i* w) {
  *w = _mm256_load_si256(reinterpret_cast<const __m256i*>(codes + 32 * g));
  return kSigned ? _mm256_abs_epi8(*w) : *w;
}
// Token bytes x4[0, 4) broadcast, negated where w is negative (zero where w is zero) if signed.
template <bool kSigned>
HWY_INLINE __m256i OperandX(const uint8_t* x4, __m256i w) {
  const __m256i xb = Bcast4(x4);
  return kSigned ? _mm256_sign_epi8(xb, w) : xb;
}

// ---- The integer products of one sub-block, per token: isum[t] lane i = Σ q · xq of row i.
// kBatch: how many vpmaddubsw results fit one int16 sum (codes < 2^bits: 8 for 4 bits, 4 for 5,
// 2 for 6, 1 for the signed 8-bit codes, which go through the sign trick |w| · sign(x, w)).
struct MaddubsDot {
  // Lane i = Σ of the 4 products of bytes 4i..4i+3 (u8 × s8; no int16 saturation for |w| ≤ 128, |x| ≤ 127).
  static HWY_INLINE __m256i Partial(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
  }
  template <int kGroups, int kBatch, bool kSigned, int kT>
  static HWY_INLINE void SubBlock(const uint8_t* codes, const uint8_t* const* xq, __m256i* isum) {
    const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 4
    for (int t = 0; t < kT; ++t) isum[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int g0 = 0; g0 < kGroups; g0 += kBatch) {
      __m256i s16[kT];
#pragma GCC unroll 8
      for (int g = g0; g < g0 + kBatch; ++g) {
        __m256i w;
        const __m256i aw = LoadGroup<kSigned>(codes, g, &w);
#pragma GCC unroll 4
        for (int t = 0; t < kT; ++t) {
          const __m256i p = _mm256_maddubs_epi16(aw, OperandX<kSigned>(xq[t] + 4 * g, w));
          s16[t] = g == g0 ? p : _mm256_add_epi16(s16[t], p);
        }
      }
#pragma GCC unroll 4
      for (int t = 0; t < kT; ++t) isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(s16[t], ones));
    }
  }
};

}  // namespace mm
}  // namespace HWY_NAMESPACE
}  // namespace chorus

// The panel × token kernels and the path, once per product instruction (the AVX-VNNI copy is
// compiled with that extension enabled and runs only on CPUs that have it).
namespace chorus {
namespace HWY_NAMESPACE {
namespace mm {
namespace maddubs {
using Dot = MaddubsDot;
#include "ops/int8_x86_body-inl.h"
}  // namespace maddubs
}  // namespace mm
}  // namespace HWY_NAMESPACE
}  // namespace chorus

// vpdpbusd: AVX-VNNI's VEX form on the AVX2 target (compiled with that extension, run only on CPUs
// that have it), AVX512-VNNI's EVEX form on 256-bit vectors on AVX3_DL (which implies it). Same sums.
// On AVX3_DL the EVEX encoding is forced with inline assembly: Highway 1.0.3's AVX3_DL target string
// enables "avxvnni" too, so GCC encodes _mm256_dpbusd_epi32 as the VEX (AVX-VNNI) form whenever its
// registers allow, and AVX3_DL CPUs without AVX-VNNI (AMD Zen 4, Intel Ice Lake) raise SIGILL on it.
// tests/ops/avx3dl_encoding_test.sh checks the built binaries for any VEX vpdp* in AVX3_DL code.
#if HWY_TARGET == HWY_AVX2
#pragma GCC push_options
#pragma GCC target("avxvnni")
#define CHORUS_DPBUSD256 _mm256_dpbusd_avx_epi32
#elif HWY_TARGET == HWY_AVX3_DL
namespace chorus {
namespace HWY_NAMESPACE {
namespace mm {
static HWY_INLINE __m256i DpbusdEvex256(__m256i acc, __m256i u, __m256i s) {
  // AT&T operand order: acc += u (unsigned bytes) . s (signed bytes), 4 products per 32-bit lane.
  asm("%{evex%} vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
  return acc;
}
}  // namespace mm
}  // namespace HWY_NAMESPACE
}  // namespace chorus
#define CHORUS_DPBUSD256 DpbusdEvex256
#endif
#ifdef CHORUS_DPBUSD256
namespace chorus {
namespace HWY_NAMESPACE {
namespace mm {
namespace avxvnni {
struct Dot {
  static HWY_INLINE __m256i Partial(__m256i u, __m256i s) {
    return CHORUS_DPBUSD256(_mm256_setzero_si256(), u, s);
  }
  template <int kGroups, int kBatch, bool kSigned, int kT>
  static HWY_INLINE void SubBlock(const uint8_t* codes, const uint8_t* const* xq, __m256i* isum) {
#pragma GCC unroll 4
    for (int t = 0; t < kT; ++t) isum[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int g = 0; g < kGroups; ++g) {
      __m256i w;
      const __m256i aw = LoadGroup<kSigned>(codes, g, &w);
#pragma GCC unroll 4
      for (int t = 0; t < kT; ++t) isum[t] = CHORUS_DPBUSD256(isum[t], aw, OperandX<kSigned>(xq[t] + 4 * g, w));
    }
  }
};
#include "ops/int8_x86_body-inl.h"
}  // namespace avxvnni
}  // namespace mm
}  // namespace HWY_NAMESPACE
}  // namespace chorus
#undef CHORUS_DPBUSD256
#endif  // CHORUS_DPBUSD256
#if HWY_TARGET == HWY_AVX2
#pragma GCC pop_options
#endif  // HWY_TARGET == HWY_AVX2

#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
