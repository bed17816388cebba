// Per-target f32 kernels (portable Highway) for F32/F16/BF16 weights: rows → f32, row dots.
// Invariant: a (row, token) result is the same chain of FMAs whatever n_tok (≤ 4 tokens share a
// converted row), so batched and alone are bit-identical.
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
#include "ops/unpack-inl.h"       // HalfAt

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
inline size_t RowToF32Bytes(size_t cols) { return cols * sizeof(float) + 64; }

// Row of w (a float type) as f32: F32 rows are returned in place, F16/BF16 decoded into `scratch`.
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
    default:
      return nullptr;  // quantized types take the int8 paths
  }
}

// y[t * ldy] = dot(wrow, x + t * ldx) for t < kT (kT ≤ 4): per token two accumulators over
// 2N-column steps, their lane sum, then the scalar tail — the same chain for any kT.
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

inline constexpr size_t kF32TokChunk = 32;  // tokens per pass over the rows (their x stays in L2)

// Rows [r0, r1) × all tokens: per chunk of tokens, each row converted once and dotted ≤ 4 at a time.
inline void RowsF32(const WeightView& w, const float* x, size_t n_tok, float* y, size_t r0, size_t r1) {
  uint8_t* scratch = ops_internal::TileScratch().Get(RowToF32Bytes(w.cols));
  const size_t cols = w.cols, ld = w.rows;
  for (size_t c0 = 0; c0 < n_tok; c0 += kF32TokChunk) {
    const size_t nc = std::min(kF32TokChunk, n_tok - c0);
    for (size_t r = r0; r < r1; ++r) {
      const float* row = RowToF32(w, r, scratch);
      ops_internal::TokenPasses<4>(nc, [&](size_t t0, size_t nt) {
        const float* xt = x + (c0 + t0) * cols;
        float* yt = y + (c0 + t0) * ld + r;
        switch (nt) {
          case 1: return RowDotF32<1>(row, cols, xt, cols, yt, ld);
          case 2: return RowDotF32<2>(row, cols, xt, cols, yt, ld);
          case 3: return RowDotF32<3>(row, cols, xt, cols, yt, ld);
          default: return RowDotF32<4>(row, cols, xt, cols, yt, ld);
        }
      });
    }
  }
}

inline void MatMulF32Path(const WeightView& w, const float* x, size_t n_tok, float* y, ThreadPool& pool) {
  ops_internal::ParallelRanges(pool, w.rows, 8, [&](size_t r0, size_t r1) { RowsF32(w, x, n_tok, y, r0, r1); });
}

}  // namespace mm
}  // namespace HWY_NAMESPACE
}  // namespace chorus
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
