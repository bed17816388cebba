// PackedMatrix: an f32 weight matrix (rows = outputs, cols = inputs, as nn.Linear stores it) repacked
// once into panels of kPanelRows rows laid out [cols][kPanelRows], with its bias; PackedGemm computes
// y = x·Wᵀ + b for a batch of tokens with a Highway register-tiled kernel that streams each panel once
// and reuses it for every token tile. Invariants: panels hold ceil(rows/32)*32 rows (zero padded);
// PackedGemm equals PackedGemmRef up to f32 summation order.
#pragma once
#include <cstddef>
#include <vector>

#include "util/thread_pool.h"  // ThreadPool

namespace chorus {

inline constexpr size_t kPanelRows = 32;

struct PackedMatrix {
  size_t rows = 0, cols = 0;
  std::vector<float> panels;  // (ceil(rows/kPanelRows), cols, kPanelRows)
  std::vector<float> bias;    // rows (zeros when the layer has none)
};

// w: (rows, cols) row-major; bias: rows values or empty (no bias).
PackedMatrix PackMatrix(const float* w, size_t rows, size_t cols, const std::vector<float>& bias);

// y (n_tok, rows) = x (n_tok, cols) · Wᵀ + b; panels are split over the pool's threads.
void PackedGemm(const PackedMatrix& m, const float* x, size_t n_tok, float* y, ThreadPool& pool);

// Scalar reference (double accumulation) on the packed layout.
void PackedGemmRef(const PackedMatrix& m, const float* x, size_t n_tok, float* y);

}  // namespace chorus
