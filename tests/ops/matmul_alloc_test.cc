// MatMul / MatMulMany allocate nothing once their scratch has grown (steady-state decode/prefill).
// This binary counts global operator new calls, hence its own executable.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "ops/matmul.h"

namespace {
std::atomic<long> g_news{0};
}  // namespace

void* operator new(size_t n) {
  g_news.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
// GCC (sanitizer builds) takes the free() here for a mismatch with the replaced operator new above,
// which allocates with malloc: they match.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace chorus {
namespace {

TEST(MatMulAllocTest, SteadyStateAllocatesNothing) {
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (GgmlType type : {GgmlType::kQ4_1, GgmlType::kQ4_0, GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ6_K,
                          GgmlType::kQ5_0, GgmlType::kF16, GgmlType::kF32}) {
      const size_t rows = 70, cols = GgmlTraitsOf(type).block_elems == 256 ? 512 : 576;
      const size_t rb = *GgmlRowBytes(type, cols);
      std::vector<uint8_t> w(rows * rb, 0);
      const WeightView v{.type = type, .data = w.data(), .rows = rows, .cols = cols, .row_bytes = rb};
      const WeightView vs[2] = {v, v};
      for (size_t n_tok : {1, 3, 9, 40}) {
        std::vector<float> x(n_tok * cols, 0.25f), y(n_tok * rows), y2(n_tok * rows);
        float* ys[2] = {y.data(), y2.data()};
        MatMul(v, x.data(), n_tok, y.data(), pool);  // first calls grow the thread-local scratch
        MatMulMany(vs, x.data(), n_tok, ys, pool);
        const long before = g_news.load();
        for (int i = 0; i < 5; ++i) {
          MatMul(v, x.data(), n_tok, y.data(), pool);
          MatMulMany(vs, x.data(), n_tok, ys, pool);
        }
        EXPECT_EQ(g_news.load() - before, 0) << GgmlTraitsOf(type).name << " n_tok=" << n_tok << " threads=" << threads;
      }
    }
  }
}

}  // namespace
}  // namespace chorus
