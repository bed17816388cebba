// AVX3_DL decode kernels (few tokens): Q4_0 / Q4_1 / Q8_0 rows read straight from GGML blocks.
// Invariant: loads never touch bytes past the row's last block (tails use fault-free masked loads).
// Each row leaves one 16-lane partial sum per token; 16 rows are reduced together (ReduceRows16).
#if defined(CHORUS_OPS_VNNI_GEMV_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CHORUS_OPS_VNNI_GEMV_INL_H_
#undef CHORUS_OPS_VNNI_GEMV_INL_H_
#else
#define CHORUS_OPS_VNNI_GEMV_INL_H_
#endif

#include "hwy/highway.h"
#include "ops/matmul_internal.h"  // Scratch
#include "ops/vnni_act-inl.h"     // Split4Layout, Biased2Layout

HWY_BEFORE_NAMESPACE();
#if HWY_TARGET == HWY_AVX3_DL
#pragma GCC target("avx512vnni")
#include <immintrin.h>

namespace chorus {
namespace HWY_NAMESPACE {
namespace mm {  // matmul internals (names private to these kernels)

// Software prefetch distance of the decode streams (bytes ahead of the block being read).
inline constexpr size_t kPrefetchBytes = 2048;

// Mask of the first n (≤ 64) bytes.
HWY_INLINE __mmask64 FirstBytes(size_t n) {
  return n >= 64 ? ~__mmask64{0} : ((__mmask64{1} << n) - 1);
}

// Lane i of the result = sum of all lanes of v[i] (a 4-level pairwise transpose-add: 45 uops).
HWY_INLINE __m512 ReduceRows16(const __m512* v) {
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  auto pair = [&](__m512 a, __m512 b) {
    return _mm512_add_ps(_mm512_permutex2var_ps(a, even, b), _mm512_permutex2var_ps(a, odd, b));
  };
  __m512 t[8], u[4], w[2];
  for (int i = 0; i < 8; ++i) t[i] = pair(v[2 * i], v[2 * i + 1]);
  for (int i = 0; i < 4; ++i) u[i] = pair(t[2 * i], t[2 * i + 1]);
  for (int i = 0; i < 2; ++i) w[i] = pair(u[2 * i], u[2 * i + 1]);
  return pair(w[0], w[1]);
}

// Runs row(r, out) for rows [r0, r1) (out: kT 16-lane partials) and stores the lane sums to
// y[t * ldy + r], 16 rows at a time.
template <int kT, class RowFn>
HWY_INLINE void ForRows16(size_t r0, size_t r1, float* y, size_t ldy, const RowFn& row) {
  alignas(64) float part[kT][16][16];
  for (size_t rb = r0; rb < r1; rb += 16) {
    const size_t n = r1 - rb < 16 ? r1 - rb : 16;
    for (size_t i = 0; i < n; ++i) {
      __m512 acc[kT];
      row(rb + i, acc);
      for (int t = 0; t < kT; ++t) _mm512_store_ps(part[t][i], acc[t]);
    }
    for (size_t i = n; i < 16; ++i)
      for (int t = 0; t < kT; ++t) _mm512_store_ps(part[t][i], _mm512_setzero_ps());
    const __mmask16 mask = static_cast<__mmask16>((1u << n) - 1);
    for (int t = 0; t < kT; ++t) {
      __m512 v[16];
      for (int i = 0; i < 16; ++i) v[i] = _mm512_load_ps(part[t][i]);
      _mm512_mask_storeu_ps(y + t * ldy + rb, mask, ReduceRows16(v));
    }
  }
}

// Q4_0 (kBS 18) / Q4_1 (kBS 20), x in the split4 layout: a group of 4 blocks is one vpermt2b of
// the group's bytes; its low nibbles meet the first 16 codes of each block, the high nibbles the
// last 16. Super-groups of 16 blocks convert their 16 (d, m) halves at once; the 1..3 groups of a
// row's tail convert per group.
template <int kBS, bool kHasMin>
struct Q4Consts {
  static constexpr int kQsOff = kHasMin ? 4 : 2;
  static constexpr size_t kGroup = 4 * kBS;
  __m512i idx_q, idx_dm, idx_pair, idx_merge, low4;
  __m512i expand[4];  // lane L → lane 4 g + L / 4
  __mmask64 b_full;

