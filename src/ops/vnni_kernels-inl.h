// AVX3_DL path for quantized weights: quantize x once, then decode kernels (Q4_0/Q4_1/Q8_0 with
// ≤ kDecodeMaxTok tokens) or the VNNI panel GEMM (everything else), rows split over the pool.
#if defined(CHORUS_OPS_VNNI_KERNELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CHORUS_OPS_VNNI_KERNELS_INL_H_
#undef CHORUS_OPS_VNNI_KERNELS_INL_H_
#else
#define CHORUS_OPS_VNNI_KERNELS_INL_H_
#endif

#include <algorithm>

#include "hwy/highway.h"
#include "ops/float_kernels-inl.h"  // MatMulF32Path, SubBlockOf
#include "ops/matmul_internal.h"    // Scratch
#include "ops/vnni_act-inl.h"
#include "ops/vnni_gemm-inl.h"
#include "ops/vnni_gemv-inl.h"

HWY_BEFORE_NAMESPACE();
#if HWY_TARGET == HWY_AVX3_DL
#pragma GCC target("avx512vnni")

namespace chorus {
namespace HWY_NAMESPACE {

// Q4_0/Q4_1 (Q8_0) with ≤ 12 (8) tokens take the decode kernels, ≤ 4 tokens per pass over the
// rows; beyond that the panel GEMM's packing pays for itself (measured crossovers).
inline size_t DecodeMaxTok(GgmlType t) { return t == GgmlType::kQ8_0 ? 8 : 12; }

// The decode kernels need VBMI (vpermt2b) and VNNI; Highway's AVX3_DL implies both on every CPU
// we know of, but check once rather than trust it.
inline bool HaveVnniVbmi() {
  static const bool ok = __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vbmi");
  return ok;
}

template <int kT>
void DecodeRows(const WeightView& w, const uint8_t* act, size_t ld_act, float* y, size_t r0, size_t r1) {
  const size_t nb = w.cols / 32;
  switch (w.type) {
    case GgmlType::kQ4_0:
      if (w.row_bytes == nb * 18) return Q4Stream<18, false, kT>(w.data, nb, r0, r1, act, ld_act, w.cols, y, w.rows);
      return Q4Rows<18, false, kT>(w.data, w.row_bytes, nb, r0, r1, act, ld_act, w.cols, y, w.rows);
    case GgmlType::kQ4_1:
      if (w.row_bytes == nb * 20) return Q4Stream<20, true, kT>(w.data, nb, r0, r1, act, ld_act, w.cols, y, w.rows);
      return Q4Rows<20, true, kT>(w.data, w.row_bytes, nb, r0, r1, act, ld_act, w.cols, y, w.rows);
    default:
      return Q8Rows<kT>(w.data, w.row_bytes, nb, r0, r1, act, ld_act, w.cols, y, w.rows);
  }
}

inline void DecodePath(const WeightView& w, const float* x, size_t n_tok, float* y, ThreadPool& pool) {
  const bool q8 = w.type == GgmlType::kQ8_0;
  const size_t ld = q8 ? Biased2LayoutOf(w.cols).stride : Split4LayoutOf(w.cols).stride;
  uint8_t* act = ops_internal::ActScratch().Get(ld * n_tok);
  if (q8) {
    QuantizeBiased2(x, w.cols, n_tok, act);
  } else {
    QuantizeSplit4(x, w.cols, n_tok, act);
  }
  const size_t passes = (n_tok + 3) / 4;
  pool.ParallelFor(w.rows, 16, [&](size_t r0, size_t r1) {
    for (size_t i = 0; i < passes; ++i) {
      const size_t t0 = n_tok * i / passes, nt = n_tok * (i + 1) / passes - t0;
      const uint8_t* a = act + t0 * ld;
      float* yt = y + t0 * w.rows;
      switch (nt) {
        case 1: DecodeRows<1>(w, a, ld, yt, r0, r1); break;
        case 2: DecodeRows<2>(w, a, ld, yt, r0, r1); break;
        case 3: DecodeRows<3>(w, a, ld, yt, r0, r1); break;
        default: DecodeRows<4>(w, a, ld, yt, r0, r1); break;
      }
    }
  });
}

inline void GemmPath(const WeightView& w, const float* x, size_t n_tok, float* y, ThreadPool& pool) {
  const int sub = SubBlockOf(w.type);
  const size_t cols = w.cols;
  const TokenTiling tt = TokenTilingOf(n_tok);
  const size_t tile_bytes = TileLayoutOf(cols, sub, kMaxTileTok).bytes;
  uint8_t* act = ops_internal::ActScratch().Get(tile_bytes * tt.n_tiles);
  auto quantize = [&](size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; ++i) QuantizeTile(x, cols, tt.Start(i), tt.Size(i), sub, act + i * tile_bytes);
  };
  if (n_tok >= 32) {
    pool.ParallelFor(tt.n_tiles, 1, quantize);
  } else {
    quantize(0, tt.n_tiles);
  }
  // Work items: (panel, group of tiles); a thread's items are consecutive, so it packs each of its
  // panels once. Split tiles only when there are too few panels to keep every thread busy.
  const size_t n_panels = (w.rows + kPanelRows - 1) / kPanelRows;
  const size_t want = static_cast<size_t>(pool.size()) * 4;
  const size_t tile_groups = std::min(tt.n_tiles, std::max<size_t>(1, (want + n_panels - 1) / n_panels));
  pool.ParallelFor(n_panels * tile_groups, 1, [&](size_t i0, size_t i1) {
    uint8_t* scratch = ops_internal::TileScratch().Get(PanelScratchBytes(cols, sub));
    uint8_t* panel = scratch;
    uint8_t* tmp = scratch + Align64(PanelBytes(cols, sub));
    size_t packed = ~size_t{0};
    for (size_t i = i0; i < i1; ++i) {
      const size_t p = i / tile_groups, grp = i % tile_groups;
      if (p != packed) {
        if (sub == 32) {
          PackVnniPanel<32>(w, p * kPanelRows, panel, tmp);
        } else {
          PackVnniPanel<16>(w, p * kPanelRows, panel, tmp);
        }
        packed = p;
      }
      const size_t r0 = p * kPanelRows, n_rows = std::min(kPanelRows, w.rows - r0);
      const size_t t_begin = tt.n_tiles * grp / tile_groups, t_end = tt.n_tiles * (grp + 1) / tile_groups;
      for (size_t ti = t_begin; ti < t_end; ++ti) {
        float* yt = y + tt.Start(ti) * w.rows + r0;
        const uint8_t* tile = act + ti * tile_bytes;
        if (sub == 32) {
          VnniTile<32>(tt.Size(ti), panel, cols, tile, yt, w.rows, n_rows);
        } else {
          VnniTile<16>(tt.Size(ti), panel, cols, tile, yt, w.rows, n_rows);
        }
      }
    }
  });
}

inline void MatMulVnniPath(const WeightView& w, const float* x, size_t n_tok, float* y, ThreadPool& pool) {
  if (!HaveVnniVbmi()) return MatMulF32Path(w, x, n_tok, y, pool);
  const bool decode_type = w.type == GgmlType::kQ4_0 || w.type == GgmlType::kQ4_1 || w.type == GgmlType::kQ8_0;
  if (decode_type && n_tok <= DecodeMaxTok(w.type)) return DecodePath(w, x, n_tok, y, pool);
  GemmPath(w, x, n_tok, y, pool);
}

}  // namespace HWY_NAMESPACE
}  // namespace chorus
#endif  // HWY_TARGET == HWY_AVX3_DL
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
