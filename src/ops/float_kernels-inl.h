// Per-target f32 kernels (portable Highway): rows → f32, row dots for few tokens, panel GEMM.
// Serves F32/F16/BF16 weights everywhere and quantized weights on targets without int8 dot products.
#if defined(CHORUS_OPS_FLOAT_KERNELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CHORUS_OPS_FLOAT_KERNELS_INL_H_
#undef CHORUS_OPS_FLOAT_KERNELS_INL_H_
#else
#define CHORUS_OPS_FLOAT_KERNELS_INL_H_
#endif

#include <algorithm>
#include <cstring>

#include "hwy/highway.h"
#include "ops/matmul_internal.h"  // Scratch
#include "ops/unpack-inl.h"       // UnpackBlocks

HWY_BEFORE_NAMESPACE();
namespace chorus {
namespace HWY_NAMESPACE {
namespace mm {  // matmul internals (names private to these kernels)
namespace hn = hwy::HWY_NAMESPACE;

inline int SubBlockOf(GgmlType t) { return t == GgmlType::kQ6_K ? 16 : 32; }
inline bool IsFloatType(GgmlType t) {
  return t == GgmlType::kF32 || t == GgmlType::kF16 || t == GgmlType::kBF16;
}

// Bytes of scratch RowToF32 needs for a row of `cols`.
inline size_t RowToF32Bytes(size_t cols) { return cols * (sizeof(float) + 1) + cols / 4 + 256; }

// Row of w as f32: F32 rows are returned in place, everything else is decoded into `scratch`.
inline const float* RowToF32(const WeightView& w, size_t r, uint8_t* scratch) {
  const uint8_t* row = w.data + r * w.row_bytes;
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(df), cols = w.cols;
  float* out = reinterpret_cast<float*>(scratch);
  size_t i = 0;
  switch (w.type) {
    case GgmlType::kF32:
      return reinterpret_cast<const float*>(row);
    case GgmlType::kF16: {
      const hn::Rebind<hwy::float16_t, decltype(df)> dh;
      const auto* src = reinterpret_cast<const hwy::float16_t*>(row);
      for (; i + N <= cols; i += N) hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, src + i)), df, out + i);
      for (; i < cols; ++i) out[i] = HalfAt(row + 2 * i);
      return out;
    }
    case GgmlType::kBF16: {
      const hn::Rebind<uint16_t, decltype(df)> d16;
      const hn::RebindToUnsigned<decltype(df)> du;
      const auto* src = reinterpret_cast<const uint16_t*>(row);
      for (; i + N <= cols; i += N) {
        const auto bits = hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, src + i)));
        hn::StoreU(hn::BitCast(df, bits), df, out + i);
      }
      for (; i < cols; ++i) {
        uint16_t h;
        std::memcpy(&h, row + 2 * i, 2);
        out[i] = Bf16ToF32(h);
      }
      return out;
    }
    default: {
      // Quantized: unpack to codes + (dw, m) per sub-block, then w = dw * q + m.
      const int sub = SubBlockOf(w.type);
      uint8_t* q = scratch + cols * sizeof(float);
      float* dw = reinterpret_cast<float*>(q + ((cols + 63) & ~size_t{63}));
      float* m = dw + cols / sub;
      UnpackBlocks(w.type, row, cols / GgmlTraitsOf(w.type).block_elems, q, dw, m);
      const hn::Rebind<uint8_t, decltype(df)> d8;
      const hn::RebindToSigned<decltype(df)> di;
      for (size_t s = 0; s < cols / sub; ++s) {
        const auto vd = hn::Set(df, dw[s]), vm = hn::Set(df, m[s]);
        size_t k = s * sub;
        const size_t end = k + sub;
        for (; k + N <= end; k += N) {
          const auto code = hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, q + k)));
          hn::StoreU(hn::MulAdd(code, vd, vm), df, out + k);
        }
        for (; k < end; ++k) out[k] = q[k] * dw[s] + m[s];
      }
      return out;
    }
  }
}

