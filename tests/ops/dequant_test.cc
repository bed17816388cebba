// DequantizeRow vs an element-by-element decoder written from the layout description, every type.
#include "ops/dequant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "ops/matmul.h"          // EmbeddingRow, WeightView
#include "quant_test_util.h"     // RandomRow, DecodeElem, kAllTypes

namespace chorus {
namespace {

TEST(DequantTest, EveryTypeMatchesIndependentDecode) {
  std::mt19937 rng(1234);
  for (GgmlType type : test::kAllTypes) {
    const auto& tr = GgmlTraitsOf(type);
    const size_t n = 4 * 256;  // a multiple of every block size
    const std::vector<uint8_t> row = test::RandomRow(type, n / tr.block_elems, rng);
    std::vector<float> got(n);
    DequantizeRow(type, row.data(), got.data(), n);
    for (size_t e = 0; e < n; ++e) {
      const test::ElemDecode want = test::DecodeElem(type, row.data(), e);
      // The decoder may associate the products differently: allow a few ulps of the terms.
      const float tol = 4e-7f * (std::fabs(want.value) + want.min + want.scale * want.qmax) + 1e-30f;
      ASSERT_NEAR(got[e], want.value, tol) << tr.name << " element " << e;
    }
  }
}

TEST(DequantTest, HalfScalesDecodeExactly) {
  // Every finite half bit pattern through the F16 row path equals the IEEE definition.
  std::vector<uint8_t> row;
  std::vector<uint16_t> bits;
  for (uint32_t h = 0; h < 65536; ++h) {
    if (((h >> 10) & 31) == 31) continue;
    bits.push_back(static_cast<uint16_t>(h));
  }
  row.resize(bits.size() * 2);
  std::memcpy(row.data(), bits.data(), row.size());
  std::vector<float> got(bits.size());
  DequantizeRow(GgmlType::kF16, row.data(), got.data(), bits.size());
  for (size_t i = 0; i < bits.size(); ++i) ASSERT_EQ(got[i], test::HalfBits(bits[i])) << bits[i];
}

TEST(DequantTest, EmbeddingRowIsTheDequantizedRow) {
  std::mt19937 rng(7);
  const size_t rows = 5, cols = 256;
  for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ4_1, GgmlType::kQ6_K}) {
    const auto& tr = GgmlTraitsOf(type);
    const std::vector<uint8_t> data = test::RandomRow(type, rows * cols / tr.block_elems, rng);
    const size_t row_bytes = cols / tr.block_elems * tr.block_bytes;
    const WeightView w{.type = type, .data = data.data(), .rows = rows, .cols = cols, .row_bytes = row_bytes};
    std::vector<float> got(cols), want(cols);
    for (size_t r = 0; r < rows; ++r) {
      EmbeddingRow(w, r, got.data());
      DequantizeRow(type, data.data() + r * row_bytes, want.data(), cols);
      EXPECT_EQ(got, want);
    }
  }
}

TEST(DequantTest, MatMulTypes) {
  for (GgmlType type : test::kAllTypes) EXPECT_TRUE(IsMatMulType(type));
  EXPECT_FALSE(IsMatMulType(GgmlType::kQ2_K));
  EXPECT_FALSE(IsMatMulType(GgmlType::kQ8_K));
}

}  // namespace
}  // namespace chorus
