// PackedGemm (Highway, register-tiled panels) against PackedGemmRef (scalar, double accumulation) and
// against the unpacked product, on shapes that leave partial panels and partial token tiles, with 1
// and 3 threads.
#include "encoder/packed_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace chorus {
namespace {

void Check(size_t rows, size_t cols, size_t n_tok, int threads) {
  std::mt19937 rng(static_cast<uint32_t>(rows * 131 + cols * 7 + n_tok));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> w(rows * cols), b(rows), x(n_tok * cols);
  for (float& v : w) v = nd(rng);
  for (float& v : b) v = nd(rng);
  for (float& v : x) v = nd(rng);
  const PackedMatrix m = PackMatrix(w.data(), rows, cols, b);
  std::vector<float> y(n_tok * rows, -1.0f), ref(n_tok * rows);
  ThreadPool pool(threads);
  PackedGemm(m, x.data(), n_tok, y.data(), pool);
  PackedGemmRef(m, x.data(), n_tok, ref.data());
  for (size_t t = 0; t < n_tok; ++t) {
    for (size_t r = 0; r < rows; ++r) {
      double direct = b[r];  // from the unpacked matrix: checks the packing too
      for (size_t k = 0; k < cols; ++k) direct += double(w[r * cols + k]) * x[t * cols + k];
      const double tol = 1e-5 * std::sqrt(double(cols)) * 4;
      ASSERT_NEAR(ref[t * rows + r], direct, 1e-4) << "ref t=" << t << " r=" << r;
      ASSERT_NEAR(y[t * rows + r], direct, tol) << rows << "x" << cols << " n_tok=" << n_tok << " t=" << t << " r=" << r;
    }
  }
}

TEST(PackedGemm, MatchesReferenceOnOddShapes) {
  for (size_t rows : {1, 15, 16, 17, 48, 100})
    for (size_t cols : {1, 7, 64, 129})
      for (size_t n_tok : {1, 5, 12, 13, 31})
        for (int threads : {1, 3}) Check(rows, cols, n_tok, threads);
}

TEST(PackedGemm, MiniLmShapes) {
  Check(384, 384, 32, 1);
  Check(1536, 384, 7, 2);
  Check(384, 1536, 25, 1);
}

TEST(PackedGemm, NoBiasMeansZeroBias) {
  const std::vector<float> w = {1, 2, 3, 4, 5, 6};  // 2 x 3
  const PackedMatrix m = PackMatrix(w.data(), 2, 3, {});
  const std::vector<float> x = {1, 0, -1};
  std::vector<float> y(2);
  ThreadPool pool(1);
  PackedGemm(m, x.data(), 1, y.data(), pool);
  EXPECT_EQ(y, (std::vector<float>{-2, -2}));
}

}  // namespace
}  // namespace chorus
