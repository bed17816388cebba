// AVX3_DL GEMM for many tokens: 16 weight rows unpacked once into a VNNI panel (u8, 4 consecutive
// columns per row per dword), then a 16-row × kT-token register tile of int32 dot products.
// Invariant: the panel is a transient per-thread tile; the weight matrix itself is never copied.
#if defined(CHORUS_OPS_VNNI_GEMM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CHORUS_OPS_VNNI_GEMM_INL_H_
#undef CHORUS_OPS_VNNI_GEMM_INL_H_
#else
#define CHORUS_OPS_VNNI_GEMM_INL_H_
#endif

#include <cstring>

#include "hwy/highway.h"
#include "ops/unpack-inl.h"    // UnpackBlocks
#include "ops/vnni_act-inl.h"  // TileLayout
#include "ops/vnni_gemv-inl.h"  // FirstBytes
#include "ops/vnni_unpacked-inl.h"  // UnpackKQuantSimd

HWY_BEFORE_NAMESPACE();
#if HWY_TARGET == HWY_AVX3_DL
#pragma GCC target("avx512vnni")
#include <immintrin.h>

namespace chorus {
namespace HWY_NAMESPACE {
namespace mm {  // matmul internals (names private to these kernels)

inline constexpr size_t kPanelRows = 16;
inline constexpr int kMaxTileTok = 12;

// Panel layout, per sub-block of `sub` columns: [sub/4 groups × 16 rows × 4 u8][dw 16 f32][m 16 f32].
inline size_t PanelSubBytes(int sub) { return sub * kPanelRows + 2 * 64; }
inline size_t PanelBytes(size_t cols, int sub) { return cols / sub * PanelSubBytes(sub); }
// Scratch for unpacking the 16 rows before interleaving.
inline size_t PanelScratchBytes(size_t cols, int sub) {
  return PanelBytes(cols, sub) + kPanelRows * (Align64(cols) + 2 * (cols / sub) * sizeof(float)) + 64;
}

// Natural-order codes of one Q4_0 / Q4_1 / Q8_0 row with AVX-512 (2 blocks per step); other
// types use the scalar UnpackBlocks. q gets nb * 32 codes.
inline void UnpackRowVnni(GgmlType type, const uint8_t* row, size_t nb, uint8_t* q, float* dw, float* m) {
  const bool q8 = type == GgmlType::kQ8_0;
  if (type == GgmlType::kQ4_K || type == GgmlType::kQ5_K || type == GgmlType::kQ6_K)
    return UnpackKQuantSimd(type, row, nb, q, dw, m);
  if (!q8 && type != GgmlType::kQ4_0 && type != GgmlType::kQ4_1) return UnpackBlocks(type, row, nb, q, dw, m);
  const size_t bs = GgmlTraitsOf(type).block_bytes, qs_off = type == GgmlType::kQ4_1 ? 4 : 2;
  alignas(64) uint8_t idx[64];
  for (int i = 0; i < 64; ++i)  // Q4: [qs0, qs0, qs1, qs1]; Q8_0: [qs0 (32), qs1 (32)]
    idx[i] = static_cast<uint8_t>(q8 ? (i / 32) * bs + qs_off + i % 32 : (i / 32) * bs + qs_off + i % 16);
  alignas(64) uint16_t cnt[32];  // high nibbles in the second 16 codes of each block
  for (int i = 0; i < 32; ++i) cnt[i] = (i / 8) % 2 ? 4 : 0;
  const __m512i vidx = _mm512_load_si512(idx), shift = _mm512_load_si512(cnt);
  const __m512i low4 = _mm512_set1_epi8(0x0F), flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (size_t b = 0; b < nb; b += 2) {
    const uint8_t* p = row + b * bs;
    const size_t valid = (nb - b >= 2 ? 2 : 1) * bs;
    const __m512i lo = _mm512_maskz_loadu_epi8(FirstBytes(valid), p);
    const __m512i hi = _mm512_maskz_loadu_epi8(FirstBytes(valid > 64 ? valid - 64 : 0), p + 64);
    const __m512i v = _mm512_permutex2var_epi8(lo, vidx, hi);
    const __m512i codes = q8 ? _mm512_xor_si512(v, flip)
                             : _mm512_and_si512(_mm512_srlv_epi16(v, shift), low4);
    _mm512_mask_storeu_epi8(q + b * 32, FirstBytes(valid / bs * 32), codes);
    for (size_t i = b; i < b + valid / bs; ++i) {
      const uint8_t* blk = row + i * bs;
      uint16_t h[2];
      std::memcpy(h, blk, 4);
      dw[i] = _cvtsh_ss(h[0]);
      m[i] = type == GgmlType::kQ4_1 ? _cvtsh_ss(h[1]) : (q8 ? -128.0f : -8.0f) * dw[i];
    }
  }
}

// 16 rows × 16 dwords (64 codes each, row stride ld) → out[j] = dword j of rows 0..15.
HWY_INLINE void Transpose16x16(const uint8_t* src, size_t ld, __m512i* out) {
  __m512i r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(src + i * ld);
  for (int i = 0; i < 16; i += 2) {  // per 128-bit lane L: rows i, i+1 of dwords 4L..4L+3, paired
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int g = 0; g < 4; ++g) {  // r[4g + c], lane L = dword 4L + c of rows 4g..4g+3
    r[4 * g + 0] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    r[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    r[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    r[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
  for (int c = 0; c < 4; ++c) {  // 4×4 transpose of 128-bit lanes across the 4 row groups
    const __m512i v0 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x44);
    const __m512i v1 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xEE);
    const __m512i v2 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x44);
    const __m512i v3 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xEE);
    out[0 + c] = _mm512_shuffle_i32x4(v0, v2, 0x88);
    out[4 + c] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
    out[8 + c] = _mm512_shuffle_i32x4(v1, v3, 0x88);
    out[12 + c] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
  }
}

// Rows [r0, r0 + 16) of w (zero rows past w.rows) → panel.
template <int sub>
void PackVnniPanel(const WeightView& w, size_t r0, uint8_t* panel, uint8_t* tmp) {
  const size_t cols = w.cols, nsub = cols / sub, ldq = Align64(cols);
  const size_t nb = cols / GgmlTraitsOf(w.type).block_elems;
  uint8_t* q = tmp;
  float* dw = reinterpret_cast<float*>(tmp + kPanelRows * ldq);
  float* m = dw + kPanelRows * nsub;
  for (size_t i = 0; i < kPanelRows; ++i) {
    if (r0 + i < w.rows) {
      UnpackRowVnni(w.type, w.data + (r0 + i) * w.row_bytes, nb, q + i * ldq, dw + i * nsub, m + i * nsub);
      std::memset(q + i * ldq + cols, 0, ldq - cols);
    } else {
      std::memset(q + i * ldq, 0, ldq);
      for (size_t s = 0; s < nsub; ++s) dw[i * nsub + s] = m[i * nsub + s] = 0.0f;
    }
  }
  constexpr size_t groups = sub / 4;
  for (size_t k = 0; k < cols; k += 64) {
    __m512i out[16];
    Transpose16x16(q + k, ldq, out);
    const size_t n = cols - k < 64 ? (cols - k) / 4 : 16;
    for (size_t j = 0; j < n; ++j) {
      const size_t k4 = k / 4 + j;
      _mm512_store_si512(panel + (k4 / groups) * PanelSubBytes(sub) + (k4 % groups) * 64, out[j]);
    }
  }
  for (size_t s = 0; s < nsub; ++s) {
    float* odw = reinterpret_cast<float*>(panel + s * PanelSubBytes(sub) + sub * kPanelRows);
    for (size_t i = 0; i < kPanelRows; ++i) {
      odw[i] = dw[i * nsub + s];
      odw[16 + i] = m[i * nsub + s];
    }
  }
}

// y[t, r0 + i] for t < kT, i < n_rows: the panel × one token tile (TileLayout of kT tokens).
template <int kSub, int kT>
void VnniMicroKernel(const uint8_t* panel, size_t cols, const uint8_t* tile, float* y, size_t ldy,
                     size_t n_rows) {
  const TileLayout l = TileLayoutOf(cols, kSub, kT);
  const auto* xq = reinterpret_cast<const int32_t*>(tile);
  const auto* dx = reinterpret_cast<const float*>(tile + l.dx_off);
  const auto* xs = reinterpret_cast<const float*>(tile + l.s_off);
  const size_t nsub = cols / kSub;
  __m512 facc[kT];
  for (int t = 0; t < kT; ++t) facc[t] = _mm512_setzero_ps();
  for (size_t s = 0; s < nsub; ++s) {
    const uint8_t* p = panel + s * (kSub * kPanelRows + 128);
    const int32_t* xg = xq + s * (kSub / 4) * kT;
    __m512i acc[kT];
    for (int t = 0; t < kT; ++t) acc[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int g = 0; g < kSub / 4; ++g) {
      const __m512i wv = _mm512_load_si512(p + 64 * g);
#pragma GCC unroll 12
      for (int t = 0; t < kT; ++t) acc[t] = _mm512_dpbusd_epi32(acc[t], wv, _mm512_set1_epi32(xg[g * kT + t]));
    }
    const __m512 dw = _mm512_load_ps(reinterpret_cast<const float*>(p + kSub * kPanelRows));
    const __m512 mv = _mm512_load_ps(reinterpret_cast<const float*>(p + kSub * kPanelRows + 64));
    const float* dxs = dx + (s * kSub / 32) * kT;
    const float* ss = xs + s * kT;
#pragma GCC unroll 12
    for (int t = 0; t < kT; ++t) {
      const __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(acc[t]), _mm512_set1_ps(dxs[t]));
      facc[t] = _mm512_fmadd_ps(f, dw, facc[t]);
      facc[t] = _mm512_fmadd_ps(mv, _mm512_set1_ps(ss[t]), facc[t]);
    }
  }
  const __mmask16 mask = static_cast<__mmask16>((1u << n_rows) - 1);
  for (int t = 0; t < kT; ++t) _mm512_mask_storeu_ps(y + t * ldy, mask, facc[t]);
}

template <int kSub>
void VnniTile(size_t kt, const uint8_t* panel, size_t cols, const uint8_t* tile, float* y, size_t ldy,
              size_t n_rows) {
  switch (kt) {
    case 1: return VnniMicroKernel<kSub, 1>(panel, cols, tile, y, ldy, n_rows);
    case 2: return VnniMicroKernel<kSub, 2>(panel, cols, tile, y, ldy, n_rows);
    case 3: return VnniMicroKernel<kSub, 3>(panel, cols, tile, y, ldy, n_rows);
    case 4: return VnniMicroKernel<kSub, 4>(panel, cols, tile, y, ldy, n_rows);
    case 5: return VnniMicroKernel<kSub, 5>(panel, cols, tile, y, ldy, n_rows);
    case 6: return VnniMicroKernel<kSub, 6>(panel, cols, tile, y, ldy, n_rows);
    case 7: return VnniMicroKernel<kSub, 7>(panel, cols, tile, y, ldy, n_rows);
    case 8: return VnniMicroKernel<kSub, 8>(panel, cols, tile, y, ldy, n_rows);
    case 9: return VnniMicroKernel<kSub, 9>(panel, cols, tile, y, ldy, n_rows);
    case 10: return VnniMicroKernel<kSub, 10>(panel, cols, tile, y, ldy, n_rows);
    case 11: return VnniMicroKernel<kSub, 11>(panel, cols, tile, y, ldy, n_rows);
    default: return VnniMicroKernel<kSub, 12>(panel, cols, tile, y, ldy, n_rows);
  }
}

// Token tiles: n_tiles balanced tiles of at most kMaxTileTok tokens; tile i starts at Start(i).
struct TokenTiling {
  size_t n_tok, n_tiles;
  size_t Start(size_t i) const { return n_tok * i / n_tiles; }
  size_t Size(size_t i) const { return Start(i + 1) - Start(i); }
};
inline TokenTiling TokenTilingOf(size_t n_tok) {
  return TokenTiling{n_tok, (n_tok + kMaxTileTok - 1) / kMaxTileTok};
}

}  // namespace mm
}  // namespace HWY_NAMESPACE
}  // namespace chorus
#endif  // HWY_TARGET == HWY_AVX3_DL
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
