// eval::RunPolykv on a synthetic model: one document, a compressed pool against the f16 run, agent
// counts 1 and 2. Catches: an agent count lost, a pool copied per agent instead of shared, answers compared with the wrong agent's, bad formats that crash.
#include "eval/polykv_eval.h"

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

TEST(TokenF1, BagsOfTokens) {
  EXPECT_EQ(TokenF1({}, {}), 1.0);
  EXPECT_EQ(TokenF1({1, 2, 3}, {1, 2, 3}), 1.0);
  EXPECT_EQ(TokenF1({1, 2}, {3, 4}), 0.0);
  EXPECT_DOUBLE_EQ(TokenF1({1, 2, 3, 4}, {1, 2}), 2 * 1.0 * 0.5 / 1.5);
}

TEST(Polykv, PoolAgainstF16PerAgentCount) {
  const std::string dir = TinyModelDir("polykv_eval");  // holds tiny.gguf
  const std::string model = dir + "/tiny.gguf", text = dir + "/text.txt";
  {
    std::ofstream f(text);
    for (int i = 0; i < 100; ++i) f << "the quick brown fox " << i * 7919 % 1000 << " jumps over it. ";
  }
  PolykvConfig c{.model_path = model,
                 .text_path = text,
                 .doc_tokens = {300},
                 .agents = {1, 2},
                 .configs = {"q8/tq3"},
                 .max_tokens = 4};
  auto r = RunPolykv(c);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->documents.size(), 1u);
  const PolykvDocument& d = r->documents[0];
  EXPECT_EQ(d.pool_tokens, 210u);
  EXPECT_TRUE(std::isfinite(d.base_ppl) && d.base_ppl > 1);
  ASSERT_EQ(d.configs.size(), 1u);
  ASSERT_EQ(d.configs[0].agents.size(), 2u);
  const PolykvAgents &one = d.configs[0].agents[0], &two = d.configs[0].agents[1];
  // The pool is shared: a second agent adds its own KV, not a second copy of the pool.
  EXPECT_GT(two.kv_bytes, one.kv_bytes);
  EXPECT_LT(two.kv_bytes - one.kv_bytes, two.fp16_copies_bytes - one.fp16_copies_bytes);
  for (const PolykvAgents& ag : d.configs[0].agents) {
    EXPECT_LE(ag.answers_identical, ag.n);
    EXPECT_GT(ag.mean_answer_tokens, 0);
  }
  EXPECT_EQ(d.configs[0].agents[1].n, 2u);
  const nlohmann::json j = ToJson(*r);
  EXPECT_EQ(j["schema"], kEvalSchema);
  EXPECT_EQ(j["kind"], "polykv");
  EXPECT_EQ(j["documents"][0]["configs"][0]["agents"].size(), 2u);

  c.private_kv = "q8";
  auto bad = RunPolykv(c);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--private must be K/V"), std::string::npos);
  c.private_kv = "q8/q8";
  c.doc_tokens = {100000};
  auto too_long = RunPolykv(c);
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("--doc-tokens 100000 is out of range"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace chorus::eval