  Q4Consts() {
    alignas(64) uint8_t q[64];
    alignas(64) uint16_t dm[32], pair[32], merge[32];
    for (int i = 0; i < 64; ++i) q[i] = static_cast<uint8_t>((i / 16) * kBS + kQsOff + i % 16);
    // Per group: [d0×4 d1×4 d2×4 d3×4 | m0×4 ... m3×4] from the group's first 64 bytes.
    for (int i = 0; i < 32; ++i)
      dm[i] = static_cast<uint16_t>((i < 16 ? (i / 4) * kBS : ((i - 16) / 4) * kBS + 2) / 2);
    // Two groups (a, b) → words 0..7 = d of their 8 blocks, 8..15 = m of them.
    for (int i = 0; i < 32; ++i) {
      const int j = i % 8, from_b = j >= 4 ? 32 : 0, word = ((j % 4) * kBS + (i >= 8 ? 2 : 0)) / 2;
      pair[i] = static_cast<uint16_t>(i < 16 ? from_b + word : 0);
    }
    // Two pairs → words 0..15 = d of 16 blocks, 16..31 = m of 16 blocks.
    for (int i = 0; i < 32; ++i) {
      const int half = i / 16, k = i % 16;  // half 0: d, 1: m
      merge[i] = static_cast<uint16_t>((k < 8 ? 0 : 32) + 8 * half + k % 8);
    }
    idx_q = _mm512_load_si512(q);
    idx_dm = _mm512_load_si512(dm);
    idx_pair = _mm512_load_si512(pair);
    idx_merge = _mm512_load_si512(merge);
    low4 = _mm512_set1_epi8(0x0F);
    for (int g = 0; g < 4; ++g) {
      alignas(64) int32_t e[16];
      for (int i = 0; i < 16; ++i) e[i] = 4 * g + i / 4;
      expand[g] = _mm512_load_si512(e);
    }
    b_full = FirstBytes(kGroup - 64);
  }
};

template <int kBS, bool kHasMin, int kT>
HWY_INLINE void Q4Row(const uint8_t* row, size_t nb, const Q4Consts<kBS, kHasMin>& c,
                      const uint8_t* act, size_t ld_act, const Split4Layout& l, __mmask64 tail_a,
                      __mmask64 tail_b, __m512* out) {
  constexpr size_t kGroup = 4 * kBS;
  __m512 facc[kT];
#pragma GCC unroll 4
  for (int t = 0; t < kT; ++t) facc[t] = _mm512_setzero_ps();
  size_t b = 0;
  for (; b + 16 <= nb; b += 16) {
    const uint8_t* p = row + b * kBS;
    __m512i a[4], lo[4], hi[4];
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      a[g] = _mm512_loadu_si512(p + g * kGroup);
      const __m512i q = _mm512_permutex2var_epi8(
          a[g], c.idx_q, _mm512_maskz_loadu_epi8(c.b_full, p + g * kGroup + 64));
      lo[g] = _mm512_and_si512(q, c.low4);
      hi[g] = _mm512_and_si512(_mm512_srli_epi16(q, 4), c.low4);
    }
    const __m512i dm = _mm512_permutex2var_epi16(_mm512_permutex2var_epi16(a[0], c.idx_pair, a[1]), c.idx_merge,
                                                 _mm512_permutex2var_epi16(a[2], c.idx_pair, a[3]));
    const __m512 d16 = _mm512_cvtph_ps(_mm512_castsi512_si256(dm));
    const __m512 m16 = kHasMin ? _mm512_cvtph_ps(_mm512_extracti64x4_epi64(dm, 1))
                               : _mm512_mul_ps(d16, _mm512_set1_ps(-8.0f));
#pragma GCC unroll 4
    for (int t = 0; t < kT; ++t) {
      const uint8_t* xa = act + t * ld_act;
      const __m512 sc16 = _mm512_mul_ps(d16, _mm512_loadu_ps(reinterpret_cast<const float*>(xa + l.dx_off) + b));
      facc[t] = _mm512_fmadd_ps(m16, _mm512_loadu_ps(reinterpret_cast<const float*>(xa + l.s_off) + b), facc[t]);
      const uint8_t* xq = xa + b * 32;
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        __m512i acc = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[g], _mm512_load_si512(xq + g * 128));
        acc = _mm512_dpbusd_epi32(acc, hi[g], _mm512_load_si512(xq + g * 128 + 64));
        facc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_permutexvar_ps(c.expand[g], sc16), facc[t]);
      }
    }
  }
  for (; b < nb; b += 4) {  // tail: groups of 4 blocks, the last one masked
    const uint8_t* p = row + b * kBS;
    const bool last = b + 4 >= nb;
    const __m512i a = last ? _mm512_maskz_loadu_epi8(tail_a, p) : _mm512_loadu_si512(p);
    const __m512i bb = _mm512_maskz_loadu_epi8(last ? tail_b : c.b_full, p + 64);
    const __m512i q = _mm512_permutex2var_epi8(a, c.idx_q, bb);
    const __m512i lo = _mm512_and_si512(q, c.low4);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), c.low4);
    const __m512i dm = _mm512_permutexvar_epi16(c.idx_dm, a);
    const __m512 dw = _mm512_cvtph_ps(_mm512_castsi512_si256(dm));
    const __m512 mv = kHasMin ? _mm512_cvtph_ps(_mm512_extracti64x4_epi64(dm, 1))
                              : _mm512_mul_ps(dw, _mm512_set1_ps(-8.0f));
