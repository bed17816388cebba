// `chorus eval needle --json` on two short needle documents (the committed WikiText-2 article): every
// case carries the gold answer's teacher-forced NLL over its tokens (" " + 4 single digits for this
// tokenizer), finite and positive; a correct greedy answer has the scored tokens as its first tokens and
// a likelihood far above chance; the per-config means are the means of the cases; and the score reads
// the config's KV (kivi4's NLL differs from f16's, slightly). A bad --kv-window is an error naming it.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <string>

#include "cli_run.h"

namespace {

using cli_test::Chorus;
using cli_test::Json;
using cli_test::kModel;

TEST(CliNeedle, AnswerLikelihoodPerCaseAndConfig) {
  const nlohmann::json j = Json(Chorus(std::string("eval needle -m ") + kModel +
                                       " -f examples/du_fu.txt --facts 3 --min-tokens 300 --max-tokens 400 "
                                       "--cases 2 --seed 1 --configs f16,kivi4 -t 2 --json"));
  ASSERT_EQ(j["configs"].size(), 2u) << j.dump();
  for (const auto& c : j["configs"]) {
    double nll_sum = 0, p_sum = 0;
    for (const auto& r : c["cases"]) {
      const double nll = r["answer_nll"].get<double>();
      EXPECT_TRUE(std::isfinite(nll)) << r.dump();
      EXPECT_GT(nll, 0) << r.dump();
      EXPECT_EQ(r["answer_tokens"].get<size_t>(), 5u) << r.dump();  // " " then one token per digit
      if (r["correct"].get<bool>()) {
        EXPECT_TRUE(r["greedy_starts_with_answer_tokens"].get<bool>()) << r.dump();
        EXPECT_GT(std::exp(-nll), 0.1) << r.dump();  // chance for 4 digits: 1e-4
      }
      nll_sum += nll;
      p_sum += std::exp(-nll);
    }
    const double n = c["cases"].size();
    ASSERT_EQ(n, 2);
    EXPECT_NEAR(c["mean_answer_nll"].get<double>(), nll_sum / n, 1e-9);
    EXPECT_NEAR(c["mean_p_answer"].get<double>(), p_sum / n, 1e-9);
  }
  for (size_t i = 0; i < 2; ++i) {
    const double f16 = j["configs"][0]["cases"][i]["answer_nll"], kivi4 = j["configs"][1]["cases"][i]["answer_nll"];
    EXPECT_NE(f16, kivi4) << "case " << i;
    EXPECT_NEAR(f16, kivi4, 0.5) << "case " << i;
  }
}

TEST(CliNeedle, BadKvWindowNamesTheFlag) {
  const cli_test::CliRun r = Chorus(std::string("eval needle -m ") + kModel + " -f examples/du_fu.txt --kv-window q4");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--kv-window"), std::string::npos) << r.err;
}

}  // namespace
