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

HWY_BEFORE_NAMESPACE();
#if HWY_TARGET == HWY_AVX3_DL
#pragma GCC target("avx512vnni")
#include <immintrin.h>

namespace chorus {
namespace HWY_NAMESPACE {

inline constexpr size_t kPanelRows = 16;
inline constexpr int kMaxTileTok = 12;

// Panel layout, per sub-block of `sub` columns: [sub/4 groups × 16 rows × 4 u8][dw 16 f32][m 16 f32].
inline size_t PanelSubBytes(int sub) { return sub * kPanelRows + 2 * 64; }
inline size_t PanelBytes(size_t cols, int sub) { return cols / sub * PanelSubBytes(sub); }
// Scratch for unpacking the 16 rows before interleaving.
inline size_t PanelScratchBytes(size_t cols, int sub) {
  return PanelBytes(cols, sub) + kPanelRows * (Align64(cols) + 2 * (cols / sub) * sizeof(float)) + 64;
}

// Rows [r0, r0 + 16) of w (zero rows past w.rows) → panel.
inline void PackVnniPanel(const WeightView& w, size_t r0, int sub, uint8_t* panel, uint8_t* tmp) {
  const size_t cols = w.cols, nsub = cols / sub, ldq = Align64(cols);
  const size_t nb = cols / GgmlTraitsOf(w.type).block_elems;
  uint8_t* q = tmp;
  float* dw = reinterpret_cast<float*>(tmp + kPanelRows * ldq);
  float* m = dw + kPanelRows * nsub;
  for (size_t i = 0; i < kPanelRows; ++i) {
    if (r0 + i < w.rows) {
      UnpackBlocks(w.type, w.data + (r0 + i) * w.row_bytes, nb, q + i * ldq, dw + i * nsub, m + i * nsub);
    } else {
      std::memset(q + i * ldq, 0, cols);
      for (size_t s = 0; s < nsub; ++s) dw[i * nsub + s] = m[i * nsub + s] = 0.0f;
    }
  }
  const size_t groups = sub / 4;
  for (size_t s = 0; s < nsub; ++s) {
    uint8_t* out = panel + s * PanelSubBytes(sub);
    for (size_t g = 0; g < groups; ++g) {
      for (size_t i = 0; i < kPanelRows; ++i) std::memcpy(out + g * 64 + 4 * i, q + i * ldq + s * sub + 4 * g, 4);
    }
    float* odw = reinterpret_cast<float*>(out + sub * kPanelRows);
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

// Token tiles: n_tiles balanced tiles of at most kMaxTileTok tokens; tile i starts at TileStart(i).
struct TokenTiling {
  size_t n_tok, n_tiles;
  size_t Start(size_t i) const { return n_tok * i / n_tiles; }
  size_t Size(size_t i) const { return Start(i + 1) - Start(i); }
};
inline TokenTiling TokenTilingOf(size_t n_tok) {
  return TokenTiling{n_tok, (n_tok + kMaxTileTok - 1) / kMaxTileTok};
}
// Byte offset of tile i in the activation buffer (tiles of ≤ kMaxTileTok tokens, each aligned).
inline size_t TileOffset(const TokenTiling& tt, size_t i, size_t cols, int sub) {
  return i * TileLayoutOf(cols, sub, kMaxTileTok).bytes;
}

}  // namespace HWY_NAMESPACE
}  // namespace chorus
#endif  // HWY_TARGET == HWY_AVX3_DL
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