#pragma GCC unroll 4
    for (int t = 0; t < kT; ++t) {
      const uint8_t* xa = act + t * ld_act;
      const uint8_t* xq = xa + b * 32;
      __m512i acc = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_load_si512(xq));
      acc = _mm512_dpbusd_epi32(acc, hi, _mm512_load_si512(xq + 64));
      const __m512 sc = _mm512_mul_ps(dw, _mm512_load_ps(reinterpret_cast<const float*>(xa + l.dxe_off) + 4 * b));
      facc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), sc, facc[t]);
      facc[t] = _mm512_fmadd_ps(mv, _mm512_load_ps(reinterpret_cast<const float*>(xa + l.s4_off) + 4 * b), facc[t]);
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < kT; ++t) out[t] = facc[t];
}

template <int kBS, bool kHasMin, int kT>
void Q4Rows(const uint8_t* w, size_t row_bytes, size_t nb, size_t r0, size_t r1,
            const uint8_t* act, size_t ld_act, size_t cols, float* y, size_t ldy) {
  static const Q4Consts<kBS, kHasMin> c;
  const Split4Layout l = Split4LayoutOf(cols);
  // The last group of every row holds nb % 4 blocks (or 4): its valid bytes are row-invariant.
  const size_t tail_bytes = (nb % 4 ? nb % 4 : 4) * kBS;
  const __mmask64 tail_a = FirstBytes(tail_bytes), tail_b = FirstBytes(tail_bytes > 64 ? tail_bytes - 64 : 0);
  ForRows16<kT>(r0, r1, y, ldy, [&](size_t r, __m512* out) {
    Q4Row<kBS, kHasMin, kT>(w + r * row_bytes, nb, c, act, ld_act, l, tail_a, tail_b, out);
  });
}

// Lane j = sum of the 4 lanes of block j, for acc[g] holding blocks 4g..4g+3 in 4 lanes each.
HWY_INLINE __m512i BlockSums16(const __m512i* acc) {
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  auto pair = [&](__m512i a, __m512i b) {
    return _mm512_add_epi32(_mm512_permutex2var_epi32(a, even, b), _mm512_permutex2var_epi32(a, odd, b));
  };
  return pair(pair(acc[0], acc[1]), pair(acc[2], acc[3]));
}

// 16-lane partial of the sum of n floats at p.
HWY_INLINE __m512 SumFloats(const float* p, size_t n) {
  __m512 acc = _mm512_setzero_ps();
  size_t k = 0;
  for (; k + 16 <= n; k += 16) acc = _mm512_add_ps(acc, _mm512_loadu_ps(p + k));
  if (k < n) acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << (n - k)) - 1), p + k));
  return acc;
}

