// eval::RunComixEval on a synthetic model: staggered agents under uniform formats and CoMix, each
// compared with the full-KV run. Catches: a row lost or reordered, a compressed run that stores
// as much as f16, a :budget config run without the uniform run it takes its budget from, a text
// too short for the agents that crashes instead of naming the file.
#include "eval/comix_eval.h"

#include <gtest/gtest.h>
#include <unistd.h>  // getpid

#include <cmath>
#include <filesystem>
#include <string>

#include "eval/report.h"  // kEvalSchema
#include "tiny_model.h"   // TinyModelDir

namespace chorus::eval {
namespace {

struct ComixFixture : ::testing::Test {
  void SetUp() override {
    dir = TinyModelDir("comix_eval");  // holds tiny.gguf
    model = dir + "/tiny.gguf";
    for (int i = 0; i < 200; ++i) text += "the quick brown fox " + std::to_string(i * 7919 % 1000) + " jumps. ";
  }
  void TearDown() override { std::filesystem::remove_all(dir); }
  ComixEvalConfig Config(const std::vector<std::string>& specs) const {
    ComixEvalConfig c{.model_path = model,
                      .text = text,
                      .text_name = "fox.txt",
                      .agents = 3,
                      .tokens = 96,
                      .prefill = 32,
                      .join_every = 8,
                      .answer = 4};
    for (const std::string& s : specs) c.configs.push_back(ParseComixBenchConfig(s).value());
    return c;
  }
  std::string dir, model, text;
};

TEST_F(ComixFixture, EveryConfigAgainstTheFullKv) {
  auto r = RunComixEval(Config({"kivi4", "kivi2", "comix-kivi:3", "comix-kivi:2:budget"}));
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->configs.size(), 4u);
  EXPECT_EQ(r->configs[2].config, "comix-kivi:3");
  EXPECT_TRUE(std::isfinite(r->base_ppl) && r->base_ppl > 1);
  EXPECT_GT(r->scored, 0u);
  const ComixEvalRow &kivi4 = r->configs[0], &kivi2 = r->configs[1], &budget = r->configs[3];
  EXPECT_LT(kivi4.peak_bytes, r->base_peak_bytes);
  EXPECT_LT(kivi2.peak_bytes, kivi4.peak_bytes);
  EXPECT_GT(kivi2.kld_mean, kivi4.kld_mean);
  EXPECT_EQ(budget.budget_bytes, kivi2.peak_bytes);  // :budget takes the uniform run's measured peak
  EXPECT_GT(r->configs[2].reallocs, 0u);
  const nlohmann::json j = ToJson(*r);
  EXPECT_EQ(j["schema"], kEvalSchema);
  EXPECT_EQ(j["kind"], "comix");
  EXPECT_EQ(j["configs"].size(), 4u);
  EXPECT_EQ(j["file"], "fox.txt");
}

TEST_F(ComixFixture, BadInputNamesTheProblem) {
  auto no_uniform = RunComixEval(Config({"comix-kivi:2:budget"}));
  ASSERT_FALSE(no_uniform.ok());
  EXPECT_NE(no_uniform.status().message().find("needs the uniform kivi2 run before it"), std::string::npos)
      << no_uniform.status().message();
  ComixEvalConfig c = Config({"kivi4"});
  c.text = "too short";
  auto short_text = RunComixEval(c);
  ASSERT_FALSE(short_text.ok());
  EXPECT_NE(short_text.status().message().find("'fox.txt' is too short for 3 agents"), std::string::npos)
      << short_text.status().message();
}

}  // namespace
}  // namespace chorus::eval