// y[t * ldy] = dot(wrow, x + t * ldx) for t < kT (kT ≤ 4).
template <int kT>
inline void RowDotF32(const float* wrow, size_t cols, const float* x, size_t ldx, float* y,
                      size_t ldy) {
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(df);
  using V = decltype(hn::Zero(df));
  V a0[kT], a1[kT];
  for (int t = 0; t < kT; ++t) a0[t] = a1[t] = hn::Zero(df);
  size_t k = 0;
  for (; k + 2 * N <= cols; k += 2 * N) {
    const V w0 = hn::LoadU(df, wrow + k), w1 = hn::LoadU(df, wrow + k + N);
    for (int t = 0; t < kT; ++t) {
      a0[t] = hn::MulAdd(w0, hn::LoadU(df, x + t * ldx + k), a0[t]);
      a1[t] = hn::MulAdd(w1, hn::LoadU(df, x + t * ldx + k + N), a1[t]);
    }
  }
  for (int t = 0; t < kT; ++t) {
    float s = hn::GetLane(hn::SumOfLanes(df, hn::Add(a0[t], a1[t])));
    for (size_t j = k; j < cols; ++j) s += wrow[j] * x[t * ldx + j];
    y[t * ldy] = s;
  }
}

// The two halves at p (d, m) as floats, with the target's f16 conversion.
HWY_INLINE void HalvesAt(const uint8_t* p, float* out) {
  const hn::CappedTag<float, 2> d2;
  if (hn::Lanes(d2) < 2) {  // HWY_SCALAR
    out[0] = HalfAt(p);
    out[1] = HalfAt(p + 2);
    return;
  }
  const hn::Rebind<hwy::float16_t, decltype(d2)> dh;
  hn::StoreU(hn::PromoteTo(d2, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p))), d2, out);
}

// Q4_0 / Q4_1 / Q8_0 rows without an int8 dot product: each block's w = d·q + m is formed in
// registers and FMA'd with x (no row buffer); kT ≤ 4 tokens share the decoded weights.
template <int kT>
inline void QuantRowDot(GgmlType type, const uint8_t* row, size_t nb, const float* x, size_t ldx, float* y,
                        size_t ldy) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<uint8_t, decltype(df)> d8;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::CappedTag<uint8_t, 16> d16;
  const size_t N = hn::Lanes(df);
  const size_t bs = GgmlTraitsOf(type).block_bytes;
  const bool q8 = type == GgmlType::kQ8_0, has_min = type == GgmlType::kQ4_1;
  using V = decltype(hn::Zero(df));
  V acc[kT];
  for (int t = 0; t < kT; ++t) acc[t] = hn::Zero(df);
  HWY_ALIGN uint8_t codes[32];
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * bs;
    float dm[2];
    HalvesAt(blk, dm);
    if (q8) {
      std::memcpy(codes, blk + 2, 32);
    } else {
      const uint8_t* qs = blk + (has_min ? 4 : 2);
      const auto low4 = hn::Set(d16, 0x0F);
      for (size_t j = 0; j < 16; j += hn::Lanes(d16)) {
        const auto v = hn::LoadU(d16, qs + j);
        hn::StoreU(hn::And(v, low4), d16, codes + j);
        hn::StoreU(hn::And(hn::ShiftRight<4>(v), low4), d16, codes + 16 + j);
      }
    }
    const V vd = hn::Set(df, dm[0]);
    const V vm = hn::Set(df, q8 ? 0.0f : has_min ? dm[1] : -8.0f * dm[0]);
    for (size_t k = 0; k < 32; k += N) {
      const auto u = hn::LoadU(d8, codes + k);
      const auto qi = q8 ? hn::PromoteTo(di, hn::BitCast(hn::Rebind<int8_t, decltype(df)>(), u)) : hn::PromoteTo(di, u);
      const V wv = hn::MulAdd(hn::ConvertTo(df, qi), vd, vm);
      for (int t = 0; t < kT; ++t) acc[t] = hn::MulAdd(wv, hn::LoadU(df, x + t * ldx + b * 32 + k), acc[t]);
    }
  }
  for (int t = 0; t < kT; ++t) y[t * ldy] = hn::GetLane(hn::SumOfLanes(df, acc[t]));
}

