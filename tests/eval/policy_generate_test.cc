// eval::RunPolicyGenerate on a synthetic model: one agent under the allocator (comix) streams the
// answer it reports, measures its KV bytes, and its report carries the schema; a question or
// document missing for the policy is an error naming the flag. Catches: pieces streamed twice or
// lost, a report of another policy or seed, cocktail run without its document.
#include "eval/policy_generate.h"

#include <gtest/gtest.h>
#include <unistd.h>  // getpid

#include <filesystem>
#include <string>

#include "eval/report.h"  // kEvalSchema
#include "tiny_model.h"   // TinyModelDir

namespace chorus::eval {
namespace {

TEST(PolicyGenerate, StreamsTheAnswerItReports) {
  const std::string dir = TinyModelDir("policy_generate");  // holds tiny.gguf
  std::string streamed;
  PolicyGenerateConfig c{.model = dir + "/tiny.gguf",
                         .policy = KvPolicy::Parse("comix-tq:3").value(),
                         .question = "the quick brown fox jumps over the lazy dog",
                         .n_predict = 24,
                         .threads = 1,
                         .ctx = 256,
                         .sampling = {.temperature = 0, .seed = 7},
                         .on_text = [&](std::string_view piece) { streamed += piece; }};
  auto r = RunPolicyGenerate(c);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_GT(r->generated_tokens, 0u);
  EXPECT_EQ(streamed, r->text);
  EXPECT_EQ(r->doc_tokens, 0u);
  EXPECT_GT(r->prompt_tokens, 0u);
  EXPECT_EQ(r->policy_kind, "comix");
  EXPECT_NE(r->policy_desc.find("3 bits on average"), std::string::npos) << r->policy_desc;
  EXPECT_GT(r->kv_peak_bytes, 0u);
  EXPECT_GT(r->fp16_bytes, 0u);
  EXPECT_GT(r->kv_bits_per_element, 0);
  // (not below 16: a few dozen tokens are a fraction of one block, which is held whole)
  EXPECT_EQ(r->seed, 7u);
  const nlohmann::json j = ToJson(*r);
  EXPECT_EQ(j["schema"], kEvalSchema);
  EXPECT_EQ(j["kind"], "generate");
  EXPECT_EQ(j["text"], r->text);
  EXPECT_TRUE(j["chunk_map"].is_null());
  std::FILE* out = std::tmpfile();
  PrintSummary(*r, out);
  EXPECT_GT(std::ftell(out), 0);
  std::fclose(out);

  c.question = " \n";
  auto empty = RunPolicyGenerate(c);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("the prompt is empty"), std::string::npos) << empty.status().message();
  c.question = "what?";
  c.policy = KvPolicy::Parse("cocktail-tq:3").value();
  auto no_doc = RunPolicyGenerate(c);
  ASSERT_FALSE(no_doc.ok());
  EXPECT_NE(no_doc.status().message().find("--policy cocktail needs --doc FILE"), std::string::npos)
      << no_doc.status().message();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace chorus::eval
