// BertAttention (Highway) against BertAttentionRef (scalar, double) on random q/k/v: the MiniLM shape,
// lengths that leave partial vectors, a head_dim that is not a multiple of the vector length, n = 1.
#include "encoder/bert_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace chorus {
namespace {

void Check(size_t n, size_t heads, size_t hd, float amp) {
  const size_t ld = heads * hd;
  std::mt19937 rng(static_cast<uint32_t>(n * 1000 + heads * 10 + hd));
  std::normal_distribution<float> nd(0.0f, amp);
  std::vector<float> q(n * ld), k(n * ld), v(n * ld), a(n * ld, -7.0f), b(n * ld, -7.0f);
  for (auto* x : {&q, &k, &v})
    for (float& f : *x) f = nd(rng);
  const float scale = 1.0f / std::sqrt(float(hd));
  BertAttention(q.data(), k.data(), v.data(), ld, n, heads, hd, scale, a.data());
  BertAttentionRef(q.data(), k.data(), v.data(), ld, n, heads, hd, scale, b.data());
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], b[i], 2e-5f * amp) << "n=" << n << " heads=" << heads << " hd=" << hd << " at " << i;
}

TEST(BertAttention, MatchesReference) {
  for (size_t n : {1, 2, 7, 16, 33, 256}) Check(n, 12, 32, 1.0f);
  Check(9, 3, 20, 1.0f);   // head_dim not a multiple of the vector length: scalar path
  Check(40, 2, 64, 4.0f);  // peaked softmax
}

}  // namespace
}  // namespace chorus
