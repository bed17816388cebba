// The AVX-512 VNNI path's Q8_0 products keep their own lane order (not int8_ref.h's). This test pins
// that order bit for bit with a scalar model, so a change of the kernel's arithmetic cannot pass unseen.
// Scalar model (src/ops/vnni_gemv-inl.h, Q8Rows):
//   - x per 32 columns: dx = max|x| / 127, q = round_half_even(x · (127 / max|x|)), saturated to int8.
//   - 16 f32 lanes per (row, token). A pair of blocks (2p, 2p + 1) gives lane j the exact sum of 4 products,
//     block 2p + j / 8, columns 4 · (j % 8) .. + 3:
//     lane = fma(float(sum), f32(d_block) · dx_block, lane).
//   - A row's last pair of an odd block count has a zero block (d = 0, dx = 0).
//   - The 16 lanes are summed as a balanced tree of adjacent pairs: ((l0 + l1) + (l2 + l3)) + ...
// On CPUs without AVX-512 VNNI + VBMI the test is skipped.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "matmul_test_util.h"  // RandomMatrix, RandomActs
#include "ops/matmul.h"
#include "util/fp16.h"  // F16ToF32
#include "util/thread_pool.h"

namespace chorus {
namespace {

// One token's activations as the kernel quantizes them (Quant32): codes and dx per 32 columns.
void QuantizeLikeVnni(const float* x, size_t cols, std::vector<int8_t>* q, std::vector<float>* dx) {
  q->assign(cols, 0);
  dx->assign(cols / 32, 0.0f);
  for (size_t b = 0; b < cols / 32; ++b) {
    float mx = 0.0f;
    for (int i = 0; i < 32; ++i) mx = std::fmax(mx, std::fabs(x[32 * b + i]));
    const float id = mx > 0.0f ? 127.0f / mx : 0.0f;
    for (int i = 0; i < 32; ++i) {
      const float v = std::nearbyint(x[32 * b + i] * id);  // round half to even (the default mode)
      (*q)[32 * b + i] = static_cast<int8_t>(std::fmax(-128.0f, std::fmin(127.0f, v)));
    }
    (*dx)[b] = mx / 127.0f;
  }
}

float ModelQ8Row(const uint8_t* row, size_t cols, const std::vector<int8_t>& q, const std::vector<float>& dx) {
  constexpr size_t kBS = 34;  // BlockQ8_0: f16 d, 32 int8 codes
  const size_t nb = cols / 32;
  float lane[16] = {};
  for (size_t p = 0; p < (nb + 1) / 2; ++p) {
    for (int j = 0; j < 16; ++j) {
      const size_t b = 2 * p + j / 8;
      int32_t sum = 0;
      float scale = 0.0f;
      if (b < nb) {
        const uint8_t* blk = row + b * kBS;
        for (int k = 0; k < 4; ++k) {
          const size_t c = 4 * (j % 8) + k;
          sum += static_cast<int8_t>(blk[2 + c]) * q[32 * b + c];
        }
        uint16_t h;
        std::memcpy(&h, blk, 2);
        scale = F16ToF32(h) * dx[b];
      }
      lane[j] = std::fma(static_cast<float>(sum), scale, lane[j]);
    }
  }
  for (int width = 16; width > 1; width /= 2)
    for (int j = 0; j < width / 2; ++j) lane[j] = lane[2 * j] + lane[2 * j + 1];
  return lane[0];
}

TEST(VnniQ8Lanes, MatMulEqualsTheLaneOrderModelBitForBit) {
  if (std::string(MatMulPath()) != "AVX-512 VNNI") GTEST_SKIP() << "kernel path is " << MatMulPath();
  std::mt19937 rng(1234);
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    // 20 and 19 blocks (an odd count: a zero block in the last pair); rows below and above the
    // 4-stream split (4 · 16 rows) and not a multiple of 16.
    for (size_t cols : {size_t(640), size_t(608)}) {
      for (size_t rows : {size_t(37), size_t(200)}) {
        const test::Matrix m = test::RandomMatrix(GgmlType::kQ8_0, rows, cols, rng);
        for (size_t n_tok : {size_t(1), size_t(3), size_t(7)}) {
          const std::vector<float> x = test::RandomActs(n_tok, cols, rng);
          std::vector<float> y(n_tok * rows);
          MatMul(m.view, x.data(), n_tok, y.data(), pool);
          for (size_t t = 0; t < n_tok; ++t) {
            std::vector<int8_t> q;
            std::vector<float> dx;
            QuantizeLikeVnni(x.data() + t * cols, cols, &q, &dx);
            for (size_t r = 0; r < rows; ++r) {
              const float want = ModelQ8Row(m.view.data + r * m.view.row_bytes, cols, q, dx);
              ASSERT_EQ(std::bit_cast<uint32_t>(y[t * rows + r]), std::bit_cast<uint32_t>(want))
                  << "row " << r << " token " << t << " of " << n_tok << ", cols " << cols << ", rows " << rows
                  << ", threads " << threads << ": " << y[t * rows + r] << " vs " << want;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace chorus
