// KV block formats: names, validation, exact byte sizes, round-trip error within each quantizer's
// bound, TurboQuant MSE against the Lloyd-Max table, and the Hadamard rotation.
#include "kv/kv_format.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kv/distortion.h"         // DistortionStats
#include "kv/hadamard.h"           // HadamardRotate
#include "kv/kv_format_layout.h"   // PackGroup, UnpackCode, Codebook
#include "util/fp16.h"             // F16ToF32

namespace chorus {
namespace {

constexpr double kF16Eps = 1.0 / 2048;        // fp16 relative rounding (half an ulp = 2^-11)
constexpr double kF32Eps = 1.0 / 16777216.0;  // f32 relative rounding (2^-24)

const KvGeometry kGeometries[] = {{3, 64}, {1, 128}, {2, 32}, {4, 64}, {1, 48}, {2, 80}, {1, 96}};

std::vector<float> RandomBlock(const KvGeometry& g, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> x(kBlockTokens * g.n_head_kv * g.head_dim);
  for (auto& v : x) v = nd(rng);
  // A few outlier channels, as real keys have.
  for (size_t j = 0; j < kBlockTokens; ++j) x[j * g.n_head_kv * g.head_dim + 1] += 6 * scale;
  return x;
}

TEST(KvFormat, NamesRoundTrip) {
  for (KvFormat f : kAllKvFormats) {
    auto parsed = ParseKvFormat(KvFormatName(f));
    ASSERT_TRUE(parsed.ok()) << KvFormatName(f);
    EXPECT_EQ(*parsed, f);
  }
  EXPECT_EQ(KvFormatName(KvFormat::kPolyKvPaper), "polykv-paper");
  EXPECT_TRUE(KvFormatIsRotated(KvFormat::kTq3));
  EXPECT_FALSE(KvFormatIsRotated(KvFormat::kKivi3));
}

TEST(KvFormat, UnknownNameListsValidNames) {
  auto r = ParseKvFormat("q4");
  ASSERT_FALSE(r.ok());
  const std::string& msg = r.status().message();
  EXPECT_NE(msg.find("'q4'"), std::string::npos) << msg;
  for (KvFormat f : kAllKvFormats) EXPECT_NE(msg.find(KvFormatName(f)), std::string::npos) << msg;
}

TEST(KvFormat, CheckRejectsWhatItCannotStore) {
  EXPECT_EQ(CheckKvFormat(KvFormat::kTq3, KvSide::kValue, {3, 48}).message(),
            "tq3 needs a power-of-two head_dim, got 48");
  EXPECT_FALSE(CheckKvFormat(KvFormat::kTq2, KvSide::kKey, {1, 80}).ok());
  EXPECT_FALSE(CheckKvFormat(KvFormat::kTq4, KvSide::kKey, {1, 16}).ok());  // < one code group
  EXPECT_FALSE(CheckKvFormat(KvFormat::kKivi3, KvSide::kValue, {1, 48}).ok());
  EXPECT_TRUE(CheckKvFormat(KvFormat::kKivi3, KvSide::kKey, {1, 48}).ok());
  EXPECT_TRUE(CheckKvFormat(KvFormat::kKivi2, KvSide::kValue, {1, 96}).ok());
  EXPECT_TRUE(CheckKvFormat(KvFormat::kQ8, KvSide::kKey, {2, 80}).ok());
  EXPECT_TRUE(CheckKvFormat(KvFormat::kTq3, KvSide::kKey, {3, 64}).ok());
  EXPECT_FALSE(CheckKvFormat(KvFormat::kF16, KvSide::kKey, {0, 64}).ok());
  EXPECT_FALSE(CheckKvFormat(KvFormat::kF16, KvSide::kKey, {1, kMaxHeadDim + 1}).ok());
  EXPECT_FALSE(CheckKvFormat(static_cast<KvFormat>(200), KvSide::kKey, {1, 64}).ok());
  // Encode refuses the same geometries.
  std::vector<float> x(kBlockTokens * 48);
  std::vector<uint8_t> buf(1 << 16);
  EXPECT_FALSE(EncodeKvBlock(KvFormat::kTq3, KvSide::kKey, {1, 48}, x.data(), buf.data()).ok());
}

// Bytes of one block side for SmolLM2-135M's 3 × 64 (docs/FORMATS.md table).
TEST(KvFormat, BlockBytes3x64) {
  const KvGeometry g{3, 64};
  struct Row { KvFormat f; size_t bytes; double bits; };
  const Row rows[] = {
      {KvFormat::kF16, 3 * 4096, 16.0},       {KvFormat::kQ8, 3 * 2112, 8.25},
      {KvFormat::kKivi4, 3 * 1280, 5.0},      {KvFormat::kKivi3, 3 * 1024, 4.0},
      {KvFormat::kKivi2, 3 * 768, 3.0},       {KvFormat::kTq4, 3 * 1088, 4.25},
      {KvFormat::kTq3, 3 * 832, 3.25},        {KvFormat::kTq2, 3 * 576, 2.25},
      {KvFormat::kPolyKvPaper, 4 + 3 * 2048, 8.0 + 32.0 / (32 * 3 * 64)},
  };
  for (const Row& r : rows) {
    for (KvSide side : {KvSide::kKey, KvSide::kValue}) {
      EXPECT_EQ(KvBlockBytes(r.f, side, g), r.bytes) << KvFormatName(r.f);
      EXPECT_DOUBLE_EQ(KvNominalBits(r.f, side, g), r.bits) << KvFormatName(r.f);
    }
  }
}

// The documented formulas for any head_dim d and n_head_kv H.
TEST(KvFormat, BlockBytesFormulas) {
  for (const KvGeometry& g : kGeometries) {
    const size_t H = g.n_head_kv, d = g.head_dim, T = kBlockTokens;
    for (KvSide side : {KvSide::kKey, KvSide::kValue}) {
      auto expect = [&](KvFormat f, size_t bytes) {
        if (!CheckKvFormat(f, side, g).ok()) return;
        EXPECT_EQ(KvBlockBytes(f, side, g), bytes) << KvFormatName(f) << " d=" << d;
        EXPECT_EQ(KvHeadTileOffset(f, side, g, 1 % H), (f == KvFormat::kPolyKvPaper ? 4 : 0) +
                                                           (1 % H) * KvHeadTileBytes(f, side, d));
      };
      expect(KvFormat::kF16, H * T * d * 2);
      expect(KvFormat::kQ8, H * T * (2 + d));
      expect(KvFormat::kPolyKvPaper, 4 + H * T * d);
      for (size_t b : {2, 3, 4}) {
        const KvFormat kivi = b == 4 ? KvFormat::kKivi4 : b == 3 ? KvFormat::kKivi3 : KvFormat::kKivi2;
        const KvFormat tq = b == 4 ? KvFormat::kTq4 : b == 3 ? KvFormat::kTq3 : KvFormat::kTq2;
        expect(kivi, H * d * (4 + 4 * b));       // d groups of 32: 2+2 bytes + 32·b bits
        expect(tq, H * T * (2 + d * b / 8));     // per row: fp16 norm + d·b bits
      }
    }
  }
}

// Decision thresholds are the midpoints of neighbouring centroids (nearest-centroid coding), the
// tables are symmetric and ascending.
TEST(KvFormat, LloydMaxTablesAreConsistent) {
  for (uint32_t bits : {2u, 3u, 4u}) {
    const kv_layout::LloydMaxCodebook& cb = kv_layout::Codebook(bits);
    const size_t n = size_t{1} << bits;
    for (size_t k = 0; k + 1 < n; ++k) {
      EXPECT_LT(cb.centroid[k], cb.centroid[k + 1]);
      EXPECT_NEAR(cb.threshold[k], (cb.centroid[k] + cb.centroid[k + 1]) / 2, 1e-4) << bits << " " << k;
    }
    for (size_t k = 0; k < n; ++k) EXPECT_EQ(cb.centroid[k], -cb.centroid[n - 1 - k]);
  }
}

TEST(KvFormat, PackUnpackGroups) {
  std::mt19937 rng(3);
  for (uint32_t bits : {2u, 3u, 4u}) {
    uint8_t codes[32], packed[16];
    for (auto& c : codes) c = rng() % (1u << bits);
    kv_layout::PackGroup(bits, codes, packed);
    for (size_t i = 0; i < 32; ++i) EXPECT_EQ(kv_layout::UnpackCode(bits, packed, i), codes[i]) << bits;
  }
}

// Per-element bound of one format's encode/decode, from the input x (token-major block).
class RoundTripBound {
 public:
  RoundTripBound(KvFormat f, KvSide side, const KvGeometry& g, const std::vector<float>& x, float layer_absmax)
      : f_(f), side_(side), g_(g), x_(x), layer_absmax_(layer_absmax) {}

