// The divergences the evaluations report, one definition each.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>

namespace chorus::eval {

// KL(base || softmax(row)) in nats, clamped at 0: `base_lp` holds log-probabilities, lse = LogSumExp(row)
// (every scored position against the f16 KV run).
inline double KlFromLogProbs(const float* base_lp, const float* row, float lse, size_t n) {
  double kl = 0;
  for (size_t i = 0; i < n; ++i) kl += std::exp(double(base_lp[i])) * (double(base_lp[i]) - double(row[i] - lse));
  return std::max(0.0, kl);
}

}  // namespace chorus::eval
