// Vectorized softmax folding and fp16-row kernels vs their scalar twins.
#include "kv/attention_math.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "util/fp16.h"

namespace chorus {
namespace {

// n fp16 values drawn from N(0, 1).
std::vector<uint16_t> RandomF16(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  std::vector<uint16_t> out(n);
  for (auto& x : out) x = F32ToF16(nd(rng));
  return out;
}

}  // namespace

TEST(AttentionMath, SoftmaxFoldMatchesRef) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  for (size_t n_rows : {1u, 5u, 16u, 31u, 32u}) {
    const size_t n_q = 3, ld = 32, hd = 64;
    std::vector<float> s(n_q * ld), m(n_q), l(n_q), o(n_q * hd);
    for (size_t i = 0; i < n_q; ++i) m[i] = i == 0 ? -INFINITY : nd(rng) * 5;  // fresh state and running ones
    for (auto& x : l) x = std::fabs(nd(rng)) + 1;
    for (auto& x : o) x = nd(rng);
    for (auto& x : s) x = nd(rng) * 8;
    auto s2 = s, m2 = m, l2 = l, o2 = o;
    SoftmaxFold(s.data(), n_q, ld, n_rows, m.data(), l.data(), o.data(), hd);
    SoftmaxFoldRef(s2.data(), n_q, ld, n_rows, m2.data(), l2.data(), o2.data(), hd);
    // Vector exp is accurate to a few ulp: relative 1e-6 per term.
    for (size_t i = 0; i < n_q; ++i) {
      EXPECT_EQ(m[i], m2[i]);
      EXPECT_NEAR(l[i], l2[i], 1e-5f * l2[i]);
    }
    for (size_t i = 0; i < s.size(); ++i) ASSERT_NEAR(s[i], s2[i], 1e-6f * (1 + s2[i])) << n_rows;
    for (size_t i = 0; i < o.size(); ++i) ASSERT_NEAR(o[i], o2[i], 1e-6f * (1 + std::fabs(o2[i])));
  }
}

// The fold's vector exp (e^(s - m) with m = 0 here) against e^x in double over [-110, 0]: within 2 ulp
// where e^x is a normal float, within 2^-148 among the denormals, exactly 0 below -104 and for -inf.
TEST(AttentionMath, SoftmaxFoldExpIsWithinTwoUlp) {
  const size_t n_q = 16, ld = 32, hd = 16, per = n_q * ld;
  for (size_t n_rows : {32u, 31u}) {  // the 16-query path and the per-query one
    double worst = 0;
    for (size_t round = 0; round < 400; ++round) {
      std::vector<float> s(per), m(n_q, 0.0f), l(n_q, 0.0f), o(n_q * hd, 0.0f);
      for (size_t k = 0; k < per; ++k) s[k] = -110.0f * static_cast<float>(round * per + k) / (400.0f * per);
      s[5] = -INFINITY;
      const std::vector<float> x = s;
      SoftmaxFold(s.data(), n_q, ld, n_rows, m.data(), l.data(), o.data(), hd);
      for (size_t i = 0; i < n_q; ++i)
        for (size_t j = 0; j < n_rows; ++j) {
          const size_t k = i * ld + j;
          const double e = std::exp(double(x[k]));
          if (x[k] < -104.0f) {
            ASSERT_EQ(s[k], 0.0f) << x[k];
          } else if (e < 1.17549435e-38) {
            ASSERT_NEAR(s[k], e, 0x1p-148) << x[k];
          } else {
            const double ulp = std::ldexp(1.0, std::ilogb(e) - 23);
            worst = std::max(worst, std::fabs(s[k] - e) / ulp);
            ASSERT_LE(std::fabs(s[k] - e), 2 * ulp) << x[k] << " n_rows " << n_rows;
          }
        }
    }
    std::printf("n_rows %zu: worst error %.2f ulp\n", n_rows, worst);
  }
}

