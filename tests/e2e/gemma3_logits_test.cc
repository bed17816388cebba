// The real Gemma 3 270M forward pass (Q4_K_M; sliding windows of 512 on 15 of 18 layers) vs
// llama.cpp's logits on WikiText-2 (committed top-32 goldens beyond the 512-token window, made by
// scripts/ref/llama_logits.py -m models/gemma-3-270m-q4_k_m.gguf --noise-floor), through the block
// KV store with f16 blocks — the path agents and the server use. The threshold is relative to
// llama.cpp against itself (flash attention on vs off, recorded in the golden).
// Catches: a wrong QK-norm, RoPE style or per-layer base, window edge, GeGLU, post-norm,
// embedding scale or BOS handling: each moves KL orders of magnitude above the floor.
#include <gtest/gtest.h>

#include <vector>

#include "engine/kv_config.h"  // MakeKvConfig, MakeKvRuntime
#include "logits_golden.h"
#include "model/forward.h"

namespace chorus {
namespace {

constexpr const char* kModel = "models/gemma-3-270m-q4_k_m.gguf";
constexpr const char* kGolden = "tests/e2e/testdata/gemma3_logits_golden.json";

TEST(Gemma3Logits, AtLlamaCppNoiseFloorBeyondTheWindow) {
  auto model = Model::Load(kModel);
  ASSERT_TRUE(model.ok()) << model.status().message() << " — run scripts/fetch_model.sh gemma3-270m";
  const ModelConfig& c = model.value()->config();
  const testing::LogitsGolden g = testing::LoadLogitsGolden(kGolden);
  ASSERT_GT(g.n_pos, 512u + 64u) << "the golden must reach past the 512-token window";
  ASSERT_EQ(c.n_vocab, g.n_vocab);
  ASSERT_EQ(g.tokens[0], 2) << "the golden starts with BOS, as llama.cpp reads the file";
  ThreadPool pool(2);
  ForwardPass fwd(*model.value(), 512);
  auto kv_cfg = MakeKvConfig("f16", "f16", c);
  ASSERT_TRUE(kv_cfg.ok());
  KvRuntime rt = MakeKvRuntime(c, *kv_cfg);
  auto seq = rt.store->NewSequence(g.n_pos);
  testing::LogitsAgreement before, after;  // positions < 512 and >= 512 (windowed layers cut in)
  constexpr size_t kChunk = 128;           // (128, 262144) f32 logits at a time: 128 MiB
  std::vector<float> logits(kChunk * c.n_vocab);
  for (size_t p0 = 0; p0 < g.n_pos; p0 += kChunk) {
    const size_t n = std::min(kChunk, g.n_pos - p0);
    ASSERT_TRUE(fwd.Run(std::span(g.tokens).subspan(p0, n), *seq, pool, LogitsFor::kAll, logits.data()).ok());
    for (size_t r = 0; r < n; ++r) (p0 + r < 512 ? before : after).Add(g, p0 + r, logits.data() + r * c.n_vocab, 1);
  }
  const double floor = g.header["noise_floor"]["kl_lower_bound_mean"];
  const double floor_top1 = g.header["noise_floor"]["top1"];
  std::printf("positions 0-511: top-1 %.4f KL(top-32+rest) mean %.2e max %.2e\n", before.top1(), before.kl_mean(),
              before.kl_max);
  std::printf("positions 512-%zu: top-1 %.4f KL mean %.2e max %.2e\n", g.n_pos - 1, after.top1(), after.kl_mean(),
              after.kl_max);
  std::printf("llama.cpp flash-attn on vs off: KL lower bound %.2e, top-1 %.4f\n", floor, floor_top1);
  RecordProperty("kl_mean_after_window", std::to_string(after.kl_mean()));
  // docs/EVAL.md's relative criterion: no worse than 1.5x llama.cpp against itself, on both sides
  // of the window edge; top-1 within 3 points of llama.cpp's own agreement.
  EXPECT_LE(before.kl_mean(), 1.5 * floor);
  EXPECT_LE(after.kl_mean(), 1.5 * floor);
  EXPECT_GE(before.top1(), floor_top1 - 0.03);
  EXPECT_GE(after.top1(), floor_top1 - 0.03);
  // A local layer keeps only what its window reaches (17 blocks at most of the 20+ sealed).
  EXPECT_GT(seq->first_block(0), 0u);
  EXPECT_EQ(seq->first_block(5), 0u);  // layer 5 is global
}

}  // namespace
}  // namespace chorus