// Super-group sg (16 blocks) of the flat stream of `blocks` blocks at base (16 rows of nb blocks,
// taken against the periodic split4 x): its 16 per-block results per token at contrib + t·cstride + 16 sg.
template <int kBS, bool kHasMin, int kT>
HWY_INLINE void Q4SuperGroup(const Q4Consts<kBS, kHasMin>& c, const Split4Layout& l, const uint8_t* base, size_t sg,
                             size_t blocks, const uint8_t* act, size_t ld_act, float* contrib, size_t cstride) {
  constexpr size_t kGroup = 4 * kBS;
  const uint8_t* p = base + sg * 16 * kBS;
  for (size_t off = 0; off < 16 * kBS; off += 64) _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchBytes + off), _MM_HINT_T0);
  const size_t valid = (blocks - sg * 16 < 16 ? blocks - sg * 16 : 16) * kBS;
  __m512i a[4], lo[4], hi[4];
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    __m512i b;
    if (valid == 16 * kBS) {
      a[g] = _mm512_loadu_si512(p + g * kGroup);
      b = _mm512_maskz_loadu_epi8(c.b_full, p + g * kGroup + 64);
    } else {
      const size_t vg = valid > g * kGroup ? valid - g * kGroup : 0;
      a[g] = _mm512_maskz_loadu_epi8(FirstBytes(vg), p + g * kGroup);
      b = _mm512_maskz_loadu_epi8(FirstBytes(vg > 64 ? vg - 64 : 0) & c.b_full, p + g * kGroup + 64);
    }
    const __m512i q = _mm512_permutex2var_epi8(a[g], c.idx_q, b);
    lo[g] = _mm512_and_si512(q, c.low4);
    hi[g] = _mm512_and_si512(_mm512_srli_epi16(q, 4), c.low4);
  }
  const __m512i dm = _mm512_permutex2var_epi16(_mm512_permutex2var_epi16(a[0], c.idx_pair, a[1]), c.idx_merge,
                                               _mm512_permutex2var_epi16(a[2], c.idx_pair, a[3]));
  const __m512 d16 = _mm512_cvtph_ps(_mm512_castsi512_si256(dm));
  const __m512 m16 = kHasMin ? _mm512_cvtph_ps(_mm512_extracti64x4_epi64(dm, 1))
                             : _mm512_mul_ps(d16, _mm512_set1_ps(-8.0f));
  const size_t xb = (sg * 16) % l.period;
#pragma GCC unroll 4
  for (int t = 0; t < kT; ++t) {
    const uint8_t* xa = act + t * ld_act;
    const uint8_t* xq = xa + xb * 32;
    __m512i acc[4];
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      acc[g] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[g], _mm512_load_si512(xq + g * 128));
      acc[g] = _mm512_dpbusd_epi32(acc[g], hi[g], _mm512_load_si512(xq + g * 128 + 64));
    }
    const __m512 dx16 = _mm512_load_ps(reinterpret_cast<const float*>(xa + l.dx_off) + xb);
    const __m512 s16 = _mm512_load_ps(reinterpret_cast<const float*>(xa + l.s_off) + xb);
    const __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(BlockSums16(acc)), _mm512_mul_ps(d16, dx16),
                                     _mm512_mul_ps(m16, s16));
    _mm512_storeu_ps(contrib + t * cstride + sg * 16, v);
  }
}

// The n (≤ 16) row sums of a row group's per-block results (contrib, nb per row) stored to y[t·ldy + i].
template <int kT>
HWY_INLINE void Q4GroupSums(const float* contrib, size_t cstride, size_t nb, size_t n, float* y, size_t ldy) {
  const __mmask16 mask = static_cast<__mmask16>((1u << n) - 1);
  for (int t = 0; t < kT; ++t) {
    __m512 v[16];
    for (size_t i = 0; i < 16; ++i) v[i] = i < n ? SumFloats(contrib + t * cstride + i * nb, nb) : _mm512_setzero_ps();
    _mm512_mask_storeu_ps(y + t * ldy, mask, ReduceRows16(v));
  }
}

