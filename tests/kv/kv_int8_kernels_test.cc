// The integer KV kernels (kv_kernels.h): tq4, q8 and kivi4 key scores (QueryQ8) and tq3 / tq4 value sums — the
// quantizers, the scalar models against the float references within the int8 rounding bounds, the
// SIMD kernels against the scalar models bit for bit on every compiled target that has them, and
// BlockAttention using them.
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL 1  // list AVX3_DL among the targets, as kv_kernels_simd.cc compiles it
#endif
#include <gtest/gtest.h>
#include <hwy/targets.h>  // SetSupportedTargetsForTest, SupportedAndGeneratedTargets

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kv/block_attention.h"
#include "kv/kv_format.h"          // EncodeKvBlock, DecodeKvHeadRef
#include "kv/kv_format_layout.h"   // KeyColumnsOffset
#include "kv/kv_kernels.h"
#include "util/fp16.h"             // F16ToF32

namespace chorus {
namespace {

const KvGeometry kGeometries[] = {{3, 64}, {1, 128}, {2, 32}, {1, 256}};

std::vector<uint8_t> MakeKeys(KvFormat f, const KvGeometry& g, std::mt19937& rng, std::vector<uint8_t>* f16 = nullptr) {
  std::normal_distribution<float> nd;
  std::vector<float> x(kBlockTokens * g.n_head_kv * g.head_dim);
  for (auto& v : x) v = nd(rng);
  for (size_t j = 0; j < kBlockTokens; ++j) x[j * g.n_head_kv * g.head_dim + 2] += 5;  // outlier channel
  float absmax = 0;
  for (float v : x) absmax = std::max(absmax, std::abs(v));
  std::vector<uint8_t> bytes(KvBlockBytes(f, KvSide::kKey, g));
  EXPECT_TRUE(EncodeKvBlock(f, KvSide::kKey, g, x.data(), bytes.data(), {.layer_absmax = absmax}).ok());
  if (f16) {  // the same keys at f16: the attention the compressed keys approximate
    f16->resize(KvBlockBytes(KvFormat::kF16, KvSide::kKey, g));
    EXPECT_TRUE(EncodeKvBlock(KvFormat::kF16, KvSide::kKey, g, x.data(), f16->data(), {.layer_absmax = absmax}).ok());
  }
  return bytes;
}
std::vector<uint8_t> MakeTq4Keys(const KvGeometry& g, std::mt19937& rng, std::vector<uint8_t>* f16 = nullptr) {
  return MakeKeys(KvFormat::kTq4, g, rng, f16);
}

struct Q8 {
  std::vector<int8_t> q;
  std::vector<float> scale;
  std::vector<int32_t> bias;
  std::vector<int8_t> qp;  // q and 16 zero rows, as BlockAttention gives the AMX kernels
  QueryQ8 view() const { return {q.data(), scale.data(), bias.data(), qp.data()}; }
};

Q8 Quantize(const std::vector<float>& q, size_t n_q, size_t d, KvFormat keys = KvFormat::kTq4) {
  Q8 r{std::vector<int8_t>(n_q * d), std::vector<float>(n_q), std::vector<int32_t>(n_q),
       std::vector<int8_t>((n_q + 16) * d, 0)};
  QuantizeQueriesQ8(q.data(), n_q, d, r.q.data(), r.scale.data(), r.bias.data(), keys);
  std::copy_n(r.q.data(), n_q * d, r.qp.data());
  return r;
}

std::vector<float> RandomQueries(size_t n_q, size_t d, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  std::vector<float> q(n_q * d);
  for (auto& v : q) v = nd(rng) / std::sqrt(float(d));
  return q;
}

TEST(ScoreQ8, QueriesUseTheFullInt8RangeAndAZeroQueryStaysZero) {
  std::mt19937 rng(7);
  const size_t d = 64, n_q = 5;
  std::vector<float> q = RandomQueries(n_q, d, rng);
  std::fill_n(q.begin() + 2 * d, d, 0.0f);  // query 2: all zeros
  const Q8 r = Quantize(q, n_q, d);
  const float cs = Tq4CentroidsQ8Scale();
  for (size_t i = 0; i < n_q; ++i) {
    int amax = 0, sum = 0;
    float qmax = 0;
    for (size_t c = 0; c < d; ++c) {
      amax = std::max(amax, std::abs(int{r.q[i * d + c]}));
      sum += r.q[i * d + c];
      qmax = std::max(qmax, std::abs(q[i * d + c]));
    }
    EXPECT_EQ(r.bias[i], -128 * sum);
    if (i == 2) {
      EXPECT_EQ(amax, 0);
      EXPECT_EQ(r.scale[i], 0.0f);
      continue;
    }
    EXPECT_EQ(amax, 127) << "query " << i;
    const float step = qmax / 127.0f;
    EXPECT_FLOAT_EQ(r.scale[i], step * cs);
    for (size_t c = 0; c < d; ++c) EXPECT_LE(std::abs(r.q[i * d + c] * step - q[i * d + c]), 0.5001f * step);
  }
  // The centroids of each width: int8 values within ±127 (and no coarser than 64 steps to the
  // largest), each within half a step of its float, closer in rms than the plain 127 / max grid.
  for (uint32_t bits : {2u, 3u, 4u}) {
    const float* cb = kv_layout::Codebook(bits).centroid;
    const size_t n = size_t{1} << bits;
    const float step = TqCentroidsQ8Scale(bits);
    const int8_t* c8 = TqCentroidsQ8(bits);
    float cmax = 0;
    for (size_t k = 0; k < n; ++k) cmax = std::max(cmax, std::abs(cb[k]));
    double err = 0, err_plain = 0;
    int amax = 0;
    for (size_t k = 0; k < n; ++k) {
      amax = std::max(amax, std::abs(int{c8[k]}));
      EXPECT_LE(std::abs(c8[k] * step - cb[k]), 0.5001f * step) << bits << " bits, code " << k;
      err += std::pow(c8[k] * step - cb[k], 2);
      err_plain += std::pow(std::nearbyint(cb[k] * 127 / cmax) * cmax / 127 - cb[k], 2);
    }
    EXPECT_LE(amax, 127);
    EXPECT_GE(amax, 64);
    EXPECT_LT(err, err_plain) << bits << " bits";
  }
  EXPECT_EQ(cs, TqCentroidsQ8Scale(4));
}

// |Σ q·k − Σ q̂·k̂| ≤ Σ_c (|Δq_c|·|k̂_c| + |q_c|·|Δk_c| + |Δq_c|·|Δk_c|) with |Δq| ≤ step_q / 2 and
// |Δk| ≤ (c8 step / 2)·norm/√d, plus float slack on the sums.
TEST(ScoreQ8, ScalarModelStaysWithinTheInt8RoundingBoundOfTheFloatScore) {
  std::mt19937 rng(11);
  const float cs = Tq4CentroidsQ8Scale();
  double worst = 0;
  for (const KvGeometry& g : kGeometries) {
    const size_t d = g.head_dim, n_q = 9;
    const std::vector<uint8_t> block = MakeTq4Keys(g, rng);
    for (uint32_t h = 0; h < g.n_head_kv; ++h) {
      const std::vector<float> q = RandomQueries(n_q, d, rng);
      const Q8 q8 = Quantize(q, n_q, d);
      std::vector<float> s(n_q * kBlockTokens), s_ref(n_q * kBlockTokens), tile(kBlockTokens * d);
      ScoreKvBlockQ8Ref(KvFormat::kTq4, g, block.data(), h, q8.view(), n_q, s.data());
      ScoreKvBlockRef(KvFormat::kTq4, g, block.data(), h, q.data(), n_q, s_ref.data());
      DecodeKvHeadRef(KvFormat::kTq4, KvSide::kKey, g, block.data(), h, tile.data());
      const uint8_t* t = block.data() + KvHeadTileOffset(KvFormat::kTq4, KvSide::kKey, g, h);
      for (size_t i = 0; i < n_q; ++i) {
        const float step_q = q8.scale[i] / cs;
        for (size_t j = 0; j < kBlockTokens; ++j) {
          const double norm_s = F16ToF32(static_cast<uint16_t>(t[2 * j] | t[2 * j + 1] << 8)) / std::sqrt(double(d));
          const double dk = 0.5 * cs * norm_s;
          double bound = 0, abs_sum = 0;
          for (size_t c = 0; c < d; ++c) {
            const double k = std::abs(tile[j * d + c]), qa = std::abs(q[i * d + c]);
            bound += 0.5 * step_q * k + qa * dk + 0.5 * step_q * dk;
            abs_sum += qa * (k + dk);
          }
          bound += 1e-5 * abs_sum + 1e-30;
          const double err = std::abs(double(s[i * kBlockTokens + j]) - s_ref[i * kBlockTokens + j]);
          worst = std::max(worst, err / bound);
          ASSERT_LE(err, bound) << g.n_head_kv << "x" << d << " head " << h << " i=" << i << " j=" << j;
        }
      }
    }
  }
  std::printf("  int8 score  max |err| / bound = %.3f\n", worst);
  EXPECT_GT(worst, 0.01) << "the bound is so loose that it tests nothing";
}

TEST(ScoreQ8, KernelMatchesItsScalarModelBitForBitOnEveryTargetThatHasIt) {
  std::mt19937 rng(3);
  size_t checked = 0;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (KvFormat f : {KvFormat::kTq4, KvFormat::kQ8}) {
      const KvScoreQ8Fn score_q8 = GetKvBlockKernels(f).score_q8;
      if (!score_q8) continue;
      const std::string tname = hwy::TargetName(target);
      for (const KvGeometry& g : kGeometries) {
        const size_t d = g.head_dim;
        const std::vector<uint8_t> block = MakeKeys(f, g, rng);
        for (size_t n_q : {1, 3, 8, 9, 16, 17, 45}) {  // from 16 on AMX where the CPU has it
          const uint32_t h = static_cast<uint32_t>(n_q % g.n_head_kv);
          const size_t ld = n_q == 3 ? 40 : kBlockTokens;
          std::vector<float> q = RandomQueries(n_q, d, rng);
          if (n_q == 9) std::fill_n(q.begin() + 4 * d, d, 0.0f);  // a zero query among them
          const Q8 q8 = Quantize(q, n_q, d, f);
          std::vector<float> s(n_q * ld, -7.0f), s_ref(n_q * ld, -7.0f);
          score_q8(g, block.data(), h, q8.view(), n_q, s.data(), ld);
          ScoreKvBlockQ8Ref(f, g, block.data(), h, q8.view(), n_q, s_ref.data(), ld);
          ASSERT_EQ(0, std::memcmp(s.data(), s_ref.data(), s.size() * sizeof(float)))
              << tname << " " << KvFormatName(f) << " " << g.n_head_kv << "x" << d << " n_q=" << n_q;
          ++checked;
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  if (checked == 0) GTEST_SKIP() << "no compiled target of this CPU has integer key scores (AVX-512 VNNI + VBMI)";
}

// q8 keys: the only rounding is the query's (the keys' int8 codes are their own), so the integer
// score is within Σ_c 0.5 · step_q · |k8_jc| · scale_j (+ float rounding) of the float score.
TEST(ScoreQ8, Q8KeysScalarModelStaysWithinTheQueryRoundingBoundOfTheFloatScore) {
  std::mt19937 rng(12);
  double worst = 0;
  for (const KvGeometry& g : kGeometries) {
    const size_t d = g.head_dim, n_q = 9;
    const std::vector<uint8_t> block = MakeKeys(KvFormat::kQ8, g, rng);
    for (uint32_t h = 0; h < g.n_head_kv; ++h) {
      const std::vector<float> q = RandomQueries(n_q, d, rng);
      const Q8 q8 = Quantize(q, n_q, d, KvFormat::kQ8);
      std::vector<float> s(n_q * kBlockTokens), s_ref(n_q * kBlockTokens);
      ScoreKvBlockQ8Ref(KvFormat::kQ8, g, block.data(), h, q8.view(), n_q, s.data());
      ScoreKvBlockRef(KvFormat::kQ8, g, block.data(), h, q.data(), n_q, s_ref.data());
      const uint8_t* t = block.data() + KvHeadTileOffset(KvFormat::kQ8, KvSide::kKey, g, h);
      const uint8_t* cols = t + kv_layout::KeyColumnsOffset(KvFormat::kQ8);
      for (size_t i = 0; i < n_q; ++i) {
        for (size_t j = 0; j < kBlockTokens; ++j) {
          const double sj = F16ToF32(static_cast<uint16_t>(t[2 * j] | t[2 * j + 1] << 8));
          double bound = 0, abs_sum = 0;
          for (size_t c = 0; c < d; ++c) {
            const double k = std::abs(static_cast<int8_t>(cols[c * kBlockTokens + j])) * sj;
            bound += 0.5 * q8.scale[i] * k;
            abs_sum += std::abs(q[i * d + c]) * k;
          }
          bound += 1e-5 * abs_sum + 1e-30;
          const double err = std::abs(double(s[i * kBlockTokens + j]) - s_ref[i * kBlockTokens + j]);
          worst = std::max(worst, err / bound);
          ASSERT_LE(err, bound) << g.n_head_kv << "x" << d << " head " << h << " i=" << i << " j=" << j;
        }
      }
    }
  }
  std::printf("  int8 q8-key score  max |err| / bound = %.3f\n", worst);
  EXPECT_GT(worst, 0.01) << "the bound is so loose that it tests nothing";
}

// kivi4 keys (integer scores from the per-block quantized q · scale): key blocks of several kinds,
// the edge cases included. kind 0: normal with an outlier channel; 1: every third channel constant
// (scale 0) and one all-zero channel; 2: huge values (near fp16's range); 3: small ones (1e-4).
std::vector<uint8_t> MakeKiviKeys(const KvGeometry& g, std::mt19937& rng, int kind) {
  std::normal_distribution<float> nd;
  const size_t w = g.n_head_kv * g.head_dim;
  std::vector<float> x(kBlockTokens * w);
  const float mag = kind == 2 ? 8000.0f : kind == 3 ? 1e-4f : 1.0f;
  for (auto& v : x) v = std::clamp(nd(rng) * mag, -60000.0f, 60000.0f);
  for (size_t j = 0; j < kBlockTokens; ++j) {
    x[j * w + 2] += 5 * mag;  // outlier channel
    if (kind == 1) {
      for (size_t c = 0; c < w; c += 3) x[j * w + c] = 0.37f * static_cast<float>(c % 7) - 1;
      x[j * w + 1] = 0;
    }
  }
  std::vector<uint8_t> bytes(KvBlockBytes(KvFormat::kKivi4, KvSide::kKey, g));
  EXPECT_TRUE(EncodeKvBlock(KvFormat::kKivi4, KvSide::kKey, g, x.data(), bytes.data(), {}).ok());
  return bytes;
}

// Queries for kivi4 keys: normal / √d, scaled per kind (0: as is, 1: ×300, 2: ×1e-6), query 1 zero
// when n_q > 1.
std::vector<float> KiviQueries(size_t n_q, size_t d, std::mt19937& rng, int kind) {
  std::vector<float> q = RandomQueries(n_q, d, rng);
  const float mag = kind == 1 ? 300.0f : kind == 2 ? 1e-6f : 1.0f;
  for (auto& v : q) v *= mag;
  if (n_q > 1) std::fill_n(q.begin() + d, d, 0.0f);
  return q;
}

const KvGeometry kKiviGeometries[] = {{3, 64}, {1, 128}, {2, 32}, {1, 256}, {1, 48}};

// |twin − float score| ≤ Σ_c |qs_c − qscale · qs8_c| · |code_jc − 7.5| (≤ 7.5 · d · qscale / 2: the
// query's int8 rounding, its share at the middle code folded into the base, the codes exact) + float
// rounding: the base's 16-lane sums, qs = q · s, the decoded keys and the final fma, each a few ulps
// of Σ_c |q_c| · (|min_c| + 15 · s_c) per channel term.
TEST(ScoreKivi4Q8, ScalarModelStaysWithinTheQueryRoundingBoundOfTheFloatScore) {
  std::mt19937 rng(21);
  double worst = 0;
  for (const KvGeometry& g : kKiviGeometries) {
    const uint32_t d = g.head_dim;
    for (int kind = 0; kind < 4; ++kind) {
      const std::vector<uint8_t> block = MakeKiviKeys(g, rng, kind);
      for (uint32_t h = 0; h < g.n_head_kv; ++h) {
        const size_t n_q = 5;
        const std::vector<float> q = KiviQueries(n_q, d, rng, (kind + h) % 3);
        QueryQ8 view;
        view.f = q.data();
        std::vector<float> s(n_q * kBlockTokens), s_ref(n_q * kBlockTokens);
        ScoreKvBlockQ8Ref(KvFormat::kKivi4, g, block.data(), h, view, n_q, s.data());
        ScoreKvBlockRef(KvFormat::kKivi4, g, block.data(), h, q.data(), n_q, s_ref.data());
        const uint8_t* t = block.data() + KvHeadTileOffset(KvFormat::kKivi4, KvSide::kKey, g, h);
        const auto f16 = [](const uint8_t* p) { return double(F16ToF32(static_cast<uint16_t>(p[0] | p[1] << 8))); };
        for (size_t i = 0; i < n_q; ++i) {
          std::vector<int8_t> q8(d);
          float qscale, base;
          QuantizeKiviQueryQ8Ref(t, d, q.data() + i * d, q8.data(), &qscale, &base);
          for (size_t j = 0; j < kBlockTokens; ++j) {
            double bound = 0, abs_sum = 0;
            for (size_t c = 0; c < d; ++c) {
              const double sc = f16(t + 2 * c), mn = f16(t + 2 * (d + c));
              const uint32_t code = kv_layout::UnpackCode(4, t + kv_layout::KiviCodesOffset(d) + 16 * c, j);
              const double qs = float(q[i * d + c] * float(sc));
              bound += std::abs(qs - double(qscale) * q8[c]) * std::abs(code - double(kKiviCodeMid));
              abs_sum += std::abs(q[i * d + c]) * (std::abs(mn) + 15 * sc);
            }
            ASSERT_LE(bound, kKiviCodeMid * d * qscale / 2 * (1 + 1e-6)) << "the rounding bound itself";
            bound += (d + 8) * 0x1p-23 * abs_sum + 1e-37;
            const double err = std::abs(double(s[i * kBlockTokens + j]) - s_ref[i * kBlockTokens + j]);
            worst = std::max(worst, err / bound);
            ASSERT_LE(err, bound) << g.n_head_kv << "x" << d << " kind " << kind << " head " << h << " i=" << i
                                  << " j=" << j;
          }
        }
      }
    }
  }
  std::printf("  int8 kivi4-key score  max |err| / bound = %.3f\n", worst);
  EXPECT_GT(worst, 0.01) << "the bound is so loose that it tests nothing";
}

TEST(ScoreKivi4Q8, KernelMatchesItsScalarModelBitForBitOnEveryTargetThatHasIt) {
  std::mt19937 rng(23);
  size_t checked = 0;
  std::string targets;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    const KvScoreQ8Fn score_q8 = GetKvBlockKernels(KvFormat::kKivi4).score_q8;
    if (!score_q8) continue;
    const std::string tname = hwy::TargetName(target);
    targets += " " + tname;
    for (const KvGeometry& g : kKiviGeometries) {
      const size_t d = g.head_dim;
      for (int kind = 0; kind < 4; ++kind) {
        const std::vector<uint8_t> block = MakeKiviKeys(g, rng, kind);
        for (size_t n_q : {1, 2, 3, 8, 9, 16, 17, 45, 70}) {
          const uint32_t h = static_cast<uint32_t>(n_q % g.n_head_kv);
          const size_t ld = n_q == 3 ? 40 : kBlockTokens;
          const std::vector<float> q = KiviQueries(n_q, d, rng, static_cast<int>(n_q % 3));
          QueryQ8 view;
          view.f = q.data();
          std::vector<float> s(n_q * ld, -7.0f), s_ref(n_q * ld, -7.0f);
          score_q8(g, block.data(), h, view, n_q, s.data(), ld);
          ScoreKvBlockQ8Ref(KvFormat::kKivi4, g, block.data(), h, view, n_q, s_ref.data(), ld);
          ASSERT_EQ(0, std::memcmp(s.data(), s_ref.data(), s.size() * sizeof(float)))
              << tname << " " << g.n_head_kv << "x" << d << " kind " << kind << " n_q=" << n_q;
          ++checked;
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  if (checked == 0) GTEST_SKIP() << "no compiled target of this CPU has integer kivi4 key scores (AVX-512 VNNI + VBMI)";
  std::printf("  kivi4 integer key scores bit for bit on:%s\n", targets.c_str());
}

std::vector<uint8_t> MakeTqValues(KvFormat f, const KvGeometry& g, std::mt19937& rng, std::vector<uint8_t>* f16 = nullptr) {
  std::normal_distribution<float> nd;
  std::vector<float> x(kBlockTokens * g.n_head_kv * g.head_dim);
  for (auto& v : x) v = nd(rng);
  for (size_t j = 0; j < kBlockTokens; j += 5) x[j * g.n_head_kv * g.head_dim + 1] *= 8;  // a few large ones
  float absmax = 0;
  for (float v : x) absmax = std::max(absmax, std::abs(v));
  std::vector<uint8_t> bytes(KvBlockBytes(f, KvSide::kValue, g));
  EXPECT_TRUE(EncodeKvBlock(f, KvSide::kValue, g, x.data(), bytes.data(), {.layer_absmax = absmax}).ok());
  if (f16) {
    f16->resize(KvBlockBytes(KvFormat::kF16, KvSide::kValue, g));
    EXPECT_TRUE(EncodeKvBlock(KvFormat::kF16, KvSide::kValue, g, x.data(), f16->data(), {.layer_absmax = absmax}).ok());
  }
  return bytes;
}

// Softmax-like weights: a few large, many small, one query all zero (when n_q > 2), zeros here and there.
std::vector<float> RandomWeights(size_t n_q, size_t ld, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> p(n_q * ld, 0.0f);
  for (size_t i = 0; i < n_q; ++i)
    for (size_t j = 0; j < kBlockTokens; ++j) {
      const float x = u(rng);
      p[i * ld + j] = j % 7 == 3 ? 0.0f : x * x * x * x;
    }
  if (n_q > 2) std::fill_n(p.begin() + 2 * ld, kBlockTokens, 0.0f);
  return p;
}

const KvGeometry kValueGeometries[] = {{3, 64}, {1, 128}, {2, 64}, {1, 256}};

// |Σ w·v̂ − Σ ŵ·v̂8| ≤ Σ_j (|Δw_j|·(|v̂_jc| + Δv_j) + w_j·Δv_j), |Δw| ≤ W / 510, Δv_j = (c8 step / 2)·norm_j/√d.
TEST(AccumulateQ8, ScalarModelStaysWithinTheInt8RoundingBoundOfTheFloatSum) {
  std::mt19937 rng(13);
  double worst = 0;
  for (KvFormat f : {KvFormat::kTq3, KvFormat::kTq4}) {
    const uint32_t bits = kv_layout::TqBits(f);
    const float cs = TqCentroidsQ8Scale(bits);
    for (const KvGeometry& g : kValueGeometries) {
      const size_t d = g.head_dim, n_q = 5;
      const std::vector<uint8_t> block = MakeTqValues(f, g, rng);
      for (uint32_t h = 0; h < g.n_head_kv; ++h) {
        const std::vector<float> p = RandomWeights(n_q, kBlockTokens, rng);
        std::vector<float> acc(n_q * d, 0.0f), acc_ref(n_q * d, 0.0f), tile(kBlockTokens * d);
        AccumulateKvBlockQ8Ref(f, g, block.data(), h, p.data(), n_q, acc.data());
        AccumulateKvBlockRef(f, g, block.data(), h, p.data(), n_q, acc_ref.data());
        DecodeKvHeadRef(f, KvSide::kValue, g, block.data(), h, tile.data());
        const uint8_t* t = block.data() + KvHeadTileOffset(f, KvSide::kValue, g, h);
        const size_t row_bytes = kv_layout::TqRowBytes(bits, static_cast<uint32_t>(d));
        for (size_t i = 0; i < n_q; ++i) {
          double wmax = 0;
          std::vector<double> w(kBlockTokens), dv(kBlockTokens);
          for (size_t j = 0; j < kBlockTokens; ++j) {
            const uint8_t* row = t + j * row_bytes;
            const double sj = F16ToF32(static_cast<uint16_t>(row[0] | row[1] << 8)) / std::sqrt(double(d));
            w[j] = p[i * kBlockTokens + j] * sj;
            dv[j] = 0.5 * cs * sj;
            wmax = std::max(wmax, w[j]);
          }
          for (size_t c = 0; c < d; ++c) {
            double bound = 1e-30, abs_sum = 0;
            for (size_t j = 0; j < kBlockTokens; ++j) {
              const double v = std::abs(tile[j * d + c]) / (w[j] > 0 ? 1.0 : 1.0);
              bound += wmax / 510 * (v + dv[j]) + w[j] * dv[j];
              abs_sum += (w[j] + wmax / 510) * (v + dv[j]);
            }
            bound += 1e-5 * abs_sum;
            const double err = std::abs(double(acc[i * d + c]) - acc_ref[i * d + c]);
            worst = std::max(worst, err / bound);
            ASSERT_LE(err, bound) << KvFormatName(f) << " " << g.n_head_kv << "x" << d << " i=" << i << " c=" << c;
          }
        }
      }
    }
  }
  std::printf("  int8 values max |err| / bound = %.3f\n", worst);
  EXPECT_GT(worst, 0.01) << "the bound is so loose that it tests nothing";
}

TEST(AccumulateQ8, KernelMatchesItsScalarModelBitForBitOnEveryTargetThatHasIt) {
  std::mt19937 rng(17);
  size_t checked = 0;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    const std::string tname = hwy::TargetName(target);
    for (KvFormat f : {KvFormat::kTq3, KvFormat::kTq4}) {
      const KvAccumulateFn acc_q8 = GetKvBlockKernels(f).accumulate_q8;
      if (!acc_q8) continue;
      for (const KvGeometry& g : kValueGeometries) {
        const size_t d = g.head_dim;
        const std::vector<uint8_t> block = MakeTqValues(f, g, rng);
        for (size_t n_q : {1, 3, 4, 5, 45, 70}) {
          const uint32_t h = static_cast<uint32_t>(n_q % g.n_head_kv);
          const size_t ld = n_q == 3 ? 40 : kBlockTokens;
          const std::vector<float> p = RandomWeights(n_q, ld, rng);
          std::normal_distribution<float> nd;
          std::vector<float> acc(n_q * d);
          for (auto& v : acc) v = nd(rng);
          std::vector<float> acc_ref = acc;
          acc_q8(g, block.data(), h, p.data(), n_q, acc.data(), ld);
          AccumulateKvBlockQ8Ref(f, g, block.data(), h, p.data(), n_q, acc_ref.data(), ld);
          ASSERT_EQ(0, std::memcmp(acc.data(), acc_ref.data(), acc.size() * sizeof(float)))
              << tname << " " << KvFormatName(f) << " " << g.n_head_kv << "x" << d << " n_q=" << n_q;
          ++checked;
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  if (checked == 0) GTEST_SKIP() << "no compiled target of this CPU has integer value sums (AVX-512 VNNI + VBMI)";
}

// Keys kf (tq4 or q8), tq3 values.
void CheckBlockAttentionTakesThem(KvFormat kf) {
  SCOPED_TRACE(std::string(KvFormatName(kf)) + " keys");
  std::mt19937 rng(5);
  const KvGeometry g{2, 64};
  const size_t d = g.head_dim, n_q = 3, n_blocks = 6;
  std::vector<std::vector<uint8_t>> keys, keys_f16(n_blocks), values, values_f16;
  std::vector<BlockView> views, views_f16;
  for (size_t b = 0; b < n_blocks; ++b) {
    keys.push_back(MakeKeys(kf, g, rng, &keys_f16[b]));
    std::normal_distribution<float> nd;
    std::vector<float> x(kBlockTokens * g.n_head_kv * d);
    for (auto& v : x) v = nd(rng);
    values.emplace_back(KvBlockBytes(KvFormat::kTq3, KvSide::kValue, g));
    values_f16.emplace_back(KvBlockBytes(KvFormat::kF16, KvSide::kValue, g));
    ASSERT_TRUE(EncodeKvBlock(KvFormat::kTq3, KvSide::kValue, g, x.data(), values.back().data(), {.layer_absmax = 6}).ok());
    ASSERT_TRUE(EncodeKvBlock(KvFormat::kF16, KvSide::kValue, g, x.data(), values_f16.back().data(), {.layer_absmax = 6}).ok());
  }
  for (size_t b = 0; b < n_blocks; ++b) {
    views.push_back({keys[b].data(), values[b].data(), kf, KvFormat::kTq3});
    views_f16.push_back({keys_f16[b].data(), values_f16[b].data(), KvFormat::kF16, KvFormat::kF16});
  }
  std::vector<float> q = RandomQueries(n_q, d, rng);
  for (auto& v : q) v *= 4;  // peaked enough that the scores matter
  auto attend = [&](bool int8) {
    const ScopedKvInt8Scores scope(int8);
    BlockAttention att(g);
    att.Begin(q.data(), n_q);
    att.AddBlocks(views, 1);
    std::vector<float> out(n_q * d);
    att.Finish(out.data());
    return out;
  };
  const std::vector<float> with_int8 = attend(true), with_float = attend(false);
  // ref: the decoded keys / tq3 values exactly (what the float path computes); ref_f16: the keys
  // and values before compression.
  std::vector<float> ref(n_q * d), ref_f16(n_q * d);
  BlockAttentionRef(g, views, 1, nullptr, nullptr, 0, 0, q.data(), n_q, ref.data());
  BlockAttentionRef(g, views_f16, 1, nullptr, nullptr, 0, 0, q.data(), n_q, ref_f16.data());
  double diff = 0, err_int8 = 0, err_float = 0, err_tq4 = 0, mag = 0;
  for (size_t k = 0; k < ref.size(); ++k) {
    diff = std::max<double>(diff, std::abs(with_int8[k] - with_float[k]));
    err_int8 = std::max<double>(err_int8, std::abs(with_int8[k] - ref[k]));
    err_float = std::max<double>(err_float, std::abs(with_float[k] - ref[k]));
    err_tq4 = std::max<double>(err_tq4, std::abs(ref[k] - ref_f16[k]));
    mag = std::max<double>(mag, std::abs(ref[k]));
  }
  std::printf("  %s/tq3 attention max |err|: int8 kernels %.2e, float %.2e; the formats themselves %.2e (max |out| %.2f)\n",
              std::string(KvFormatName(kf)).c_str(), err_int8, err_float, err_tq4, mag);
  EXPECT_GT(diff, 0) << "the integer kernels were not used (or the switch did not turn them off)";
  EXPECT_LT(err_float, 1e-4 * mag);
  EXPECT_LT(err_int8, 0.25 * err_tq4) << "the int8 rounding is not small beside the formats' own error";
}

TEST(Int8Kernels, BlockAttentionTakesThemAndTheSwitchTurnsThemOff) {
  if (!GetKvBlockKernels(KvFormat::kTq4).score_q8) GTEST_SKIP() << "no integer key scores on this CPU";
  CheckBlockAttentionTakesThem(KvFormat::kTq4);
  CheckBlockAttentionTakesThem(KvFormat::kQ8);
}

TEST(Int8Kernels, BlockAttentionTakesKivi4KeyScoresAndTheSwitchTurnsThemOff) {
  if (!GetKvBlockKernels(KvFormat::kKivi4).score_q8) GTEST_SKIP() << "no integer kivi4 key scores on this CPU";
  CheckBlockAttentionTakesThem(KvFormat::kKivi4);
}

}  // namespace
}  // namespace chorus