  double At(size_t j, size_t h, size_t c) const {
    const size_t D = g_.n_head_kv * g_.head_dim, d = g_.head_dim;
    const double x = x_[j * D + h * d + c];
    switch (f_) {
      case KvFormat::kF16: return std::abs(x) * kF16Eps + std::ldexp(1.0, -25);  // + subnormal step/2
      case KvFormat::kQ8: {  // scale = absmax/127 rounded to fp16: err ≤ scale/2, clamp ≤ 127·δscale
        double absmax = 0;
        for (size_t k = 0; k < d; ++k) absmax = std::max(absmax, std::abs(double(x_[j * D + h * d + k])));
        return absmax / 127 / 2 * (1 + 2 * kF16Eps) + absmax * kF16Eps + absmax * 4 * kF32Eps;
      }
      case KvFormat::kPolyKvPaper: return layer_absmax_ / 127 / 2 * (1 + 4 * kF32Eps);
      default: break;
    }
    // KIVI: the group's min and max; scale and min are fp16-rounded (≤ half an ulp each):
    // err ≤ scale'/2 + |min' − min| + (2^b − 1)·|scale' − scale| (+ f32 rounding).
    double mn = 1e30, mx = -1e30;
    for (size_t i = 0; i < 32; ++i) {
      const double v = side_ == KvSide::kKey ? x_[i * D + h * d + c]
                                             : x_[j * D + h * d + (c / 32) * 32 + i];
      mn = std::min(mn, v);
      mx = std::max(mx, v);
    }
    const int bits = f_ == KvFormat::kKivi4 ? 4 : f_ == KvFormat::kKivi3 ? 3 : 2;
    const double qmax = (1 << bits) - 1, scale = (mx - mn) / qmax;
    return scale * (1 + kF16Eps) / 2 + std::abs(mn) * kF16Eps + qmax * scale * kF16Eps +
           (std::abs(mn) + std::abs(mx)) * 4 * kF32Eps;
  }