// Q4_0 / Q4_1 for dense rows (row_bytes = nb * kBS): 16 rows are one flat stream of 16 nb blocks,
// taken 16 blocks (a super-group) at a time against the periodic split4 x; each super-group
// yields 16 per-block results (BlockSums16), which are then summed per row. No row tails.
// One decode token (kT = 1): rows [r0, r1) as kQ4Streams equal parts of whole 16-row groups whose
// super-groups are taken in lock step (kQ4Streams streams through memory, as Q8Rows), the rest one
// group after the other; each group's operations are those it does alone (the same bits).
inline constexpr int kQ4Streams = 4;

template <int kBS, bool kHasMin, int kT>
void Q4Stream(const uint8_t* w, size_t nb, size_t r0, size_t r1, const uint8_t* act, size_t ld_act,
              size_t cols, float* y, size_t ldy) {
  static const Q4Consts<kBS, kHasMin> c;
  const Split4Layout l = Split4LayoutOf(cols);
  const size_t cstride = 16 * nb + 16;
  constexpr int kS = kT == 1 ? kQ4Streams : 1;
  float* contrib = reinterpret_cast<float*>(ops_internal::TileScratch().Get(kS * kT * cstride * sizeof(float)));
  if constexpr (kS > 1) {
    const size_t part = (r1 - r0) / (16 * kS) * 16;  // rows per stream
    for (size_t g = 0; g < part; g += 16) {
      for (size_t sg = 0; sg < nb; ++sg)  // a full group: 16 nb blocks = nb super-groups
#pragma GCC unroll 4
        for (int s = 0; s < kS; ++s)
          Q4SuperGroup<kBS, kHasMin, 1>(c, l, w + (r0 + s * part + g) * nb * kBS, sg, 16 * nb, act, ld_act,
                                        contrib + s * cstride, cstride);
      for (int s = 0; s < kS; ++s) Q4GroupSums<1>(contrib + s * cstride, cstride, nb, 16, y + r0 + s * part + g, ldy);
    }
    r0 += kS * part;
  }
  for (size_t rb = r0; rb < r1; rb += 16) {
    const size_t n = r1 - rb < 16 ? r1 - rb : 16, blocks = n * nb, n_sg = (blocks + 15) / 16;
    const uint8_t* base = w + rb * nb * kBS;
    for (size_t sg = 0; sg < n_sg; ++sg) Q4SuperGroup<kBS, kHasMin, kT>(c, l, base, sg, blocks, act, ld_act, contrib, cstride);
    Q4GroupSums<kT>(contrib, cstride, nb, n, y + rb, ldy);
  }
}

// Q8_0: 2 blocks per step; x biased by +128 (unsigned operand), the bias removed per block with
// a second dpbusd of 128 × w that all tokens share.
struct Q8Consts {
  static constexpr size_t kBS = 34, kPair = 2 * kBS;
  __m512i idx_q, idx_d, bias;
  size_t np;
  __mmask64 b_full, tail_a, tail_b;
  explicit Q8Consts(size_t nb) {
    alignas(64) uint8_t iq[64];
    alignas(64) uint16_t id[32];
    for (int i = 0; i < 64; ++i) iq[i] = static_cast<uint8_t>((i / 32) * kBS + 2 + i % 32);
    for (int i = 0; i < 32; ++i) id[i] = static_cast<uint16_t>(((i / 8) & 1) * kBS / 2);
    idx_q = _mm512_load_si512(iq);
    idx_d = _mm512_load_si512(id);
    bias = _mm512_set1_epi8(static_cast<char>(0x80));
    np = (nb + 1) / 2;
    const size_t tail_bytes = (nb % 2 ? 1 : 2) * kBS;
    b_full = FirstBytes(kPair - 64);
    tail_a = FirstBytes(tail_bytes);
    tail_b = FirstBytes(tail_bytes > 64 ? tail_bytes - 64 : 0);
  }
};

