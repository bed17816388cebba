// The real SmolLM2-135M forward pass vs llama.cpp's logits (committed top-32 goldens, produced by
// scripts/ref/llama_logits.py): top-1 agreement and a KL lower bound over ≥ 512 positions.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <vector>

#include "model/forward.h"
#include "model/sampler.h"    // ArgMax
#include "ops/elementwise.h"  // LogSumExp

namespace chorus {
namespace {

constexpr const char* kModel = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
constexpr const char* kGolden = "tests/e2e/testdata/llamacpp_logits_golden.json";

struct Golden {
  size_t n_pos = 0, k = 0;
  std::vector<int32_t> tokens, top_ids;
  std::vector<float> top_logprobs;
};

Golden LoadGolden() {
  Golden g;
  std::ifstream hf(kGolden);
  EXPECT_TRUE(hf) << "missing " << kGolden;
  const auto h = nlohmann::json::parse(hf);
  g.n_pos = h["n_pos"];
  g.k = h["k"];
  std::ifstream bf(std::string("tests/e2e/testdata/") + h["bin_file"].get<std::string>(), std::ios::binary);
  std::vector<char> bin((std::istreambuf_iterator<char>(bf)), {});
  for (const auto& s : h["sections"]) {
    const size_t off = s["offset"], nb = s["nbytes"];
    EXPECT_LE(off + nb, bin.size());
    auto copy = [&](auto& v) {
      v.resize(nb / sizeof(v[0]));
      std::memcpy(v.data(), bin.data() + off, nb);
    };
    if (s["name"] == "tokens") copy(g.tokens);
    if (s["name"] == "top_ids") copy(g.top_ids);
    if (s["name"] == "top_logprobs") copy(g.top_logprobs);
  }
  return g;
}

TEST(LlamaCppLogits, Top1AndKlAgreeOnWikiText) {
  auto model = Model::Load(kModel);
  ASSERT_TRUE(model.ok()) << model.status().message() << " — run scripts/fetch_model.sh";
  const Golden g = LoadGolden();
  ASSERT_GE(g.n_pos, 512u);
  ASSERT_EQ(g.tokens.size(), g.n_pos);
  const size_t V = model.value()->config().n_vocab;
  ThreadPool pool(2);
  ForwardPass fwd(*model.value(), 512);
  DenseKvCache kv = fwd.MakeCache(g.n_pos);
  std::vector<float> logits(g.n_pos * V);
  ASSERT_TRUE(fwd.Run(g.tokens, kv, pool, LogitsFor::kAll, logits.data()).ok());

  size_t agree = 0;
  double kl_sum = 0, kl_max = 0, max_lp_diff = 0;
  for (size_t p = 0; p < g.n_pos; ++p) {
    const float* row = logits.data() + p * V;
    const double lse = LogSumExp(row, V);
    const int32_t* ids = g.top_ids.data() + p * g.k;
    const float* ref_lp = g.top_logprobs.data() + p * g.k;
    // llama.cpp's argmax is its top-1; ties within float noise count as agreement.
    const int32_t mine = ArgMax(row, V);
    if (mine == ids[0] || std::fabs(row[mine] - row[ids[0]]) < 1e-4f) ++agree;
    // KL over the top-k ids plus one bucket for the rest: a lower bound of the full KL
    // (the full KL is checked by scripts/ref/check_vs_llamacpp.sh when llama-cpp-python is installed).
    double kl = 0, p_rest = 1, q_rest = 1;
    for (size_t i = 0; i < g.k; ++i) {
      const double lp = ref_lp[i], lq = row[ids[i]] - lse;
      kl += std::exp(lp) * (lp - lq);
      p_rest -= std::exp(lp);
      q_rest -= std::exp(lq);
      max_lp_diff = std::max(max_lp_diff, std::fabs(lp - lq) * std::exp(lp));
    }
    if (p_rest > 1e-12 && q_rest > 1e-12) kl += p_rest * std::log(p_rest / q_rest);
    kl_sum += kl;
    kl_max = std::max(kl_max, kl);
  }
  const double top1 = double(agree) / g.n_pos, kl_mean = kl_sum / g.n_pos;
  RecordProperty("top1", std::to_string(top1));
  RecordProperty("kl_mean", std::to_string(kl_mean));
  std::printf("positions %zu  top-1 agreement %.4f  KL(top-%zu+rest) mean %.2e max %.2e\n", g.n_pos, top1, g.k,
              kl_mean, kl_max);
  // The floor is set by activation quantization (both engines round activations to int8 per 32
  // values, so 1e-7 input differences flip codes and the noise decorrelates over 30 layers):
  // llama.cpp against itself, flash-attn on vs off: KL 3.0e-3, top-1 96.0 %; chorus's dense vs
  // block attention (outputs equal to 1e-7): KL 2.9e-3, top-1 97.4 % (docs/results/foundation.md).
  // A bug (wrong RoPE, norm, GQA mapping, scale) gives KL > 0.1 and top-1 < 80 %.
  EXPECT_GE(top1, 0.96);
  EXPECT_LE(kl_mean, 4e-3);
}

}  // namespace
}  // namespace chorus
