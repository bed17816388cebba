// MatMul vs MatMulRef for every weight type, token counts, odd shapes and thread counts, within
// the derived bound of matmul_bound.h; results do not depend on the thread count.
#include "ops/matmul.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <random>
#include <vector>

#include "matmul_test_util.h"  // Matrix, RandomMatrix, RandomActs, ExpectWithinBound

namespace chorus {
namespace {

using test::Matrix;
using test::RandomActs;
using test::RandomMatrix;
using test::ExpectWithinBound;

std::vector<size_t> ColsFor(GgmlType type) {
  switch (GgmlTraitsOf(type).block_elems) {
    case 1: return {37, 64, 576};            // float types: any length, vector tails
    case 32: return {32, 96, 160, 576};      // 1..18 blocks: every tail of the 2- and 4-block steps
    default: return {256, 768};
  }
}

TEST(MatMulTest, MatchesReferenceEveryTypeShapeTokenCountAndThreads) {
  std::mt19937 rng(42);
  ThreadPool pools[3] = {ThreadPool(1), ThreadPool(2), ThreadPool(3)};
  for (GgmlType type : test::kAllTypes) {
    for (size_t cols : ColsFor(type)) {
      for (size_t rows : {1, 7, 33, 67}) {
        const Matrix m = RandomMatrix(type, rows, cols, rng);
        for (size_t n_tok : {1, 3, 8, 17, 64}) {
          if (rows * cols * n_tok > 600000 && n_tok > 8) continue;  // keep the reference quick
          const std::vector<float> x = RandomActs(n_tok, cols, rng);
          std::vector<float> want(n_tok * rows), got1(n_tok * rows, NAN);
          MatMulRef(m.view, x.data(), n_tok, want.data());
          MatMul(m.view, x.data(), n_tok, got1.data(), pools[0]);
          ExpectWithinBound(m.view, x, n_tok, got1, want, "1 thread");
          for (int p = 1; p < 3; ++p) {
            std::vector<float> got(n_tok * rows, NAN);
            MatMul(m.view, x.data(), n_tok, got.data(), pools[p]);
            ASSERT_EQ(got, got1) << "thread count changed the result: " << GgmlTraitsOf(type).name
                                 << " threads=" << p + 1 << " rows=" << rows << " cols=" << cols << " n_tok=" << n_tok;
          }
        }
      }
    }
  }
}

TEST(MatMulTest, LargeTileShapes) {
  // Rows not a multiple of the 16-row panel, token counts around the 12-token tile.
  std::mt19937 rng(5);
  ThreadPool pool(2);
  for (GgmlType type : {GgmlType::kQ4_1, GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kF16}) {
    const size_t cols = GgmlTraitsOf(type).block_elems == 32 ? 576 : 512;
    const Matrix m = RandomMatrix(type, 45, cols, rng);
    for (size_t n_tok : {5, 11, 12, 13, 24, 25, 40}) {
      const std::vector<float> x = RandomActs(n_tok, cols, rng);
      std::vector<float> want(n_tok * 45), got(n_tok * 45, NAN);
      MatMulRef(m.view, x.data(), n_tok, want.data());
      MatMul(m.view, x.data(), n_tok, got.data(), pool);
      ExpectWithinBound(m.view, x, n_tok, got, want, "tiles");
    }
  }
}

TEST(MatMulTest, PaddedRowStride) {
  std::mt19937 rng(9);
  ThreadPool pool(2);
  for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ8_0, GgmlType::kQ5_K, GgmlType::kBF16}) {
    const size_t cols = GgmlTraitsOf(type).block_elems == 256 ? 256 : 96;
    const Matrix m = RandomMatrix(type, 19, cols, rng, /*row_pad=*/6);
    for (size_t n_tok : {1, 2, 4, 9}) {
      const std::vector<float> x = RandomActs(n_tok, cols, rng);
      std::vector<float> want(n_tok * 19), got(n_tok * 19, NAN);
      MatMulRef(m.view, x.data(), n_tok, want.data());
      MatMul(m.view, x.data(), n_tok, got.data(), pool);
      ExpectWithinBound(m.view, x, n_tok, got, want, "padded rows");
    }
  }
}