// Full tiles are folded 16 queries at a time on AVX-512 (maxima and sums reduced together): bit for bit
// the per-query fold, for query counts around 16, fresh and running states, masked scores, maxima
// that move and ones that do not, and ld wider than the tile.
TEST(AttentionMath, SoftmaxFoldOfFullTilesEqualsPerQueryFold) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  for (size_t n_q : {1u, 5u, 15u, 16u, 17u, 45u})
    for (size_t ld : {32u, 48u})
      for (int step = 0; step < 4; ++step) {
        const size_t hd = 64;
        std::vector<float> s(n_q * ld), m(n_q), l(n_q), o(n_q * hd);
        for (size_t i = 0; i < n_q; ++i) m[i] = i % 7 == 0 ? -INFINITY : nd(rng) * 4;
        for (auto& x : l) x = std::fabs(nd(rng)) + 1;
        for (auto& x : o) x = nd(rng);
        for (size_t i = 0; i < n_q; ++i)
          for (size_t j = 0; j < ld; ++j) {
            float& x = s[i * ld + j];
            x = nd(rng) * 4;
            if (i % 5 == 3 || (i % 3 == 1 && j < 7)) x = -INFINITY;  // a query masked whole, partly masked ones
          }
        auto s2 = s, m2 = m, l2 = l, o2 = o;
        SoftmaxFold(s.data(), n_q, ld, 32, m.data(), l.data(), o.data(), hd);
        SoftmaxFoldEach(s2.data(), n_q, ld, 32, m2.data(), l2.data(), o2.data(), hd);
        for (size_t i = 0; i < n_q; ++i) {
          ASSERT_EQ(m[i], m2[i]) << n_q << " " << i;
          ASSERT_EQ(std::memcmp(&l[i], &l2[i], 4), 0) << n_q << " query " << i << ": " << l[i] << " vs " << l2[i];
        }
        ASSERT_EQ(std::memcmp(s.data(), s2.data(), s.size() * 4), 0) << n_q;
        ASSERT_EQ(std::memcmp(o.data(), o2.data(), o.size() * 4), 0) << n_q;
      }
}

TEST(AttentionMath, F16RowsMatchScalar) {
  std::mt19937 rng(2);
  std::normal_distribution<float> nd;
  for (size_t hd : {64u, 48u, 7u}) {
    const size_t n_q = 3, n_rows = 19, stride = hd * 2, ld = 32;
    const std::vector<uint16_t> k = RandomF16(n_rows * stride, rng), v = RandomF16(n_rows * stride, rng);
    std::vector<float> q(n_q * hd), s(n_q * ld), o(n_q * hd, 0.5f);
    for (auto& x : q) x = nd(rng);
    ScoreF16Rows(q.data(), n_q, hd, k.data(), stride, n_rows, s.data(), ld);
    for (size_t i = 0; i < n_q; ++i)
      for (size_t j = 0; j < n_rows; ++j) {
        double ref = 0;
        for (size_t c = 0; c < hd; ++c) ref += double(q[i * hd + c]) * F16ToF32(k[j * stride + c]);
        ASSERT_NEAR(s[i * ld + j], ref, 1e-4);
      }
    AccumulateF16Rows(s.data(), n_q, ld, v.data(), stride, n_rows, o.data(), hd);
    for (size_t i = 0; i < n_q; ++i)
      for (size_t c = 0; c < hd; ++c) {
        double ref = 0.5;
        for (size_t j = 0; j < n_rows; ++j) ref += double(s[i * ld + j]) * F16ToF32(v[j * stride + c]);
        ASSERT_NEAR(o[i * hd + c], ref, 1e-3 * (1 + std::fabs(ref)));
      }
  }
}

TEST(AttentionMath, F16RowsOfAQueryAreTheSameFloatsAloneOrStacked) {
  // Batched agents must answer as alone: a kernel whose per-query arithmetic depended on how many
  // queries are stacked (a different path or reduction order for n_q > 1) fails this bitwise check.
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (size_t hd : {64u, 256u, 20u}) {
    const size_t n_rows = 45, stride = hd + 1, ld = 48, n_q = 7;
    const std::vector<uint16_t> k = RandomF16(n_rows * stride, rng), v = RandomF16(n_rows * stride, rng);
    std::vector<float> q(n_q * hd), s(n_q * ld), o(n_q * hd, 0.25f);
    for (auto& x : q) x = nd(rng);
    ScoreF16Rows(q.data(), n_q, hd, k.data(), stride, n_rows, s.data(), ld);
    AccumulateF16Rows(s.data(), n_q, ld, v.data(), stride, n_rows, o.data(), hd);
    for (size_t i = 0; i < n_q; ++i) {
      std::vector<float> s1(ld), o1(hd, 0.25f);
      ScoreF16Rows(q.data() + i * hd, 1, hd, k.data(), stride, n_rows, s1.data(), ld);
      for (size_t j = 0; j < n_rows; ++j) ASSERT_EQ(s1[j], s[i * ld + j]) << hd << " q " << i << " row " << j;
      AccumulateF16Rows(s1.data(), 1, ld, v.data(), stride, n_rows, o1.data(), hd);
      for (size_t c = 0; c < hd; ++c) ASSERT_EQ(o1[c], o[i * hd + c]) << hd << " q " << i << " col " << c;
    }
  }
}

}  // namespace chorus
