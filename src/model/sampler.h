// Sampler: picks the next token from logits — greedy at temperature 0, else temperature + top-k +
// top-p sampling from a seeded generator (same seed → same tokens).
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "util/status.h"

namespace chorus {

struct SamplingOptions {
  float temperature = 0.0f;  // 0 → greedy
  int top_k = 40;            // 0 → all tokens
  float top_p = 0.95f;       // 1 → no nucleus cut
  uint64_t seed = 0;
};

Status ValidateSampling(const SamplingOptions& o);

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options);
  // logits: (n_vocab); ties in greedy go to the lowest id.
  int32_t Sample(const float* logits, size_t n_vocab);

 private:
  SamplingOptions o_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;  // scratch: (logit, id)
};

int32_t ArgMax(const float* x, size_t n);

}  // namespace chorus