 private:
  KvFormat f_;
  KvSide side_;
  KvGeometry g_;
  const std::vector<float>& x_;
  float layer_absmax_;
};

TEST(KvFormat, RoundTripWithinQuantizerBound) {
  uint32_t seed = 1;
  for (const KvGeometry& g : kGeometries) {
    for (KvFormat f : kAllKvFormats) {
      if (KvFormatIsRotated(f)) continue;  // codebook formats: MSE test below
      for (KvSide side : {KvSide::kKey, KvSide::kValue}) {
        if (!CheckKvFormat(f, side, g).ok()) continue;
        const std::vector<float> x = RandomBlock(g, seed++, 0.7f);
        float absmax = 0;
        for (float v : x) absmax = std::max(absmax, std::abs(v));
        std::vector<uint8_t> block(KvBlockBytes(f, side, g));
        ASSERT_TRUE(EncodeKvBlock(f, side, g, x.data(), block.data(), {.layer_absmax = absmax}).ok());
        std::vector<float> y(x.size());
        DecodeKvBlockRef(f, side, g, block.data(), y.data());
        const RoundTripBound bound(f, side, g, x, absmax);
        DistortionStats stats;
        const size_t D = g.n_head_kv * g.head_dim;
        for (size_t j = 0; j < kBlockTokens; ++j) {
          for (size_t h = 0; h < g.n_head_kv; ++h) {
            for (size_t c = 0; c < g.head_dim; ++c) {
              const size_t k = j * D + h * g.head_dim + c;
              ASSERT_LE(std::abs(double(y[k]) - x[k]), bound.At(j, h, c))
                  << KvFormatName(f) << " " << KvSideName(side) << " " << g.n_head_kv << "x" << g.head_dim
                  << " token " << j << " head " << h << " channel " << c;
            }
          }
        }
        stats.Add(x.data(), y.data(), x.size());
        if (g.n_head_kv == 3 && g.head_dim == 64) {
          std::printf("  %-13s %-6s SNR %6.2f dB  max err %.4f\n", std::string(KvFormatName(f)).c_str(),
                      std::string(KvSideName(side)).c_str(), stats.snr_db(), stats.max_abs_err());
        }
      }
    }
  }
}

// Every head tile decodes to the same values as a 1-head block of that head's data (layout offsets).
TEST(KvFormat, HeadTilesAreIndependent) {
  const KvGeometry g{4, 64}, g1{1, 64};
  const std::vector<float> x = RandomBlock(g, 99);
  for (KvFormat f : kAllKvFormats) {
    for (KvSide side : {KvSide::kKey, KvSide::kValue}) {
      std::vector<uint8_t> block(KvBlockBytes(f, side, g)), one(KvBlockBytes(f, side, g1));
      ASSERT_TRUE(EncodeKvBlock(f, side, g, x.data(), block.data(), {.layer_absmax = 20}).ok());
      for (uint32_t h = 0; h < g.n_head_kv; ++h) {
        std::vector<float> xh(kBlockTokens * 64), a(kBlockTokens * 64), b(kBlockTokens * 64);
        for (size_t j = 0; j < kBlockTokens; ++j) std::memcpy(&xh[j * 64], &x[j * 256 + h * 64], 64 * 4);
        ASSERT_TRUE(EncodeKvBlock(f, side, g1, xh.data(), one.data(), {.layer_absmax = 20}).ok());
        DecodeKvHeadRef(f, side, g, block.data(), h, a.data());
        DecodeKvHeadRef(f, side, g1, one.data(), 0, b.data());
        EXPECT_EQ(a, b) << KvFormatName(f) << " head " << h;
      }
    }
  }
}

TEST(KvFormat, PolyKvPaperParams) {
  const KvGeometry g{1, 64};
  std::vector<float> x = RandomBlock(g, 5);
  std::vector<uint8_t> block(KvBlockBytes(KvFormat::kPolyKvPaper, KvSide::kKey, g));
  const Status missing = EncodeKvBlock(KvFormat::kPolyKvPaper, KvSide::kKey, g, x.data(), block.data());
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("layer_absmax"), std::string::npos) << missing.message();
  EXPECT_FALSE(EncodeKvBlock(KvFormat::kPolyKvPaper, KvSide::kKey, g, x.data(), block.data(),
                             {.layer_absmax = NAN}).ok());
  // An all-zero block needs no scale.
  std::vector<float> zeros(x.size(), 0.0f), y(x.size());
  ASSERT_TRUE(EncodeKvBlock(KvFormat::kPolyKvPaper, KvSide::kKey, g, zeros.data(), block.data()).ok());
  DecodeKvBlockRef(KvFormat::kPolyKvPaper, KvSide::kKey, g, block.data(), y.data());
  EXPECT_EQ(y, zeros);
  // The scale is the layer's, stored in the block; values beyond layer_absmax saturate.
  x[0] = 10.0f;
  ASSERT_TRUE(EncodeKvBlock(KvFormat::kPolyKvPaper, KvSide::kKey, g, x.data(), block.data(),
                            {.layer_absmax = 5.0f}).ok());
  float stored;
  std::memcpy(&stored, block.data(), 4);
  EXPECT_EQ(stored, 5.0f / 127.0f);
  DecodeKvBlockRef(KvFormat::kPolyKvPaper, KvSide::kKey, g, block.data(), y.data());
  EXPECT_FLOAT_EQ(y[0], 127 * stored);
}

TEST(KvFormat, DegenerateInputs) {
  const KvGeometry g{2, 64};
  for (KvFormat f : kAllKvFormats) {
    for (KvSide side : {KvSide::kKey, KvSide::kValue}) {
      for (float value : {0.0f, 3.25f, 1e6f}) {  // constant blocks; 1e6 saturates to fp16 range
        std::vector<float> x(kBlockTokens * 128, value), y(x.size());
        std::vector<uint8_t> block(KvBlockBytes(f, side, g));
        ASSERT_TRUE(EncodeKvBlock(f, side, g, x.data(), block.data(), {.layer_absmax = value}).ok());
        DecodeKvBlockRef(f, side, g, block.data(), y.data());
        for (float v : y) ASSERT_TRUE(std::isfinite(v)) << KvFormatName(f) << " " << value;
        if (value == 0.0f) {
          for (float v : y) ASSERT_EQ(v, 0.0f) << KvFormatName(f);
        }
      }
    }
  }
}

// TurboQuant-MSE: per-coordinate MSE × d of unit vectors within 10 % of the Lloyd-Max table.
TEST(KvFormat, RotatedFormatsMatchLloydMaxMse) {
  std::mt19937 rng(2024);
  std::normal_distribution<float> nd;
  for (uint32_t d : {64u, 128u}) {
    const KvGeometry g{1, d};
    const size_t n_blocks = 320;  // 10,240 vectors
    for (KvFormat f : {KvFormat::kTq2, KvFormat::kTq3, KvFormat::kTq4}) {
      const uint32_t bits = kv_layout::TqBits(f);
      DistortionStats stats;
      std::vector<float> x(kBlockTokens * d), y(x.size());
      std::vector<uint8_t> block(KvBlockBytes(f, KvSide::kValue, g));
      for (size_t b = 0; b < n_blocks; ++b) {
        for (size_t j = 0; j < kBlockTokens; ++j) {
          double n2 = 0;
          for (size_t c = 0; c < d; ++c) n2 += double(x[j * d + c] = nd(rng)) * x[j * d + c];
          for (size_t c = 0; c < d; ++c) x[j * d + c] /= std::sqrt(n2);
        }
        ASSERT_TRUE(EncodeKvBlock(f, KvSide::kValue, g, x.data(), block.data()).ok());
        DecodeKvBlockRef(f, KvSide::kValue, g, block.data(), y.data());
        stats.Add(x.data(), y.data(), x.size());
      }
      const double mse_d = stats.mse() * d;  // per coordinate of sqrt(d)·y, i.e. of N(0,1)
      const double table = kv_layout::Codebook(bits).mse;
      std::printf("  %s d=%u: MSE·d = %.5f (table %.5f), SNR %.2f dB over %zu vectors\n",
                  std::string(KvFormatName(f)).c_str(), d, mse_d, table, stats.snr_db(),
                  stats.count() / d);
      EXPECT_NEAR(mse_d, table, 0.10 * table) << KvFormatName(f) << " d=" << d;
    }
  }
}

TEST(Hadamard, OrthonormalAndInverse) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  for (size_t d = 1; d <= kMaxHeadDim; d *= 2) {
    // R·e_k are the columns of R: their Gram matrix must be the identity.
    if (d <= 256) {
      std::vector<float> cols(d * d, 0.0f);
      for (size_t k = 0; k < d; ++k) {
        cols[k * d + k] = 1;
        HadamardRotate(&cols[k * d], d);
      }
      for (size_t a = 0; a < d; ++a) {
        for (size_t b = 0; b < d; ++b) {
          double dot = 0;
          for (size_t i = 0; i < d; ++i) dot += double(cols[a * d + i]) * cols[b * d + i];
          ASSERT_NEAR(dot, a == b ? 1.0 : 0.0, 1e-6) << d << " " << a << " " << b;
        }
      }
    }
    // Round trip R then Rᵀ, and the norm is kept: error ~ log2(d) f32 roundings.
    std::vector<float> x(d), y(d);
    for (auto& v : x) v = nd(rng);
    y = x;
    HadamardRotate(y.data(), d);
    double nx = 0, ny = 0;
    for (size_t i = 0; i < d; ++i) nx += double(x[i]) * x[i], ny += double(y[i]) * y[i];
    EXPECT_NEAR(ny, nx, nx * 1e-5);
    HadamardRotateInverse(y.data(), d);
    for (size_t i = 0; i < d; ++i) ASSERT_NEAR(y[i], x[i], 1e-5 * (1 + std::abs(x[i]))) << d;
  }
}