// kS rows (row[s]) × kT tokens in lock step, pair of blocks by pair of blocks: each row's
// operations are those of one row alone (out[s * kT + t]), only interleaved — kS streams through
// memory at once instead of one.
template <int kS, int kT>
HWY_INLINE void Q8RowsLockstep(const uint8_t* const* row, const Q8Consts& c, const uint8_t* act, size_t ld_act,
                               const Biased2Layout& l, __m512* out) {
  constexpr size_t kPair = Q8Consts::kPair;
  __m512 facc[kS * kT];
#pragma GCC unroll 16
  for (int i = 0; i < kS * kT; ++i) facc[i] = _mm512_setzero_ps();
  for (size_t p = 0; p < c.np; ++p) {
    const bool last = p + 1 == c.np;
#pragma GCC unroll 8
    for (int s = 0; s < kS; ++s) {
      const uint8_t* src = row[s] + p * kPair;
      _mm_prefetch(reinterpret_cast<const char*>(src + kPrefetchBytes), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(src + kPrefetchBytes + 64), _MM_HINT_T0);
      const __m512i a = last ? _mm512_maskz_loadu_epi8(c.tail_a, src) : _mm512_loadu_si512(src);
      const __m512i b = _mm512_maskz_loadu_epi8(last ? c.tail_b : c.b_full, src + 64);
      const __m512i q = _mm512_permutex2var_epi8(a, c.idx_q, b);
      const __m512 dw = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(c.idx_d, a)));
      const __m512i corr = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c.bias, q);
#pragma GCC unroll 4
      for (int t = 0; t < kT; ++t) {
        const uint8_t* xa = act + t * ld_act;
        const float* dxe = reinterpret_cast<const float*>(xa + l.dxe_off) + p * 16;
        __m512i acc = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_load_si512(xa + p * 64), q);
        acc = _mm512_sub_epi32(acc, corr);
        facc[s * kT + t] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(dw, _mm512_load_ps(dxe)), facc[s * kT + t]);
      }
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < kS * kT; ++i) out[i] = facc[i];
}

// One decode token: rows [r0, r1) as kQ8Streams equal parts of whole 16-row groups, read in lock
// step (the rest, < kQ8Streams · 16 rows, one row at a time). One row after the other is a single
// stream, which the hardware prefetcher and the 2 KiB software prefetch do not keep at the read
// bandwidth: matmul_bench, Gemma 3's 262,144 × 640 Q8_0 output, 1 thread, loaded, 3 alternated
// reps: 38.4–41.4 ms one stream, 26.5–30.3 ms four (2 threads: 25.8–32.1 vs 19.5–21.3 ms), eight
// no better than four.
inline constexpr int kQ8Streams = 4;

template <int kT, int kS = kQ8Streams>
void Q8Rows(const uint8_t* w, size_t row_bytes, size_t nb, size_t r0, size_t r1,
            const uint8_t* act, size_t ld_act, size_t cols, float* y, size_t ldy) {
  const Q8Consts c(nb);
  const Biased2Layout l = Biased2LayoutOf(cols);
  if constexpr (kT == 1 && kS > 1) {
    const size_t part = (r1 - r0) / (16 * kS) * 16;  // rows per stream
    if (part > 0) {
      alignas(64) float partial[kS][16][16];
      for (size_t g = 0; g < part; g += 16) {
        for (size_t i = 0; i < 16; ++i) {
          const uint8_t* rows[kS];
          for (int s = 0; s < kS; ++s) rows[s] = w + (r0 + s * part + g + i) * row_bytes;
          __m512 out[kS];
          Q8RowsLockstep<kS, 1>(rows, c, act, ld_act, l, out);
          for (int s = 0; s < kS; ++s) _mm512_store_ps(partial[s][i], out[s]);
        }
        for (int s = 0; s < kS; ++s) {
          __m512 v[16];
          for (int i = 0; i < 16; ++i) v[i] = _mm512_load_ps(partial[s][i]);
          _mm512_storeu_ps(y + r0 + s * part + g, ReduceRows16(v));
        }
      }
      r0 += kS * part;
    }
  }
  ForRows16<kT>(r0, r1, y, ldy, [&](size_t r, __m512* out) {
    const uint8_t* row = w + r * row_bytes;
    Q8RowsLockstep<1, kT>(&row, c, act, ld_act, l, out);
  });
}

}  // namespace mm
}  // namespace HWY_NAMESPACE
}  // namespace chorus
#endif  // HWY_TARGET == HWY_AVX3_DL
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