// Rows [r0, r1) × all tokens, a few tokens at a time, one decoded row at a time.
inline void RowsF32(const WeightView& w, const float* x, size_t n_tok, float* y, size_t r0,
                    size_t r1) {
  uint8_t* scratch = ops_internal::TileScratch().Get(RowToF32Bytes(w.cols));
  const size_t cols = w.cols, ld = w.rows;
  if (w.type == GgmlType::kQ4_0 || w.type == GgmlType::kQ4_1 || w.type == GgmlType::kQ8_0) {
    const size_t nb = cols / 32;
    for (size_t r = r0; r < r1; ++r) {
      const uint8_t* row = w.data + r * w.row_bytes;
      size_t t = 0;
      for (; t + 4 <= n_tok; t += 4) QuantRowDot<4>(w.type, row, nb, x + t * cols, cols, y + t * ld + r, ld);
      switch (n_tok - t) {
        case 3: QuantRowDot<3>(w.type, row, nb, x + t * cols, cols, y + t * ld + r, ld); break;
        case 2: QuantRowDot<2>(w.type, row, nb, x + t * cols, cols, y + t * ld + r, ld); break;
        case 1: QuantRowDot<1>(w.type, row, nb, x + t * cols, cols, y + t * ld + r, ld); break;
        default: break;
      }
    }
    return;
  }
  for (size_t r = r0; r < r1; ++r) {
    const float* row = RowToF32(w, r, scratch);
    size_t t = 0;
    for (; t + 4 <= n_tok; t += 4) RowDotF32<4>(row, cols, x + t * cols, cols, y + t * ld + r, ld);
    switch (n_tok - t) {
      case 3: RowDotF32<3>(row, cols, x + t * cols, cols, y + t * ld + r, ld); break;
      case 2: RowDotF32<2>(row, cols, x + t * cols, cols, y + t * ld + r, ld); break;
      case 1: RowDotF32<1>(row, cols, x + t * cols, cols, y + t * ld + r, ld); break;
      default: break;
    }
  }
}

// ---- Panel GEMM: a panel of R = Lanes rows as [cols][R] f32, times a token tile [cols][kTile].
inline constexpr int kFloatTile = 8;

inline size_t FloatPanelBytes(size_t cols) {
  const hn::ScalableTag<float> df;
  return cols * hn::Lanes(df) * sizeof(float) + RowToF32Bytes(cols) + 64;
}

// Packs rows [r0, r0 + R) (zero rows past w.rows) into panel [cols][R].
inline void PackFloatPanel(const WeightView& w, size_t r0, float* panel, uint8_t* row_scratch) {
  const hn::ScalableTag<float> df;
  const size_t R = hn::Lanes(df), cols = w.cols;
  for (size_t i = 0; i < R; ++i) {
    if (r0 + i >= w.rows) {
      for (size_t k = 0; k < cols; ++k) panel[k * R + i] = 0.0f;
      continue;
    }
    const float* row = RowToF32(w, r0 + i, row_scratch);
    for (size_t k = 0; k < cols; ++k) panel[k * R + i] = row[k];
  }
}

