// The int8 weight × int8 activation arithmetic that every SIMD int8 path reproduces bit for bit,
// written as plain scalar C++ (the reference twin, and the path of targets without int8 SIMD).
// Invariant: output (t, r) = Σ over the row's sub-blocks j, in order, starting from acc = 0:
//   acc = fma(float(Σ_i q_i · xq_i), dw_j · dx_j, acc);  acc = fma(m_j, s_j, acc)  (no m term for Q8_0)
// with exact integer sums, so the result depends on neither n_tok, the row grouping nor the threads.
#pragma once
#include <cstddef>
#include <cstdint>

#include "gguf/ggml_types.h"  // GgmlType
#include "ops/matmul.h"       // WeightView
#include "util/thread_pool.h"  // ThreadPool

namespace chorus::ops_internal {

inline size_t Align64(size_t n) { return (n + 63) & ~size_t{63}; }

// Weight sub-block (elements sharing dw, m): 16 for Q6_K, else 32. Activations are quantized per
// 32 columns whatever the sub-block.
inline int Int8SubOf(GgmlType t) { return t == GgmlType::kQ6_K ? 16 : 32; }
// Q8_0 codes are signed (w = dw · q); every other type has unsigned codes and a per-sub-block m.
inline bool Int8SignedCodes(GgmlType t) { return t == GgmlType::kQ8_0; }

// Per-token activation block, `stride` bytes per token:
//   q  [cols] int8, natural column order     xq = round_half_even(x / dx), |xq| ≤ 127
//   dx [cols / 32] f32 at dx_off              dx = max|x over the 32| / 127
//   s  [cols / sub] f32 at s_off              s_j = dx · Σ xq over sub-block j
struct Int8ActLayout {
  size_t dx_off, s_off, stride;
};
inline Int8ActLayout Int8ActLayoutOf(size_t cols, int sub) {
  Int8ActLayout l;
  l.dx_off = Align64(cols);
  l.s_off = l.dx_off + Align64(cols / 32 * sizeof(float));
  l.stride = l.s_off + Align64(cols / sub * sizeof(float));
  return l;
}

// x (n_tok, cols) f32 → act (n_tok, stride) in the layout above.
void QuantizeActsRef(const float* x, size_t cols, size_t n_tok, int sub, uint8_t* act);

// One weight row → q [cols] natural-order codes (u8; Q8_0: the int8 bits), dw and m [cols / sub]
// with w = dw · q + m (Q4_0: m = −8 dw, Q5_0: −16 dw, Q6_K: −32 dw, K-quants: d·sc and −dmin·mn).
void UnpackRowInt8(GgmlType type, const uint8_t* row, size_t cols, uint8_t* q, float* dw, float* m);

// The invariant's sum for one unpacked row and one token's activations.
float RowDotInt8Ref(GgmlType type, const uint8_t* q, const float* dw, const float* m, size_t cols,
                    const uint8_t* act);

// MatMul for ws[0, n) (one quantized type and cols) with the scalar kernels, rows over the pool.
void MatMulInt8Scalar(const WeightView* ws, float* const* ys, size_t n, const float* x, size_t n_tok,
                      ThreadPool& pool);

}  // namespace chorus::ops_internal
