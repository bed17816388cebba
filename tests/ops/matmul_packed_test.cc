// Repacked Q4_0 / Q4_1 / Q8_0 weights (ops/repack.h): the layout holds the file's bits, and MatMul reading it
// (the AVX-512 VNNI kernels, int8_packed-inl.h) equals the int8 twin on the original bit for bit, for
// any n_tok, row count, thread count and grouping (MatMulMany). The kernel tests skip on CPUs whose
// path does not read packed weights (MatMulReadsPacked).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "matmul_test_util.h"  // Matrix, RandomMatrix, RandomActs
#include "ops/int8_ref.h"      // UnpackRowInt8
#include "ops/matmul.h"
#include "ops/repack.h"
#include "util/aligned_buffer.h"  // AlignedBuffer
#include "util/thread_pool.h"     // ThreadPool

namespace chorus {
namespace {

using test::Matrix;
using test::RandomActs;
using test::RandomMatrix;

constexpr GgmlType kTypes[] = {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ8_0};

struct Packed {
  Matrix m;
  AlignedBuffer<uint8_t> buf;
};

Packed MakePacked(GgmlType type, size_t rows, size_t cols, std::mt19937& rng, size_t row_pad = 0) {
  Packed p{RandomMatrix(type, rows, cols, rng, row_pad), AlignedBuffer<uint8_t>(0)};
  p.buf.Resize(RepackedBytes(p.m.view));
  RepackPanels(p.m.view, p.buf.data());
  p.m.view.packed = p.buf.data();
  return p;
}

float HalfToFloat(uint16_t h) { return static_cast<float>(std::bit_cast<_Float16>(h)); }

TEST(RepackTest, LayoutHoldsEveryRowsCodesAndScales) {
  // Reads repack.h's documented layout back and compares it with the scalar unpacking of the rows.
  std::mt19937 rng(5);
  for (GgmlType type : kTypes) {
    const size_t rows = 37, cols = 96, nb = cols / 32;
    const Packed p = MakePacked(type, rows, cols, rng, /*row_pad=*/4);
    const size_t bb = PackedBlockBytes(type), scales = type == GgmlType::kQ8_0 ? 512 : 256;
    ASSERT_EQ(RepackedBytes(p.m.view), 3 * nb * bb);
    for (size_t r = 0; r < 48; ++r) {
      std::vector<uint8_t> q(cols);
      std::vector<float> dw(nb), mn(nb);
      if (r < rows)
        ops_internal::UnpackRowInt8(type, p.m.view.data + r * p.m.view.row_bytes, cols, q.data(), dw.data(), mn.data());
      const size_t panel = r / 16, i = r % 16;
      for (size_t b = 0; b < nb; ++b) {
        const uint8_t* blk = p.buf.data() + (panel * nb + b) * bb;
        for (size_t e = 0; e < 32; ++e) {
          uint8_t code;
          if (type == GgmlType::kQ8_0) {
            code = r < rows ? blk[64 * (e / 4) + 4 * i + e % 4] ^ 0x80 : blk[64 * (e / 4) + 4 * i + e % 4];
          } else {
            const uint8_t byte = blk[64 * ((e % 16) / 4) + 4 * i + e % 4];
            code = e < 16 ? byte & 0x0F : byte >> 4;
          }
          ASSERT_EQ(code, r < rows ? q[32 * b + e] : 0) << "r=" << r << " b=" << b << " e=" << e;
        }
        uint16_t d, m;
        std::memcpy(&d, blk + scales + 2 * i, 2);
        std::memcpy(&m, blk + scales + 32 + 2 * i, 2);
        if (r >= rows) {
          ASSERT_EQ(d, 0);
          ASSERT_EQ(m, 0);
          continue;
        }
        ASSERT_EQ(HalfToFloat(d), dw[b]) << "r=" << r << " b=" << b;
        if (type == GgmlType::kQ4_1) ASSERT_EQ(HalfToFloat(m), mn[b]) << "r=" << r << " b=" << b;
        else ASSERT_EQ(m, 0);
      }
    }
  }
}

TEST(MatMulPackedTest, EqualsTheInt8TwinBitwise) {
  std::mt19937 rng(11);
  for (GgmlType type : kTypes) {
    if (!MatMulReadsPacked(type)) GTEST_SKIP() << "this CPU's path does not read packed weights: " << MatMulPath();
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      for (size_t rows : {1, 16, 37, 192}) {
        const Packed p = MakePacked(type, rows, rows == 37 ? 96 : 576, rng, rows == 37 ? 6 : 0);
        for (size_t n_tok : {1, 2, 3, 4, 5, 15, 64, 70}) {
          const std::vector<float> x = RandomActs(n_tok, p.m.view.cols, rng);
          std::vector<float> twin(n_tok * rows), got(n_tok * rows, NAN);
          MatMulInt8Ref(p.m.view, x.data(), n_tok, twin.data());
          MatMul(p.m.view, x.data(), n_tok, got.data(), pool);
          for (size_t i = 0; i < got.size(); ++i)
            ASSERT_EQ(got[i], twin[i]) << GgmlTraitsOf(type).name << " threads=" << threads << " rows=" << rows
                                       << " n_tok=" << n_tok << " t=" << i / rows << " r=" << i % rows;
        }
      }
    }
  }
}

TEST(MatMulPackedTest, ReadsThePackedCopyNotTheRows) {
  // A view whose packed copy holds other weights gives those weights' results, not its rows': the
  // packed path is the one the tests above exercised.
  std::mt19937 rng(13);
  ThreadPool pool(2);
  for (GgmlType type : kTypes) {
    if (!MatMulReadsPacked(type)) GTEST_SKIP() << "this CPU's path does not read packed weights: " << MatMulPath();
    const Packed a = MakePacked(type, 48, 256, rng), b = MakePacked(type, 48, 256, rng);
    WeightView mixed = a.m.view;
    mixed.packed = b.buf.data();
    const std::vector<float> x = RandomActs(3, 256, rng);
    std::vector<float> want(3 * 48), got(3 * 48);
    MatMulInt8Ref(b.m.view, x.data(), 3, want.data());
    MatMul(mixed, x.data(), 3, got.data(), pool);
    EXPECT_EQ(got, want);
    MatMulInt8Ref(a.m.view, x.data(), 3, want.data());
    EXPECT_NE(got, want);
  }
}

TEST(MatMulPackedTest, ManyMatricesPackedAndNotEqualAlone) {
  // MatMulMany groups packed views apart from unpacked ones of the same type and cols.
  std::mt19937 rng(17);
  ThreadPool pool(2);
  const Packed q = MakePacked(GgmlType::kQ4_1, 64, 576, rng), k = MakePacked(GgmlType::kQ4_1, 24, 576, rng);
  Matrix v = RandomMatrix(GgmlType::kQ4_1, 40, 576, rng);
  for (size_t n_tok : {1, 6}) {
    const std::vector<float> x = RandomActs(n_tok, 576, rng);
    const WeightView ws[3] = {q.m.view, v.view, k.m.view};
    std::vector<float> y[3], alone[3];
    float* yp[3];
    for (int j = 0; j < 3; ++j) {
      y[j].assign(n_tok * ws[j].rows, NAN);
      alone[j].assign(n_tok * ws[j].rows, NAN);
      yp[j] = y[j].data();
      MatMul(ws[j], x.data(), n_tok, alone[j].data(), pool);
    }
    MatMulMany(ws, x.data(), n_tok, yp, pool);
    for (int j = 0; j < 3; ++j) EXPECT_EQ(y[j], alone[j]) << "matrix " << j << " n_tok=" << n_tok;
  }
}

}  // namespace
}  // namespace chorus