// acc[t] = sum_k panel[k] * xt[k * kTile + t]; stores the n_valid_rows × n_valid_tok results.
template <int kT>
inline void FloatMicroKernel(const float* panel, const float* xt, size_t cols, float* y, size_t ldy,
                             size_t n_rows, size_t n_tok) {
  const hn::ScalableTag<float> df;
  const size_t R = hn::Lanes(df);
  using V = decltype(hn::Zero(df));
  V acc[kT];
  for (int t = 0; t < kT; ++t) acc[t] = hn::Zero(df);
  for (size_t k = 0; k < cols; ++k) {
    const V wv = hn::Load(df, panel + k * R);
    const float* xk = xt + k * kFloatTile;
#pragma GCC unroll 8
    for (int t = 0; t < kT; ++t) acc[t] = hn::MulAdd(wv, hn::Set(df, xk[t]), acc[t]);
  }
  HWY_ALIGN float tmp[HWY_MAX_BYTES / sizeof(float)];
  for (size_t t = 0; t < n_tok; ++t) {
    if (n_rows == R) {
      hn::StoreU(acc[t], df, y + t * ldy);
    } else {
      hn::Store(acc[t], df, tmp);
      std::memcpy(y + t * ldy, tmp, n_rows * sizeof(float));
    }
  }
}

// x (n_tok, cols) → tiles of kFloatTile tokens, each [cols][kFloatTile] (zero-padded tokens).
inline void TransposeTokenTiles(const float* x, size_t n_tok, size_t cols, float* xt) {
  const size_t n_tiles = (n_tok + kFloatTile - 1) / kFloatTile;
  for (size_t i = 0; i < n_tiles; ++i) {
    float* dst = xt + i * cols * kFloatTile;
    for (size_t t = 0; t < kFloatTile; ++t) {
      const size_t tok = i * kFloatTile + t;
      for (size_t k = 0; k < cols; ++k)
        dst[k * kFloatTile + t] = tok < n_tok ? x[tok * cols + k] : 0.0f;
    }
  }
}

// Panels [p0, p1) of R rows × all token tiles.
inline void PanelsF32(const WeightView& w, const float* xt, size_t n_tok, float* y, size_t p0,
                      size_t p1) {
  const hn::ScalableTag<float> df;
  const size_t R = hn::Lanes(df), cols = w.cols;
  uint8_t* scratch = ops_internal::TileScratch().Get(FloatPanelBytes(cols));
  float* panel = reinterpret_cast<float*>(scratch);
  uint8_t* row_scratch = scratch + ((cols * R * sizeof(float) + 63) & ~size_t{63});
  for (size_t p = p0; p < p1; ++p) {
    const size_t r0 = p * R, n_rows = std::min(R, w.rows - r0);
    PackFloatPanel(w, r0, panel, row_scratch);
    for (size_t t0 = 0; t0 < n_tok; t0 += kFloatTile) {
      const size_t nt = std::min<size_t>(kFloatTile, n_tok - t0);
      const float* tile = xt + (t0 / kFloatTile) * cols * kFloatTile;
      float* yt = y + t0 * w.rows + r0;
      FloatMicroKernel<kFloatTile>(panel, tile, cols, yt, w.rows, n_rows, nt);
    }
  }
}

// The whole f32 path: few tokens → row dots; many → panels.
inline void MatMulF32Path(const WeightView& w, const float* x, size_t n_tok, float* y,
                          ThreadPool& pool) {
  const hn::ScalableTag<float> df;
  const size_t R = hn::Lanes(df);
  if (n_tok < kFloatTile) {
    ops_internal::ParallelRanges(pool, w.rows, 8, [&](size_t r0, size_t r1) { RowsF32(w, x, n_tok, y, r0, r1); });
    return;
  }
  const size_t n_tiles = (n_tok + kFloatTile - 1) / kFloatTile;
  float* xt = reinterpret_cast<float*>(
      ops_internal::ActScratch().Get(n_tiles * kFloatTile * w.cols * sizeof(float)));
  TransposeTokenTiles(x, n_tok, w.cols, xt);
  const size_t n_panels = (w.rows + R - 1) / R;
  ops_internal::ParallelRanges(pool, n_panels, 1, [&](size_t p0, size_t p1) { PanelsF32(w, xt, n_tok, y, p0, p1); });
}

}  // namespace mm
}  // namespace HWY_NAMESPACE
}  // namespace chorus
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
