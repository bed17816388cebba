// On the real model: f16/f16 blocks give the dense fp16 cache's greedy tokens and, over 576
// positions of a WikiText-2 article, its next-token distributions (KL and top-1); compressed
// formats run end to end and stay close.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <vector>

#include "engine/kv_config.h"
#include "model/forward.h"
#include "model/sampler.h"  // ArgMax

namespace chorus {
namespace {

constexpr const char* kModel = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

// Greedy tokens; margins (optional): top-1 minus top-2 logit at each step.
std::vector<int32_t> Greedy(const Model& m, SequenceKv& kv, const std::vector<int32_t>& prompt, int n,
                            std::vector<float>* first_logits, std::vector<float>* margins = nullptr) {
  ThreadPool pool(2);
  ForwardPass fwd(m, 24);  // micro-batches of 24: blocks seal inside and across batches
  std::vector<float> logits(m.config().n_vocab);
  EXPECT_TRUE(fwd.Run(prompt, kv, pool, LogitsFor::kLast, logits.data()).ok());
  if (first_logits) *first_logits = logits;
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const int32_t t = ArgMax(logits.data(), logits.size());
    out.push_back(t);
    if (margins) {
      float second = -INFINITY;
      for (size_t v = 0; v < logits.size(); ++v)
        if (static_cast<int32_t>(v) != t) second = std::max(second, logits[v]);
      margins->push_back(logits[t] - second);
    }
    const int32_t one[1] = {t};
    EXPECT_TRUE(fwd.Run(one, kv, pool, LogitsFor::kLast, logits.data()).ok());
  }
  return out;
}

TEST(KvExactness, F16BlocksGiveTheFoundationsGreedyTokens) {
  auto model = Model::Load(kModel);
  ASSERT_TRUE(model.ok()) << model.status().message() << " — run scripts/fetch_model.sh";
  const Model& m = *model.value();
  const std::vector<int32_t> prompt = m.tokenizer().Encode(
      "The Roman Empire was the post-Republican state of ancient Rome. It included large territorial holdings "
      "around the Mediterranean Sea in Europe, North Africa, and Western Asia, and was ruled by emperors. From the "
      "accession of Caesar Augustus as the first Roman emperor to the military anarchy of the 3rd century, it was",
      false, false);
  ASSERT_GT(prompt.size(), 40u);
  ForwardPass fwd(m);
  DenseKvCache dense = fwd.MakeCache(512);
  std::vector<float> dense_logits, block_logits, margins;
  const auto want = Greedy(m, dense, prompt, 48, &dense_logits, &margins);
  KvRuntime rt = MakeKvRuntime(m.config(), KvConfig{});
  auto seq = rt.store->NewSequence(512);
  std::vector<float> block_margins;
  const auto got = Greedy(m, *seq, prompt, 48, &block_logits, &block_margins);
  // The two caches' logits differ at the measured floor (mean KL 3.2e-3, as llama.cpp's flash
  // attention on/off): their top-2 margins differ by up to ~0.2 logits at steps where they agree
  // (step 34 of this prompt: 1.93 vs 1.74). So the greedy tokens must agree for a long stretch, and
  // where they first part, both runs must be at a near-tie (top-2 margin < 0.25 in each). With the
  // SIMD SwiGLU (Highway Exp) they part at step 35 (margins 0.12 dense, 0.06 blocks); with glibc's
  // expf the old rule stopped at step 31's 0.002 tie (now 0.05).
  ASSERT_EQ(got.size(), want.size());
  size_t n_same = 0;
  while (n_same < want.size() && got[n_same] == want[n_same]) ++n_same;
  EXPECT_GE(n_same, 24u) << "the caches part early: step " << n_same;
  if (n_same < want.size()) {
    EXPECT_LT(margins[n_same], 0.25f) << "step " << n_same << ": not a near-tie in the dense run";
    EXPECT_LT(block_margins[n_same], 0.25f) << "step " << n_same << ": not a near-tie in the blocks";
  }

  // q8/q8 stays close: same first greedy token at least, and the store holds fewer bytes.
  KvRuntime rt8 = MakeKvRuntime(m.config(), KvConfig{.k = KvFormat::kQ8, .v = KvFormat::kQ8});
  auto seq8 = rt8.store->NewSequence(512);
  const auto got8 = Greedy(m, *seq8, prompt, 8, nullptr);
  EXPECT_EQ(got8[0], want[0]);
  EXPECT_LT(rt8.store->Usage().block_bytes, rt.store->Usage().block_bytes);
}

// KL(dense ‖ blocks) of one row of logits, in nats, and whether the argmax agrees.
std::pair<double, bool> RowKl(const float* p_logits, const float* q_logits, size_t n) {
  double mp = -INFINITY, mq = -INFINITY;
  size_t ap = 0, aq = 0;
  for (size_t i = 0; i < n; ++i) {
    if (p_logits[i] > mp) mp = p_logits[i], ap = i;
    if (q_logits[i] > mq) mq = q_logits[i], aq = i;
  }
  double zp = 0, zq = 0;
  for (size_t i = 0; i < n; ++i) zp += std::exp(p_logits[i] - mp), zq += std::exp(q_logits[i] - mq);
  const double lzp = std::log(zp) + mp, lzq = std::log(zq) + mq;
  double kl = 0;
  for (size_t i = 0; i < n; ++i) {
    const double lp = p_logits[i] - lzp, lq = q_logits[i] - lzq;
    kl += std::exp(lp) * (lp - lq);
  }
  return {std::max(0.0, kl), ap == aq};
}

// Catches f16 blocks that are not the dense fp16 cache (a dropped or misplaced block, a lossy
// rounding, a wrong position): over 576 positions of the article the repository ships, teacher-
// forced in 64-token pieces, the KL and the top-1 agreement stay at the floor of two correct
// attention orders. Measured here (2 threads): f16 blocks mean 3.19e-3, max 1.83e-2 nats, top-1
// 97.4 % — the floor llamacpp_logits_test notes for dense vs block attention (outputs equal to
// 1e-7, KL 2.9e-3) and llama.cpp's own flash-attention on vs off (3.0e-3): the weight kernels
// quantize activations to int8, which turns 1e-7 differences into this. Lossy caches sit above
// it: q8 window mean 4.28e-3 max 3.41e-2 top-1 96.9 %, q8/q8 blocks 3.51e-3 / 2.19e-2 / 95.7 %,
// tq4/tq3 1.39e-2 / 0.192 / 92.9 %; a bug gives KL > 0.1. Limits: mean < 4e-3, max < 3e-2 (the q8
// window fails both), top-1 >= 96 % (the q8 blocks fail it).
TEST(KvExactness, F16BlocksGiveTheDenseCachesDistributions) {
  auto model = Model::Load(kModel);
  ASSERT_TRUE(model.ok()) << model.status().message() << " — run scripts/fetch_model.sh";
  const Model& m = *model.value();
  std::ifstream f("examples/du_fu.txt");
  std::stringstream ss;
  ss << f.rdbuf();
  std::vector<int32_t> tokens = m.tokenizer().Encode(ss.str(), true, false);
  constexpr size_t kPositions = 576, kPiece = 64;
  ASSERT_GE(tokens.size(), kPositions);
  tokens.resize(kPositions);
  const size_t V = m.config().n_vocab;
  ThreadPool pool(2);
  ForwardPass fwd(m, kPiece);
  DenseKvCache dense = fwd.MakeCache(kPositions);
  KvRuntime rt = MakeKvRuntime(m.config(), KvConfig{});
  auto seq = rt.store->NewSequence(kPositions);
  std::vector<float> a(kPiece * V), b(kPiece * V);
  double kl_sum = 0, kl_max = 0;
  size_t agree = 0;
  for (size_t done = 0; done < kPositions; done += kPiece) {
    const std::span<const int32_t> piece(tokens.data() + done, kPiece);
    ASSERT_TRUE(fwd.Run(piece, dense, pool, LogitsFor::kAll, a.data()).ok());
    ASSERT_TRUE(fwd.Run(piece, *seq, pool, LogitsFor::kAll, b.data()).ok());
    for (size_t t = 0; t < kPiece; ++t) {
      const auto [kl, same] = RowKl(a.data() + t * V, b.data() + t * V, V);
      kl_sum += kl;
      kl_max = std::max(kl_max, kl);
      agree += same;
    }
  }
  const double kl_mean = kl_sum / kPositions;
  std::printf("f16 blocks vs dense fp16 over %zu positions: mean KL %.3g, max KL %.3g, top-1 %.2f %%\n", kPositions,
              kl_mean, kl_max, 100.0 * agree / kPositions);
  EXPECT_LT(kl_mean, 4e-3);
  EXPECT_LT(kl_max, 3e-2);
  EXPECT_GE(double(agree) / kPositions, 0.96);
}

}  // namespace
}  // namespace chorus
