// The llama family's other shapes against llama.cpp, on random-weight GGUFs the test writes itself
// (tests/model/synthetic_model.h: Llama 3.x at head_dim 64 / GQA 4:1 and head_dim 128 / GQA 8:1 with
// Llama 3.1's rope_freqs, Qwen 2.5 with QKV biases and tied output, Mistral at head_dim 128, linear
// RoPE scaling). Goldens: scripts/ref/llama_shapes_goldens.py ran llama.cpp on the same bytes and
// measured its own noise floor (flash attention on vs off); chorus must stay within 2.5x of it.
// Catches: a wrong RoPE style / frequency scaling / factors, a bias left out, the GQA mapping,
// the tied output — each moves KL orders of magnitude above the floor.
#include <unistd.h>  // getpid
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdio>
#include <string>

#include "logits_golden.h"
#include "model/forward.h"
#include "../model/synthetic_model.h"

namespace chorus {
namespace {

class LlamaShapes : public ::testing::TestWithParam<testing::SyntheticSpec> {};

TEST_P(LlamaShapes, LogitsAtLlamaCppNoiseFloor) {
  const testing::SyntheticSpec& spec = GetParam();
  const testing::LogitsGolden g = testing::LoadLogitsGolden("tests/e2e/testdata/shapes/" + spec.name + ".json");
  ASSERT_GT(g.n_pos, 0u);
  const GgufWriter w = testing::SyntheticModel(spec);
  char fnv[17];
  std::snprintf(fnv, sizeof fnv, "%016" PRIx64, testing::Fnv1a(w.ToBytes()));
  ASSERT_EQ(std::string(fnv), g.header["model"]["fnv1a"].get<std::string>())
      << "the generator changed: rerun scripts/ref/llama_shapes_goldens.py";
  const std::string path = std::string(::testing::TempDir()) + "/" + spec.name + "." + std::to_string(getpid()) + ".gguf";
  ASSERT_TRUE(w.WriteFile(path).ok());
  auto model = Model::Load(path);
  std::remove(path.c_str());
  ASSERT_TRUE(model.ok()) << model.status().message();
  const ModelConfig& c = model.value()->config();
  ASSERT_EQ(c.n_vocab, g.n_vocab);
  ThreadPool pool(2);
  ForwardPass fwd(*model.value(), 512);
  DenseKvCache kv = fwd.MakeCache(g.n_pos);
  std::vector<float> logits(g.n_pos * c.n_vocab);
  ASSERT_TRUE(fwd.Run(g.tokens, kv, pool, LogitsFor::kAll, logits.data()).ok());
  testing::LogitsAgreement a;
  a.Add(g, 0, logits.data(), g.n_pos);
  const double floor = g.header["noise_floor"]["kl_lower_bound_mean"];
  std::printf("%-20s positions %zu  top-1 %.4f  KL(top-%zu+rest) mean %.2e max %.2e  (llama.cpp fa on/off: %.2e)\n",
              spec.name.c_str(), g.n_pos, a.top1(), g.k, a.kl_mean(), a.kl_max, floor);
  RecordProperty("kl_mean", std::to_string(a.kl_mean()));
  // Relative to llama.cpp against itself. A few hundred positions leave the floor noisy (measured: chorus
  // at 1.4-2.0x it on these files, 0.85x on Gemma's 640 real positions), so the bound is 2.5x, top-1
  // within 4 points; a bug (wrong RoPE style or scaling, a missing bias) lands at KL > 0.05.
  EXPECT_LE(a.kl_mean(), 2.5 * floor);
  EXPECT_GE(a.top1(), g.header["noise_floor"]["top1"].get<double>() - 0.04);
}

INSTANTIATE_TEST_SUITE_P(Synthetic, LlamaShapes, ::testing::ValuesIn(testing::LlamaFamilyShapes()),
                         [](const auto& info) {
                           std::string n = info.param.name;
                           for (char& ch : n)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace chorus
