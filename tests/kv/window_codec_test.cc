// Native-window row codecs: f16 and q8 rows, and that the rows attention reads at append time are
// exactly the rows decoded later from the stored window (so no reader depends on when it reads).
#include "kv/window_codec.h"

#include <gtest/gtest.h>
#include <hwy/targets.h>  // SetSupportedTargetsForTest, SupportedAndGeneratedTargets

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "util/fp16.h"

namespace chorus {
namespace {

constexpr size_t kH = 3, kD = 64, kKv = kH * kD;

TEST(WindowCodec, RowBytes) {
  EXPECT_EQ(WindowRowBytes(WindowFormat::kF16, kH, kD), 384u);
  EXPECT_EQ(WindowRowBytes(WindowFormat::kQ8, kH, kD), 198u);  // 3 × (2 + 64)
}

TEST(WindowCodec, AppendTimeRowsEqualDecodedRows) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  const size_t n = 7;
  std::vector<float> x(n * kKv);
  for (auto& v : x) v = nd(rng) * 3.0f;
  x[5] = 1e6f;   // beyond fp16: clamped
  x[70] = 0.0f;
  for (WindowFormat f : {WindowFormat::kF16, WindowFormat::kQ8}) {
    std::vector<uint8_t> stored(n * WindowRowBytes(f, kH, kD));
    std::vector<uint16_t> nat(n * kKv), again(n * kKv);
    EncodeWindowRows(f, kH, kD, x.data(), n, stored.data(), nat.data());
    DecodeWindowRows(f, kH, kD, stored.data(), n, again.data());
    EXPECT_EQ(nat, again) << WindowFormatName(f);
    for (size_t j = 0; j < n; ++j) {
      for (size_t h = 0; h < kH; ++h) {
        float absmax = 0;
        for (size_t c = 0; c < kD; ++c) absmax = std::max(absmax, std::min(std::fabs(x[j * kKv + h * kD + c]), 65504.0f));
        // q8: half a step of absmax/127 plus fp16 rounding of the scale and of the result.
        const float tol = f == WindowFormat::kQ8 ? absmax / 127.0f * 0.51f + absmax * 2e-3f : absmax * 1e-3f;
        for (size_t c = 0; c < kD; ++c) {
          const size_t i = j * kKv + h * kD + c;
          const float want = std::clamp(x[i], -65504.0f, 65504.0f);
          EXPECT_NEAR(F16ToF32(nat[i]), want, tol) << WindowFormatName(f) << " " << i;
        }
      }
    }
  }
}

// The dispatched (SIMD) rows are the scalar reference's bits: ties between codes, subnormal and
// zero scales, values beyond fp16, ±inf and NaN included. One test per compiled target this CPU
// runs; a target without SIMD rows runs the reference itself, so its test is skipped, saying so.
class WindowCodecTarget : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override { hwy::SetSupportedTargetsForTest(GetParam()); }
  void TearDown() override { hwy::SetSupportedTargetsForTest(0); }
};

TEST_P(WindowCodecTarget, SimdRowsEqualReferenceBits) {
  if (!WindowCodecHasSimdRows())
    GTEST_SKIP() << hwy::TargetName(GetParam()) << " has no SIMD window rows (the scalar reference runs there): "
                 << "nothing to compare";
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  const size_t n = 31;
  std::vector<float> x(n * kKv);
  for (size_t j = 0; j < n; ++j) {
    const float mag = std::ldexp(1.0f, int(j % 16) * 3 - 30);  // 2^-30 .. 2^15: zero/subnormal scales too
    for (size_t i = 0; i < kKv; ++i) x[j * kKv + i] = nd(rng) * mag;
  }
  // Row 3, head 0: exact ties of the code rounding (absmax 127 → scale 1: x = k + 0.5).
  for (size_t c = 0; c < kD; ++c) x[3 * kKv + c] = float(int(c) - 32) + 0.5f;
  x[3 * kKv + 5] = 127.0f;
  x[4 * kKv + 1] = INFINITY;
  x[4 * kKv + kD + 2] = -INFINITY;
  x[5 * kKv + 7] = NAN;
  x[6 * kKv + 9] = 1e6f;
  x[7 * kKv + 2 * kD + 4] = -7e4f;
  for (WindowFormat f : {WindowFormat::kF16, WindowFormat::kQ8}) {
    const std::string what = std::string(WindowFormatName(f)) + " " + hwy::TargetName(GetParam());
    const size_t bytes = n * WindowRowBytes(f, kH, kD);
    std::vector<uint8_t> stored(bytes), stored_ref(bytes);
    std::vector<uint16_t> nat(n * kKv), nat_ref(n * kKv), dec(n * kKv), dec_ref(n * kKv);
    EncodeWindowRows(f, kH, kD, x.data(), n, stored.data(), nat.data());
    EncodeWindowRowsRef(f, kH, kD, x.data(), n, stored_ref.data(), nat_ref.data());
    EXPECT_EQ(stored, stored_ref) << what;
    EXPECT_EQ(nat, nat_ref) << what;
    DecodeWindowRows(f, kH, kD, stored_ref.data(), n, dec.data());
    DecodeWindowRowsRef(f, kH, kD, stored_ref.data(), n, dec_ref.data());
    EXPECT_EQ(dec, dec_ref) << what;
    EXPECT_EQ(dec, nat_ref) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, WindowCodecTarget, ::testing::ValuesIn(hwy::SupportedAndGeneratedTargets()),
                         [](const ::testing::TestParamInfo<int64_t>& info) {
                           return std::string(hwy::TargetName(info.param));
                         });

TEST(WindowCodec, ParseNamesTheChoices) {
  EXPECT_EQ(ParseWindowFormat("q8").value(), WindowFormat::kQ8);
  EXPECT_EQ(ParseWindowFormat("f16").value(), WindowFormat::kF16);
  auto bad = ParseWindowFormat("q4");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("valid: f16, q8"), std::string::npos);
}

}  // namespace
}  // namespace chorus
