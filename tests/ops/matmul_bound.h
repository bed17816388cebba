// The error bound MatMul is held to against MatMulRef, derived from the formats (not tuned):
//  activation quantization — per 32 columns, q = round(x / dx), dx = max|x| / 127, so each
//    |x - dx q| ≤ dx / 2 and the output moves by at most Σ_c |w_c| dx_c / 2;
//  f32 rounding — kernels evaluate w = dw q + m as dw Σ q x + m Σ x (or dequantize and FMA); every
//    partial product is bounded by (|w| + |dw| qmax + |m|)(|x| + dx), accumulated over at most
//    cols + 16 f32 operations: γ ≤ (cols + 16) · 2⁻²⁴ per unit of that magnitude.
#pragma once
#include <algorithm>
#include <cmath>

#include "quant_test_util.h"  // DecodeElem

namespace chorus::test {

inline double OutputBound(GgmlType type, const uint8_t* row, const float* x, size_t cols) {
  const bool quantized = GgmlTraitsOf(type).block_elems > 1;
  double qerr = 0.0, mag = 0.0;
  for (size_t b = 0; b < cols; b += 32) {
    const size_t end = std::min(cols, b + 32);
    float amax = 0.0f;
    for (size_t c = b; c < end; ++c) amax = std::max(amax, std::fabs(x[c]));
    const double dx = quantized ? amax / 127.0 : 0.0;
    for (size_t c = b; c < end; ++c) {
      const ElemDecode e = DecodeElem(type, row, c);
      qerr += std::fabs(e.value) * dx / 2;
      mag += (std::fabs(e.value) + e.scale * e.qmax + e.min) * (std::fabs(x[c]) + dx);
    }
  }
  return qerr * (1 + 1e-5) + (cols + 16) * std::ldexp(1.0, -24) * mag;
}

}  // namespace chorus::test