TEST(MatMulTest, ZeroActivationsGiveZero) {
  std::mt19937 rng(3);
  ThreadPool pool(1);
  for (GgmlType type : test::kAllTypes) {
    const size_t cols = GgmlTraitsOf(type).block_elems == 256 ? 256 : 64;
    const Matrix m = RandomMatrix(type, 9, cols, rng);
    for (size_t n_tok : {1, 13}) {
      const std::vector<float> x(n_tok * cols, 0.0f);
      std::vector<float> got(n_tok * 9, NAN);
      MatMul(m.view, x.data(), n_tok, got.data(), pool);
      for (float v : got) ASSERT_EQ(v, 0.0f) << GgmlTraitsOf(type).name;
    }
  }
}

TEST(MatMulTest, NeverReadsPastTheLastRow) {
  // The matrix ends exactly where an inaccessible page begins: any over-read faults.
  std::mt19937 rng(17);
  ThreadPool pool(2);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  for (GgmlType type : test::kAllTypes) {
    for (size_t cols : ColsFor(type)) {
      const size_t rows = 5;
      const Matrix m = RandomMatrix(type, rows, cols, rng);
      const size_t bytes = m.bytes.size(), span = (bytes + page - 1) / page * page + page;
      void* region = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      ASSERT_NE(region, MAP_FAILED);
      uint8_t* guard = static_cast<uint8_t*>(region) + span - page;
      ASSERT_EQ(mprotect(guard, page, PROT_NONE), 0);
      uint8_t* data = guard - bytes;
      std::copy(m.bytes.begin(), m.bytes.end(), data);
      WeightView w = m.view;
      w.data = data;
      for (size_t n_tok : {1, 2, 4, 13}) {
        const std::vector<float> x = RandomActs(n_tok, cols, rng);
        std::vector<float> want(n_tok * rows), got(n_tok * rows);
        MatMulRef(w, x.data(), n_tok, want.data());
        MatMul(w, x.data(), n_tok, got.data(), pool);
        ExpectWithinBound(w, x, n_tok, got, want, "guard page");
      }
      munmap(region, span);
    }
  }
}

TEST(MatMulTest, ManyEqualsOneByOne) {
  // Q/K/V-like lists (odd row counts) and mixed-type lists (one dispatch per type, the other type last or
  // between two of the first: Gemma 3's q, k Q5_0 + v Q8_0).
  std::mt19937 rng(29);
  ThreadPool pools[2] = {ThreadPool(1), ThreadPool(3)};
  for (GgmlType type : {GgmlType::kQ4_1, GgmlType::kQ4_0, GgmlType::kQ8_0, GgmlType::kQ6_K, GgmlType::kF16}) {
    const size_t cols = GgmlTraitsOf(type).block_elems == 256 ? 512 : 576;
    std::vector<Matrix> ms;
    for (size_t rows : {37, 5, 21}) ms.push_back(RandomMatrix(type, rows, cols, rng));
    ms.push_back(RandomMatrix(GgmlTraitsOf(type).block_elems == 256 ? GgmlType::kQ4_K : GgmlType::kQ8_0, 9, cols, rng));
    const std::vector<std::vector<size_t>> orders = {{0, 1, 2}, {0, 1, 2, 3}, {0, 3, 1, 2}};
    for (const std::vector<size_t>& order : orders) {
      const size_t n_list = order.size();
      std::vector<WeightView> ws;
      for (size_t j : order) ws.push_back(ms[j].view);
      for (size_t n_tok : {1, 5, 13, 40}) {
        const std::vector<float> x = RandomActs(n_tok, cols, rng);
        for (ThreadPool& pool : pools) {
          std::vector<std::vector<float>> many(n_list), one(n_list);
          std::vector<float*> ys;
          for (size_t j = 0; j < n_list; ++j) {
            many[j].assign(n_tok * ws[j].rows, NAN);
            one[j].assign(n_tok * ws[j].rows, NAN);
            ys.push_back(many[j].data());
            MatMul(ws[j], x.data(), n_tok, one[j].data(), pool);
          }
          MatMulMany(ws, x.data(), n_tok, ys, pool);
          for (size_t j = 0; j < n_list; ++j)
            ASSERT_EQ(many[j], one[j]) << GgmlTraitsOf(type).name << " list=" << n_list << " j=" << j << " n_tok=" << n_tok;
        }
      }
    }
  }
}

TEST(MatMulTest, ReportsPath) { EXPECT_NE(std::string(MatMulPath()), ""); }

}  // namespace
}  // namespace chorus
