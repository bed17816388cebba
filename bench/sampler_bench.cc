// One Sampler::Sample over a vocabulary of random logits (SmolLM2's 49,152 by default): greedy (ArgMax)
// and temperature 0.8 with top-k 40 / top-p 0.95. A step samples every agent's row (Scheduler::Postprocess: over
// the pool, Scheduler::PickFor). build/bench/sampler_bench
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "model/sampler.h"

namespace {

void BM_Sample(benchmark::State& state) {
  const size_t vocab = static_cast<size_t>(state.range(0));
  const float temperature = static_cast<float>(state.range(1)) / 10.0f;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> logits(vocab);
  for (float& x : logits) x = nd(rng);
  chorus::Sampler sampler({.temperature = temperature, .top_k = 40, .top_p = 0.95f, .seed = 1});
  for (auto _ : state) benchmark::DoNotOptimize(sampler.Sample(logits.data(), vocab));
}
BENCHMARK(BM_Sample)->ArgNames({"vocab", "temp_x10"})->Args({49152, 0})->Args({49152, 8})->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
