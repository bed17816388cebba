// eval::RunPolicyCost on a synthetic model: one document and question per config, the decode reps
// interleaved. Catches: a rep lost, a document measured under the wrong policy (kivi4 must store
// fewer bytes than f16), a decode depth that leaves out the question, bad configs that crash.
#include "eval/policy_cost_bench.h"

#include <gtest/gtest.h>
#include <unistd.h>  // getpid

#include <filesystem>
#include <string>

#include "eval/report.h"  // kEvalSchema
#include "tiny_model.h"   // TinyModelDir

namespace chorus::eval {
namespace {

TEST(PolicyCost, EveryConfigsDocumentAndDecodeReps) {
  const std::string dir = TinyModelDir("policy_cost");  // holds tiny.gguf
  const std::string model = dir + "/tiny.gguf";
  std::string doc;
  for (int i = 0; i < 20; ++i) doc += "the quick brown fox " + std::to_string(i * 7919 % 1000) + " jumps. ";
  PolicyCostConfig c{.model = model,
                     .doc = doc,
                     .question = "What jumps?",
                     .frame = {"", "\nAnswer:"},
                     .configs = {"f16", "kivi4", "comix-kivi:3"},
                     .threads = 1,
                     .tg = 4,
                     .reps = 2,
                     .n_ctx = 1024};
  auto r = RunPolicyCost(c);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->configs.size(), 3u);
  const PolicyCostRow &f16 = r->configs[0], &kivi4 = r->configs[1], &comix = r->configs[2];
  EXPECT_LT(kivi4.doc_bytes, f16.doc_bytes);
  EXPECT_EQ(comix.policy, "comix");
  for (const PolicyCostRow& row : r->configs) {
    EXPECT_EQ(row.decode_tokens_per_s_reps.size(), 2u) << row.config;
    EXPECT_GT(row.decode_depth, row.doc_tokens);  // document + question
    EXPECT_GT(row.doc_sealed_blocks, 0u);
  }
  const nlohmann::json j = ToJson(*r);
  EXPECT_EQ(j["schema"], kEvalSchema);
  EXPECT_EQ(j["kind"], "policy_cost");
  EXPECT_EQ(j["configs"].size(), 3u);

  c.configs = {"cocktail-paper"};
  auto paper = RunPolicyCost(c);
  ASSERT_FALSE(paper.ok());
  EXPECT_NE(paper.status().message().find("chorus eval needle"), std::string::npos) << paper.status().message();
  c.configs = {"f16"}, c.question = " ";
  auto no_question = RunPolicyCost(c);
  ASSERT_FALSE(no_question.ok());
  EXPECT_NE(no_question.status().message().find("--question is empty"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace chorus::eval
