// Test helpers for the MatMul tests: random quantized matrices, activations like a normed hidden
// state, and the check against MatMulRef within the derived bound (matmul_bound.h).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "matmul_bound.h"     // OutputBound
#include "ops/matmul.h"       // WeightView
#include "quant_test_util.h"  // RandomRow, kAllTypes

namespace chorus::test {

struct Matrix {
  std::vector<uint8_t> bytes;
  WeightView view;
};

inline Matrix RandomMatrix(GgmlType type, size_t rows, size_t cols, std::mt19937& rng, size_t row_pad = 0) {
  const auto& tr = GgmlTraitsOf(type);
  const size_t packed = cols / tr.block_elems * tr.block_bytes, row_bytes = packed + row_pad;
  Matrix m;
  m.bytes.resize(rows * row_bytes);
  for (size_t r = 0; r < rows; ++r) {
    const std::vector<uint8_t> row = RandomRow(type, cols / tr.block_elems, rng);
    std::copy(row.begin(), row.end(), m.bytes.begin() + r * row_bytes);
  }
  m.view = WeightView{.type = type, .data = m.bytes.data(), .rows = rows, .cols = cols, .row_bytes = row_bytes};
  return m;
}

// Activations like a normed hidden state: mostly unit scale, a few outliers per row.
inline std::vector<float> RandomActs(size_t n_tok, size_t cols, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<size_t> pick(0, cols - 1);
  std::vector<float> x(n_tok * cols);
  for (auto& v : x) v = nd(rng);
  for (size_t t = 0; t < n_tok; ++t)
    for (int k = 0; k < 3; ++k) x[t * cols + pick(rng)] *= 20.0f;
  return x;
}

inline void ExpectWithinBound(const WeightView& w, const std::vector<float>& x, size_t n_tok,
                       const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  for (size_t t = 0; t < n_tok; ++t) {
    for (size_t r = 0; r < w.rows; ++r) {
      const double bound = OutputBound(w.type, w.data + r * w.row_bytes, x.data() + t * w.cols, w.cols);
      const double err = std::fabs(static_cast<double>(got[t * w.rows + r]) - want[t * w.rows + r]);
      ASSERT_LE(err, bound) << what << " " << GgmlTraitsOf(w.type).name << " rows=" << w.rows
                            << " cols=" << w.cols << " n_tok=" << n_tok << " t=" << t << " r=" << r
                            << " got=" << got[t * w.rows + r] << " want=" << want[t * w.rows + r];
    }
  }
}

}  // namespace chorus::test
