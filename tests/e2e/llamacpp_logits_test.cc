// The real SmolLM2-135M forward pass vs llama.cpp's logits (committed top-32 goldens, produced by
// scripts/ref/llama_logits.py): top-1 agreement and a KL lower bound over ≥ 512 positions.
#include <gtest/gtest.h>

#include <vector>

#include "logits_golden.h"  // LoadLogitsGolden, LogitsAgreement
#include "model/forward.h"

namespace chorus {
namespace {

constexpr const char* kModel = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
constexpr const char* kGolden = "tests/e2e/testdata/llamacpp_logits_golden.json";

TEST(LlamaCppLogits, Top1AndKlAgreeOnWikiText) {
  auto model = Model::Load(kModel);
  ASSERT_TRUE(model.ok()) << model.status().message() << " — run scripts/fetch_model.sh";
  const testing::LogitsGolden g = testing::LoadLogitsGolden(kGolden);
  ASSERT_GE(g.n_pos, 512u);
  ASSERT_EQ(g.tokens.size(), g.n_pos);
  const size_t V = model.value()->config().n_vocab;
  ASSERT_EQ(V, g.n_vocab);
  ThreadPool pool(2);
  ForwardPass fwd(*model.value(), 512);
  DenseKvCache kv = fwd.MakeCache(g.n_pos);
  std::vector<float> logits(g.n_pos * V);
  ASSERT_TRUE(fwd.Run(g.tokens, kv, pool, LogitsFor::kAll, logits.data()).ok());
  testing::LogitsAgreement agreement;
  agreement.Add(g, 0, logits.data(), g.n_pos);
  const double top1 = agreement.top1(), kl_mean = agreement.kl_mean();
  RecordProperty("top1", std::to_string(top1));
  RecordProperty("kl_mean", std::to_string(kl_mean));
  std::printf("positions %zu  top-1 agreement %.4f  KL(top-%zu+rest) mean %.2e max %.2e\n", g.n_pos, top1, g.k,
              kl_mean, agreement.kl_max);
  // The floor is set by activation quantization (both engines round activations to int8 per 32
  // values, so 1e-7 input differences flip codes and the noise decorrelates over 30 layers):
  // llama.cpp against itself, flash-attn on vs off: KL 3.0e-3, top-1 96.0 %; chorus's dense vs
  // block attention (outputs equal to 1e-7): KL 2.9e-3, top-1 97.4 % (docs/results/foundation.md).
  // A bug (wrong RoPE, norm, GQA mapping, scale) gives KL > 0.1 and top-1 < 80 %. Top-1 over 1,024
  // positions has a binomial spread of ±0.6 % at 96.5 %, so the bound sits two of those below the
  // floor: measured 96.7 % (per-token dense attention) and 95.9 % (tiled, same inputs, other float
  // rounding, KL 2.18e-3 — lower) on the same golden.
  EXPECT_GE(top1, 0.95);
  EXPECT_LE(kl_mean, 4e-3);
}

}  // namespace
}  // namespace chorus
