// `chorus eval needle --json` on two short needle documents (the committed WikiText-2 article): every
// case carries the gold answer's teacher-forced NLL over its tokens (" " + 4 single digits for this
// tokenizer), finite and positive; a correct greedy answer has the scored tokens as its first tokens and
// a likelihood far above chance; the per-config means are the means of the cases; and the score reads
// the config's KV (kivi4's NLL differs from f16's, slightly). A bad --kv-window is an error naming it.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
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

// --cases-file (JSONL as scripts/make_needle_cases.py writes) with chorus's Cocktail (the allocator
// with the question's relevance) beside uniform kivi4: the cases are the file's (kind passed
// through), the allocator's context keeps keys at >= 4 bits (the middle layer's stored formats) and
// costs no more than kivi4's measured bytes at average 4 bits; a name answer is exact only when the
// output begins with it. Catches the engine path ignoring the allocator config, the byte target,
// or scoring a non-digit answer by its digits.
// SmolLM2's measured sensitivity table, committed with its results (docs/results/allocator.md).
constexpr const char* kTable = "docs/results/allocator/measured/smollm2-kivi-wikivalid.json";

TEST(CliNeedle, CasesFileWithTheAllocatorWithRelevance) {
  const std::string doc =
      "Varnholm was founded in 1873. The mayor of Varnholm is Maria Kessel. Its old quarter is a maze of narrow "
      "streets lined with linden trees and small workshops. Most visitors arrive by the regional train and stay "
      "near the market square. The surrounding hills are used for barley and for grazing sheep. A stone bridge "
      "crosses the river below the church, and a path follows the bank to the next village. Tosbrin has a "
      "population of 48213. The mayor of Tosbrin is Jonas Brandt. The local museum keeps tools, maps and letters "
      "from the early settlers. In summer the fields turn the valley yellow, and the cafes stay open late. ";
  std::string body;
  for (int i = 0; i < 2; ++i) body += doc;  // ~300 tokens: 9 blocks
  const std::string path = testing::TempDir() + "needle_cases." + std::to_string(getpid()) + ".jsonl";
  {
    std::ofstream f(path);
    f << nlohmann::json{{"document", body}, {"question", "Who is the mayor of Varnholm?"}, {"answer", "Maria Kessel"},
                        {"lead", "The mayor of Varnholm is"}, {"depth", 0.0}, {"kind", "read:name"}}.dump() << "\n";
    f << nlohmann::json{{"document", body}, {"question", "What is the population of Tosbrin?"}, {"answer", "48213"},
                        {"lead", "Tosbrin has a population of"}, {"kind", "read:number"}}.dump() << "\n";
  }
  const nlohmann::json j = Json(Chorus(std::string("eval needle -m ") + kModel + " --cases-file " + path +
                                       " --configs kivi4,cocktail-kivi:4:t348:k4:g8,cocktail-kivi:4:t348:k4:g8:m -t 2 "
                                       "--json --comix-sensitivity " + kTable));
  std::remove(path.c_str());
  ASSERT_EQ(j["configs"].size(), 3u) << j.dump();
  const auto& kivi4 = j["configs"][0];
  const auto& alloc = j["configs"][1];
  EXPECT_EQ(alloc["config"], "cocktail-kivi:4:t348:k4:g8");
  ASSERT_EQ(alloc["cases"].size(), 2u);
  EXPECT_EQ(alloc["cases"][0]["kind"], "read:name");
  EXPECT_LE(alloc["bytes"].get<size_t>(), kivi4["bytes"].get<size_t>());
  for (const auto& c : {kivi4, alloc})
    for (const auto& r : c["cases"]) {
      const std::string out = r["output"], answer = r["answer"];
      if (answer == "Maria Kessel") {
        EXPECT_EQ(r["correct"].get<bool>(), out.find_first_not_of(' ') != std::string::npos &&
                                                out.substr(out.find_first_not_of(' '), 12) == answer) << out;
      }
      EXPECT_TRUE(std::isfinite(r["answer_nll"].get<double>())) << r.dump();
    }
  // The measured ranking (the committed SmolLM2 table) under the same target and floors.
  const auto& measured = j["configs"][2];
  EXPECT_EQ(measured["config"], "cocktail-kivi:4:t348:k4:g8:m");
  EXPECT_LE(measured["bytes"].get<size_t>(), kivi4["bytes"].get<size_t>());
  nlohmann::json cases = alloc["cases"];
  for (const auto& r : measured["cases"]) cases.push_back(r);
  for (const auto& r : cases) {
    const std::string k = r["k_bits_mid"], rel = r["map"];
    ASSERT_FALSE(k.empty()) << r.dump();
    EXPECT_EQ(k[0], 'F');  // the sink block
    EXPECT_EQ(k.find_first_of("23", 1), std::string::npos) << k;
    EXPECT_EQ(rel[0], 'S') << rel;
  }
  // A bad allocator config and no cases source are errors that say what to write.
  const cli_test::CliRun bad = Chorus(std::string("eval needle -m ") + kModel +
                                      " -f examples/du_fu.txt --configs cocktail-kivi:4:zz");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("unknown part 'zz'"), std::string::npos) << bad.err;
  const cli_test::CliRun no_table = Chorus(std::string("eval needle -m ") + kModel +
                                           " -f examples/du_fu.txt --configs cocktail-kivi:4:m");
  EXPECT_EQ(no_table.code, 1);
  EXPECT_NE(no_table.err.find("':m' needs --comix-sensitivity"), std::string::npos) << no_table.err;
  const cli_test::CliRun none = Chorus(std::string("eval needle -m ") + kModel + " --configs f16");
  EXPECT_EQ(none.code, 1);
  EXPECT_NE(none.err.find("--cases-file"), std::string::npos) << none.err;
}

TEST(CliNeedle, BadKvWindowNamesTheFlag) {
  const cli_test::CliRun r = Chorus(std::string("eval needle -m ") + kModel + " -f examples/du_fu.txt --kv-window q4");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--kv-window"), std::string::npos) << r.err;
}

}  // namespace
