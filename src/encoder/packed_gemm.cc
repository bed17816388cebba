// PackedGemm: Highway kernel (see packed_gemm.h). Per panel of 32 output rows and tile of kT tokens,
// the accumulators (kT × 32/N vectors) start at the bias; each k loads the panel's 32 weights once and
// broadcasts x[t][k] for each token. Panels are the outer loop, so each panel is read from memory once.
#include "encoder/packed_gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "encoder/packed_gemm.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace chorus {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <size_t kNV, size_t kT>
HWY_INLINE void Tile(const float* HWY_RESTRICT panel, const float* HWY_RESTRICT bias, const float* HWY_RESTRICT xt,
                     size_t cols, size_t nt, float* HWY_RESTRICT y, size_t ldy, size_t n_rows) {
  const hn::CappedTag<float, kPanelRows> d;
  constexpr size_t N = hn::MaxLanes(d);
  using V = hn::Vec<decltype(d)>;
  V acc[kT][kNV];
#pragma GCC unroll 16
  for (size_t v = 0; v < kNV; ++v) {
    const V b = hn::LoadU(d, bias + v * N);
#pragma GCC unroll 16
    for (size_t t = 0; t < kT; ++t) acc[t][v] = b;
  }
  for (size_t k = 0; k < cols; ++k) {
    V w[kNV];
#pragma GCC unroll 16
    for (size_t v = 0; v < kNV; ++v) w[v] = hn::LoadU(d, panel + k * kPanelRows + v * N);
    const float* xk = xt + k * kT;
#pragma GCC unroll 16
    for (size_t t = 0; t < kT; ++t) {
      const V xb = hn::Set(d, xk[t]);
#pragma GCC unroll 16
      for (size_t v = 0; v < kNV; ++v) acc[t][v] = hn::MulAdd(w[v], xb, acc[t][v]);
    }
  }
  HWY_ALIGN float tmp[kPanelRows];
#pragma GCC unroll 16
  for (size_t t = 0; t < kT; ++t) {
    if (t >= nt) break;
    if (n_rows == kPanelRows) {
      for (size_t v = 0; v < kNV; ++v) hn::StoreU(acc[t][v], d, y + t * ldy + v * N);
    } else {
      for (size_t v = 0; v < kNV; ++v) hn::StoreU(acc[t][v], d, tmp + v * N);
      std::memcpy(y + t * ldy, tmp, n_rows * sizeof(float));
    }
  }
}

void GemmPanels(const PackedMatrix& m, const float* x, size_t n_tok, float* y, size_t p0, size_t p1) {
  const hn::CappedTag<float, kPanelRows> d;
  constexpr size_t N = hn::MaxLanes(d);
  constexpr size_t kNV = kPanelRows / N;
  constexpr size_t kT = kNV <= 2 ? 12 : (kNV == 4 ? 2 : 1);
  static_assert(kPanelRows % N == 0, "panel rows must be a multiple of the vector length");
  // x → token tiles [cols][kT] (tokens past n_tok repeat the last one; their results are not stored),
  // so that each k's kT broadcasts read one contiguous run.
  const size_t n_tiles = (n_tok + kT - 1) / kT, cols = m.cols;
  thread_local std::vector<float> xt_buf;
  if (xt_buf.size() < n_tiles * cols * kT) xt_buf.resize(n_tiles * cols * kT);
  for (size_t i = 0; i < n_tiles; ++i) {
    float* dst = xt_buf.data() + i * cols * kT;
    for (size_t t = 0; t < kT; ++t) {
      const float* src = x + std::min(i * kT + t, n_tok - 1) * cols;
      for (size_t k = 0; k < cols; ++k) dst[k * kT + t] = src[k];
    }
  }
  for (size_t p = p0; p < p1; ++p) {
    const size_t r0 = p * kPanelRows, n_rows = std::min(kPanelRows, m.rows - r0);
    const float* panel = m.panels.data() + p * m.cols * kPanelRows;
    HWY_ALIGN float bias[kPanelRows] = {};
    std::memcpy(bias, m.bias.data() + r0, n_rows * sizeof(float));
    for (size_t t0 = 0; t0 < n_tok; t0 += kT) {
      const size_t nt = std::min(kT, n_tok - t0);
      Tile<kNV, kT>(panel, bias, xt_buf.data() + (t0 / kT) * cols * kT, cols, nt, y + t0 * m.rows + r0, m.rows,
                    n_rows);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace chorus
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace chorus {
HWY_EXPORT(GemmPanels);

PackedMatrix PackMatrix(const float* w, size_t rows, size_t cols, const std::vector<float>& bias) {
  PackedMatrix m;
  m.rows = rows;
  m.cols = cols;
  const size_t n_panels = (rows + kPanelRows - 1) / kPanelRows;
  m.panels.assign(n_panels * cols * kPanelRows, 0.0f);
  for (size_t r = 0; r < rows; ++r) {
    float* panel = m.panels.data() + (r / kPanelRows) * cols * kPanelRows;
    for (size_t k = 0; k < cols; ++k) panel[k * kPanelRows + r % kPanelRows] = w[r * cols + k];
  }
  m.bias = bias.empty() ? std::vector<float>(rows, 0.0f) : bias;
  return m;
}

void PackedGemm(const PackedMatrix& m, const float* x, size_t n_tok, float* y, ThreadPool& pool) {
  if (n_tok == 0 || m.rows == 0) return;
  const size_t n_panels = (m.rows + kPanelRows - 1) / kPanelRows;
  if (pool.size() == 1) {
    HWY_DYNAMIC_DISPATCH(GemmPanels)(m, x, n_tok, y, 0, n_panels);
    return;
  }
  pool.ParallelFor(n_panels, 1, [&](size_t p0, size_t p1) { HWY_DYNAMIC_DISPATCH(GemmPanels)(m, x, n_tok, y, p0, p1); });
}

void PackedGemmRef(const PackedMatrix& m, const float* x, size_t n_tok, float* y) {
  for (size_t t = 0; t < n_tok; ++t) {
    for (size_t r = 0; r < m.rows; ++r) {
      const float* panel = m.panels.data() + (r / kPanelRows) * m.cols * kPanelRows;
      double s = m.bias[r];
      for (size_t k = 0; k < m.cols; ++k) s += double(panel[k * kPanelRows + r % kPanelRows]) * x[t * m.cols + k];
      y[t * m.rows + r] = static_cast<float>(s);
    }
  }
}

}  // namespace chorus
#endif  // HWY_ONCE
