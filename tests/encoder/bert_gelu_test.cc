// GeluErf (Highway, A&S erf) against GeluErfRef (std::erf) over a dense grid, the tails, odd lengths.
#include "encoder/bert_gelu.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace chorus {
namespace {

TEST(BertGelu, MatchesStdErf) {
  std::vector<float> x;
  for (float v = -12.0f; v <= 12.0f; v += 0.001f) x.push_back(v);
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 50.0f, -50.0f, 1e4f, -1e4f}) x.push_back(v);
  for (size_t n : {x.size(), size_t{1}, size_t{3}, size_t{17}}) {
    std::vector<float> a(x.begin(), x.begin() + n), b = a;
    GeluErf(a.data(), n);
    GeluErfRef(b.data(), n);
    for (size_t i = 0; i < n; ++i)
      ASSERT_NEAR(a[i], b[i], 1e-6f * std::max(1.0f, std::fabs(x[i]))) << "x=" << x[i];
  }
}

}  // namespace
}  // namespace chorus
