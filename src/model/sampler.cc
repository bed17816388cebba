// Sampler: greedy / temperature / top-k / top-p.
#include "model/sampler.h"

#include <algorithm>
#include <cmath>

namespace chorus {

Status ValidateSampling(const SamplingOptions& o) {
  if (!(o.temperature >= 0.0f) || !std::isfinite(o.temperature))
    return Status::Error("--temp must be >= 0, got {}", o.temperature);
  if (o.top_k < 0) return Status::Error("--top-k must be >= 0 (0 = all tokens), got {}", o.top_k);
  if (!(o.top_p > 0.0f && o.top_p <= 1.0f)) return Status::Error("--top-p must be in (0, 1], got {}", o.top_p);
  return Status::Ok();
}

int32_t ArgMax(const float* x, size_t n) {
  size_t best = 0;
  for (size_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return static_cast<int32_t>(best);
}

Sampler::Sampler(const SamplingOptions& options) : o_(options), rng_(options.seed) {}

int32_t Sampler::Sample(const float* logits, size_t n_vocab) {
  if (o_.temperature <= 0.0f) return ArgMax(logits, n_vocab);
  cand_.resize(n_vocab);
  for (size_t i = 0; i < n_vocab; ++i) cand_[i] = {logits[i], static_cast<int32_t>(i)};
  size_t k = (o_.top_k > 0 && static_cast<size_t>(o_.top_k) < n_vocab) ? o_.top_k : n_vocab;
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  std::partial_sort(cand_.begin(), cand_.begin() + k, cand_.end(), by_logit);
  cand_.resize(k);
  const float m = cand_[0].first;
  double sum = 0;
  std::vector<double> p(k);
  for (size_t i = 0; i < k; ++i) sum += (p[i] = std::exp((cand_[i].first - m) / o_.temperature));
  size_t keep = k;
  double cum = 0;
  for (size_t i = 0; i < k; ++i) {
    cum += p[i] / sum;
    if (cum >= o_.top_p) {
      keep = i + 1;
      break;
    }
  }
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += p[i];
  std::uniform_real_distribution<double> u(0.0, total);
  double r = u(rng_);
  for (size_t i = 0; i < keep; ++i) {
    if (r < p[i]) return cand_[i].second;
    r -= p[i];
  }
  while (keep > 1 && p[keep - 1] == 0) --keep;  // rounding: never a token of probability 0 (masked)
  return cand_[keep - 1].second;
}

}  // namespace chorus
