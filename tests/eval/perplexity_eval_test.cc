// eval::RunPerplexity, RunKld and RunLogits on a synthetic model: the protocol's counts (second
// halves scored), f16 against the f16 base is exactly zero KLD with full top-1 agreement, narrower
// formats diverge more and store fewer bits, the logits file holds n_tokens x n_vocab floats, and
// the reports carry the eval schema. Catches: a scored range off by one, a base run under another
// KV than f16, a policy row measured on the wrong chunk, bad input that crashes.
#include "eval/perplexity_eval.h"

#include <gtest/gtest.h>
#include <unistd.h>  // getpid

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "eval/report.h"  // kEvalSchema
#include "tiny_model.h"   // TinyModelDir

namespace chorus::eval {
namespace {

struct PerplexityFixture : ::testing::Test {
  void SetUp() override {
    dir = TinyModelDir("perplexity_eval");  // holds tiny.gguf
    model = dir + "/tiny.gguf";
    text = dir + "/text.txt";
    std::ofstream f(text);
    for (int i = 0; i < 100; ++i) f << "the quick brown fox " << i * 7919 % 1000 << " jumps over it. ";
  }
  void TearDown() override { std::filesystem::remove_all(dir); }
  ChunkedText Chunked() const { return {.model_path = model, .text_path = text, .ctx = 128, .chunks = 2}; }
  std::string dir, model, text;
};

TEST_F(PerplexityFixture, ScoresTheSecondHalfOfEachChunk) {
  auto r = RunPerplexity({.text = Chunked(), .kv = {.policy = KvPolicy::Parse("f16").value()}});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->chunks, 2u);
  EXPECT_EQ(r->scored_tokens, 2u * 63u);  // logits 64 .. 126 of each 128-token chunk
  EXPECT_GT(r->file_tokens, 256u);
  EXPECT_TRUE(std::isfinite(r->ppl) && r->ppl > 1) << r->ppl;
  EXPECT_EQ(r->kv_k, "f16");
  EXPECT_TRUE(r->kv_policy.is_null());
  const nlohmann::json j = ToJson(*r);
  EXPECT_EQ(j["schema"], kEvalSchema);
  EXPECT_EQ(j["kind"], "perplexity");
  EXPECT_EQ(j["ppl"], r->ppl);
}

TEST_F(PerplexityFixture, KldIsZeroForF16AndGrowsAsFormatsNarrow) {
  auto r = RunKld({.text = Chunked(), .specs = {"f16", "q8/q8", "kivi2", "comix-kivi:3"}});
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->configs.size(), 4u);
  const KldRow &f16 = r->configs[0], &q8 = r->configs[1], &kivi2 = r->configs[2], &comix = r->configs[3];
  EXPECT_EQ(f16.name, "f16/f16");
  EXPECT_EQ(f16.kld_mean, 0.0);
  EXPECT_EQ(f16.top1, 1.0);
  EXPECT_EQ(f16.ppl, r->base_ppl);
  EXPECT_GT(kivi2.kld_mean, q8.kld_mean);
  EXPECT_LT(kivi2.bits_per_element, q8.bits_per_element);
  EXPECT_LT(q8.bits_per_element, f16.bits_per_element);
  EXPECT_EQ(comix.k, comix.name);  // a policy: its name in place of the formats
  EXPECT_FALSE(comix.kv_policy.is_null());
  EXPECT_NE(comix.kv_text.find("measured KV"), std::string::npos) << comix.kv_text;
  for (const KldRow& row : r->configs) EXPECT_EQ(row.chunk_kld.size(), 2u);
  const nlohmann::json j = ToJson(*r);
  EXPECT_EQ(j["kind"], "kld");
  EXPECT_EQ(j["configs"].size(), 4u);
  EXPECT_TRUE(j["configs"][3].contains("kv_policy"));
  EXPECT_FALSE(j["configs"][1].contains("kv_policy"));
}

TEST_F(PerplexityFixture, LogitsFileHoldsEveryTokensRow) {
  const std::string out = dir + "/logits.bin";
  auto r = RunLogits({.model_path = model,
                      .text_path = text,
                      .out_path = out,
                      .n_tokens = 40,
                      .kv = {.policy = KvPolicy::Parse("f16").value()}});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->tokens.size(), 40u);
  EXPECT_EQ(std::filesystem::file_size(out), 40u * 300u * sizeof(float));
  EXPECT_EQ(ToJson(*r)["kind"], "logits");
}

TEST_F(PerplexityFixture, BadInputNamesTheProblem) {
  ChunkedText t = Chunked();
  t.ctx = 1 << 20;
  auto long_ctx = RunPerplexity({.text = t});
  ASSERT_FALSE(long_ctx.ok());
  EXPECT_NE(long_ctx.status().message().find("exceeds the model's training context"), std::string::npos);
  t.ctx = 0;  // nothing to score: an error, never a division by zero
  auto no_ctx = RunKld({.text = t, .specs = {"q8/q8"}});
  ASSERT_FALSE(no_ctx.ok());
  EXPECT_NE(no_ctx.status().message().find("-c 0"), std::string::npos) << no_ctx.status().message();
  t = Chunked();
  t.text_path = dir + "/missing.txt";
  auto missing = RunKld({.text = t, .specs = {"q8/q8"}});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("missing.txt"), std::string::npos) << missing.status().message();
  auto bad_spec = RunKld({.text = Chunked(), .specs = {"nosuchformat"}});
  ASSERT_FALSE(bad_spec.ok());
  // The synthetic model has no calibration table: a measured rank's fallback (:f) would run other
  // formats than the report names, so the eval refuses with the engine's note.
  auto fallback =
      RunPerplexity({.text = Chunked(), .kv = {.policy = KvPolicy::Parse("comix-kivi:3:m:fkivi4/tq3").value()}});
  ASSERT_FALSE(fallback.ok());
  EXPECT_NE(fallback.status().message().find("falls back to kivi4/tq3"), std::string::npos)
      << fallback.status().message();
  auto policy_logits = RunLogits({.model_path = model,
                                  .text_path = text,
                                  .out_path = dir + "/x.bin",
                                  .n_tokens = 40,
                                  .kv = {.policy = KvPolicy::Parse("comix-kivi:3").value()}});
  ASSERT_FALSE(policy_logits.ok());
  EXPECT_NE(policy_logits.status().message().find("eval logits takes uniform formats"), std::string::npos);
}

}  // namespace
}  // namespace chorus::eval
