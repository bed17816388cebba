// eval::RunUniformGenerate on a synthetic model, called as a library: the streamed pieces are the
// answer it reports, a seed repeats its run, the store holds the policy's formats, a small context
// stops the answer as full, and bad input is an error naming it. Catches: a piece streamed twice
// or lost, the sampler's seed ignored, the wrong formats reported, a decode past the context.
#include "eval/uniform_generate.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "eval/report.h"  // kEvalSchema
#include "tiny_model.h"   // TinyModelDir

namespace chorus::eval {
namespace {

TEST(UniformGenerate, StreamsTheAnswerItReports) {
  const std::string dir = TinyModelDir("uniform_generate");  // holds tiny.gguf
  std::string streamed;
  UniformGenerateConfig c{.model = dir + "/tiny.gguf",
                          .policy = KvPolicy::Parse("q8/tq3").value(),
                          .prompt = "the quick brown fox jumps over the lazy dog",
                          .n_predict = 24,
                          .threads = 1,
                          .ctx = 256,
                          .sampling = {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .seed = 11},
                          .on_text = [&](std::string_view piece) { streamed += piece; }};
  auto r = RunUniformGenerate(c);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(streamed, r->text);
  EXPECT_GT(r->generated_tokens, 0u);
  EXPECT_LE(r->generated_tokens, 24u);
  EXPECT_EQ(r->stop, r->generated_tokens == 24 ? "length" : "end of generation");
  EXPECT_GT(r->prompt_tokens, 0u);
  EXPECT_EQ(r->kv_k, "q8");
  EXPECT_EQ(r->kv_v, "tq3");
  EXPECT_GT(r->kv_bytes, 0u);
  EXPECT_GE(r->kv_tokens, r->prompt_tokens);
  EXPECT_GT(r->prefill_tokens_per_s, 0);
  EXPECT_EQ(r->seed, 11u);
  const nlohmann::json j = ToJson(*r);
  EXPECT_EQ(j["schema"], kEvalSchema);
  EXPECT_EQ(j["kind"], "generate_uniform");
  EXPECT_EQ(j["text"], r->text);
  std::FILE* out = std::tmpfile();
  PrintSummary(*r, out);
  EXPECT_GT(std::ftell(out), 0);
  std::fclose(out);

  c.on_text = nullptr;
  auto again = RunUniformGenerate(c);  // the same seed samples the same answer
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->text, r->text);

  // A context a few tokens past the prompt: the answer stops there, the store holds no more.
  c.sampling.temperature = 0;
  c.ctx = int(r->prompt_tokens) + 3;
  c.n_predict = 50;
  auto full = RunUniformGenerate(c);
  ASSERT_TRUE(full.ok()) << full.status().message();
  EXPECT_EQ(full->stop, "context full") << full->text;
  EXPECT_EQ(full->kv_tokens, size_t(c.ctx));
  EXPECT_EQ(full->generated_tokens, 4u);  // three decoded into the context, the last sampled from it

  const auto error = [&](UniformGenerateConfig bad) {
    auto e = RunUniformGenerate(bad);
    return e.ok() ? std::string("(ran)") : e.status().message();
  };
  c.ctx = 256;
  UniformGenerateConfig bad = c;  // (an empty prompt is one BOS token on this model: not empty)
  bad.chat = true;
  EXPECT_NE(error(bad).find("--chat: the model has no tokenizer.chat_template"), std::string::npos) << error(bad);
  bad = c, bad.ctx = 1 << 22;
  EXPECT_NE(error(bad).find("exceeds the model's training context"), std::string::npos) << error(bad);
  bad = c, bad.ctx = 4;
  EXPECT_NE(error(bad).find("but the context holds 4"), std::string::npos) << error(bad);
  bad = c, bad.sampling.top_p = 0;
  EXPECT_NE(error(bad).find("--top-p must be in (0, 1]"), std::string::npos) << error(bad);
  bad = c, bad.policy = KvPolicy::Parse("comix-tq:3").value();
  EXPECT_NE(error(bad).find("comix"), std::string::npos) << error(bad);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace chorus::eval
