// eval::RunNeedle with two cases sharing a document, on SmolLM2 (a BPE vocabulary, where the answer's
// tokens continue the prompt's): one result per config and case, the f16 run agrees with itself, a
// 4-bit KV stores fewer bytes than f16, the answer's NLL is scored over its tokens, and the report
// carries the eval schema. On the synthetic model (SentencePiece: " 4817" alone gets a dummy prefix,
// so its tokens do not continue the prompt's) the answer NLL's guard must refuse to score. Catches:
// a baseline picked from the wrong run, a context counted twice, a case lost between grouping and
// scoring, an NLL taken across an unstable token boundary, bad input that crashes.
#include "eval/needle_eval.h"

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

#ifdef CHORUS_NEEDLE_REAL_MODEL
constexpr bool kRealModel = true;
#else
constexpr bool kRealModel = false;
#endif

struct NeedleFixture : ::testing::Test {
  void SetUp() override {
    dir = TinyModelDir("needle_eval");  // holds tiny.gguf
    model = dir + "/tiny.gguf";
    cases = dir + "/cases.jsonl";
    std::string doc;
    for (int i = 0; i < 12; ++i) doc += "the quick brown fox " + std::to_string(i * 7919 % 1000) + " jumps. ";
    std::ofstream f(cases);
    f << nlohmann::json{{"document", doc + "The code is 4817."},
                        {"question", "What is the code?"},
                        {"answer", "4817"},
                        {"lead", "The code is"},
                        {"depth", 0.9}}
             .dump()
      << "\n";
    f << nlohmann::json{{"document", doc + "The code is 4817."},
                        {"question", "Which code?"},
                        {"answer", "4817"},
                        {"lead", "It is"},
                        {"kind", "test"}}
             .dump()
      << "\n";
  }
  void TearDown() override { std::filesystem::remove_all(dir); }
  std::string dir, model, cases;
};

TEST_F(NeedleFixture, ScoresEveryCaseOfEveryConfigAgainstF16) {
  if (!kRealModel) GTEST_SKIP() << "needle_eval_model_test runs this on SmolLM2";
  NeedleConfig c{
      .model_path = "models/SmolLM2-135M-Instruct.Q4_1.gguf", .cases_path = cases, .threads = 1, .answer_tokens = 4};
  c.gen.max_tokens = 256;  // positions: the documents are short
  for (const char* spec : {"f16", "kivi4"}) c.runs.push_back({spec, KvPolicy::Parse(spec).value()});
  auto r = RunNeedle(c);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->configs.size(), 2u);
  const NeedleConfigResult &f16 = r->configs[0], &kivi4 = r->configs[1];
  EXPECT_EQ(f16.config, "f16");
  EXPECT_EQ(f16.agreement_with_f16, 1.0);
  EXPECT_EQ(f16.bytes_vs_f16, 1.0);
  EXPECT_LT(kivi4.bytes, f16.bytes);
  EXPECT_LT(kivi4.bits_per_element, 8.0);
  for (const NeedleConfigResult* cr : {&f16, &kivi4}) {
    ASSERT_EQ(cr->per_case.size(), 2u);
    EXPECT_EQ(cr->cases, 2u);
    for (const NeedleCaseResult& cs : cr->per_case) {
      EXPECT_EQ(cs.context_questions, 2u);  // uniform contexts: one per document, read by both questions
      EXPECT_GT(cs.tokens, 100u);
      EXPECT_GT(cs.answer_tokens, 0u);
      EXPECT_TRUE(std::isfinite(cs.answer_nll) && cs.answer_nll > 0) << cs.answer_nll;
      EXPECT_EQ(cs.correct, ExactAnswer(cs.output, "4817"));
    }
    EXPECT_EQ(cr->per_case[0].bytes, cr->per_case[1].bytes);  // the same context, measured once
  }
  EXPECT_EQ(kivi4.per_case[1].kind, "test");
  const nlohmann::json j = ToJson(*r);
  EXPECT_EQ(j["schema"], kEvalSchema);
  EXPECT_EQ(j["kind"], "needle");
  ASSERT_EQ(j["configs"].size(), 2u);
  EXPECT_EQ(j["configs"][1]["cases"].size(), 2u);
  EXPECT_EQ(j["configs"][1]["bytes"], kivi4.bytes);
}

TEST_F(NeedleFixture, RefusesAnAnswerThatDoesNotContinueThePrompt) {
  if (kRealModel) GTEST_SKIP() << "needle_eval_test runs this on the synthetic model";
  NeedleConfig c{.model_path = model, .cases_path = cases, .threads = 1, .answer_tokens = 2};
  c.gen.max_tokens = 256;
  c.runs.push_back({"f16", KvPolicy::Parse("f16").value()});
  auto r = RunNeedle(c);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("f16: prompt + answer ' 4817' does not tokenize as the prompt's tokens"),
            std::string::npos)
      << r.status().message();
}

TEST_F(NeedleFixture, BadInputNamesTheProblem) {
  auto neither = RunNeedle({.model_path = model});
  ASSERT_FALSE(neither.ok());
  EXPECT_NE(neither.status().message().find("--cases-file"), std::string::npos) << neither.status().message();
  std::ofstream(dir + "/bad.jsonl") << "{\"document\": \"x\"}\n";
  auto bad = RunNeedle({.model_path = model, .cases_path = dir + "/bad.jsonl"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bad.jsonl:1: needs a non-empty string \"question\""), std::string::npos)
      << bad.status().message();
}

TEST(ExactAnswer, DigitsAndWords) {
  EXPECT_TRUE(ExactAnswer(" 48 17.", "4817"));
  EXPECT_FALSE(ExactAnswer(" 4818", "4817"));
  EXPECT_TRUE(ExactAnswer(" Maria Kessel.", "Maria Kessel"));
  EXPECT_FALSE(ExactAnswer(" Maria Kesselring", "Maria Kessel"));
}

}  // namespace
}  // namespace chorus::eval