TEST(Hadamard, MatchesDefinition) {
  const size_t d = 16;
  for (size_t k = 0; k < d; ++k) {
    std::vector<float> e(d, 0.0f);
    e[k] = 1;
    HadamardRotate(e.data(), d);
    for (size_t i = 0; i < d; ++i) {
      const float h = (__builtin_popcountll(i & k) & 1) ? -1.0f : 1.0f;
      EXPECT_FLOAT_EQ(e[i], h * HadamardSign(k) / 4.0f);
    }
  }
  // The sign vector is part of the stored format: pin its first 16 signs.
  std::string signs;
  for (size_t i = 0; i < 16; ++i) signs += HadamardSign(i) > 0 ? '+' : '-';
  EXPECT_EQ(signs, "-+++---+--+--+-+");  // SplitMix64(kHadamardSignSeed) word 0 = 0xcff33147c3325b71
}

// The dispatched transform (AVX-512: permutes and masked add/sub) is the scalar one bit for bit, and
// both are the definition: e_k → row k of the Sylvester matrix, for every power of two to 256.
TEST(Hadamard, DispatchedTransformEqualsScalarBitForBit) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  for (size_t d = 1; d <= 256; d *= 2) {
    SCOPED_TRACE(d);
    for (int rep = 0; rep < 20; ++rep) {
      std::vector<float> x(d);
      for (size_t i = 0; i < d; ++i) x[i] = nd(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 40) - 20);
      std::vector<float> a = x, b = x;
      FastWalshHadamard(a.data(), d);
      FastWalshHadamardRef(b.data(), d);
      ASSERT_EQ(std::memcmp(a.data(), b.data(), d * sizeof(float)), 0) << "rep " << rep;
    }
    for (size_t k = 0; k < d; ++k) {
      std::vector<float> e(d, 0.0f);
      e[k] = 1;
      FastWalshHadamard(e.data(), d);
      for (size_t i = 0; i < d; ++i) ASSERT_EQ(e[i], (__builtin_popcountll(i & k) & 1) ? -1.0f : 1.0f) << k << " " << i;
    }
  }
}

}  // namespace
}  // namespace chorus
