// AVX3_DL decode kernels (few tokens): Q8_0 rows read straight from GGML blocks (Q4_0 / Q4_1 take the
// 8-row kernels of int8_x86-inl.h: matmul_kernels.cc).
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
#include "ops/vnni_act-inl.h"     // Signed2Layout

HWY_BEFORE_NAMESPACE();
#if HWY_TARGET == HWY_AVX3_DL
#pragma GCC target("avx512vnni")
#include <immintrin.h>

namespace chorus {
namespace HWY_NAMESPACE {
namespace mm {  // matmul internals (names private to these kernels)

// Software prefetch distance of the decode streams (bytes ahead of the block being read), requested
// into L2 (prefetcht1), not L1: the L1's few miss buffers capped the lines in flight, and prefetcht1
// read the Q8_0 rows faster (docs/results/design-measurements.md, kPrefetchBytes).
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

// Lane j = sum of the 4 lanes of block j, for acc[g] holding blocks 4g..4g+3 in 4 lanes each.
HWY_INLINE __m512i BlockSums16(const __m512i* acc) {
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  auto pair = [&](__m512i a, __m512i b) {
    return _mm512_add_epi32(_mm512_permutex2var_epi32(a, even, b), _mm512_permutex2var_epi32(a, odd, b));
  };
  return pair(pair(acc[0], acc[1]), pair(acc[2], acc[3]));
}

// Q8_0: 2 blocks per step; the weights biased by +128 (dpbusd's unsigned operand: one xor that all
// tokens share), the bias removed by starting each token's sum at its −128 · Σ x (Signed2Layout).
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
                               const Signed2Layout& l, __m512* out) {
  constexpr size_t kPair = Q8Consts::kPair;
  __m512 facc[kS * kT];
#pragma GCC unroll 16
  for (int i = 0; i < kS * kT; ++i) facc[i] = _mm512_setzero_ps();
  // pair p (kLast: the row's last pair, its bytes past the row masked off); each token's x, −128·Σx
  // and dx are loaded once per pair for all kS rows
  auto pair = [&]<bool kLast>(size_t p) HWY_ATTR {
    __m512i xv[kT], nc[kT];
    __m512 dxe[kT];
#pragma GCC unroll 4
    for (int t = 0; t < kT; ++t) {
      const uint8_t* xa = act + t * ld_act;
      xv[t] = _mm512_load_si512(xa + p * 64);
      nc[t] = _mm512_load_si512(xa + l.ncorr_off + p * 64);
      dxe[t] = _mm512_load_ps(reinterpret_cast<const float*>(xa + l.dxe_off) + p * 16);
    }
#pragma GCC unroll 8
    for (int s = 0; s < kS; ++s) {
      const uint8_t* src = row[s] + p * kPair;
      _mm_prefetch(reinterpret_cast<const char*>(src + kPrefetchBytes), _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(src + kPrefetchBytes + 64), _MM_HINT_T1);
      const __m512i a = kLast ? _mm512_maskz_loadu_epi8(c.tail_a, src) : _mm512_loadu_si512(src);
      const __m512i b = _mm512_maskz_loadu_epi8(kLast ? c.tail_b : c.b_full, src + 64);
      const __m512i q = _mm512_permutex2var_epi8(a, c.idx_q, b);
      const __m512 dw = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(c.idx_d, a)));
      const __m512i qu = _mm512_xor_si512(q, c.bias);  // w + 128
#pragma GCC unroll 4
      for (int t = 0; t < kT; ++t) {
        const __m512i acc = _mm512_dpbusd_epi32(nc[t], qu, xv[t]);  // Σ w · x per group
        facc[s * kT + t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(dw, dxe[t]), facc[s * kT + t]);
      }
    }
  };
  for (size_t p = 0; p + 1 < c.np; ++p) pair.template operator()<false>(p);
  pair.template operator()<true>(c.np - 1);
#pragma GCC unroll 16
  for (int i = 0; i < kS * kT; ++i) out[i] = facc[i];
}

// One decode token: rows [r0, r1) as kQ8Streams equal parts of whole 16-row groups, read in lock
// step (the rest, < kQ8Streams · 16 rows, one row at a time). One row after the other is a single
// stream, which the hardware prefetcher and the 2 KiB software prefetch do not keep at the read
// bandwidth; four streams read faster, eight no better than four (docs/results/design-measurements.md,
// kQ8Streams).
inline constexpr int kQ8Streams = 4;

template <int kT, int kS = kQ8Streams>
void Q8Rows(const uint8_t* w, size_t row_bytes, size_t nb, size_t r0, size_t r1,
            const uint8_t* act, size_t ld_act, size_t cols, float* y, size_t ldy) {
  const Q8Consts c(nb);
  const Signed2Layout l = Signed2LayoutOf(cols);
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
