// `chorus agents --roles FILE` (issue 40, must-show 5): one system prompt per agent before the same
// document; with segments the document is prefilled once and reused by the other roles, with
// `--reuse exact` every role prefills it. Bad input names the problem.
#include <unistd.h>

#include <fstream>
#include <string>

#include "cli_run.h"

namespace {

using cli_test::Chorus;
using cli_test::kModel;

std::string Write(const std::string& name, const std::string& text) {
  const std::string path = testing::TempDir() + "cli_roles." + std::to_string(getpid()) + "." + name;
  std::ofstream(path) << text;
  return path;
}

std::string Article(size_t words) {
  std::ifstream f("examples/du_fu.txt");
  std::string w, out;
  for (size_t i = 0; i < words && f >> w; ++i) out += (i ? " " : "") + w;
  return out;
}

TEST(CliRoles, SegmentsPrefillTheDocumentOnce) {
  const std::string doc = Write("doc.txt", Article(700));
  const std::string roles = Write("roles.txt",
                                  "You are an analyst. You find the facts that matter.\n"
                                  "You are a critic who questions every claim.\n"
                                  "You summarize documents for busy readers.\n");
  const std::string q = Write("q.txt", "When was Du Fu born?\n");
  const std::string base =
      std::string("agents -m ") + kModel + " -t 2 -n 4 --json --doc " + doc + " --roles " + roles + " --questions " + q;
  const auto seg = Chorus(base);
  ASSERT_EQ(seg.code, 0) << seg.err;
  const auto exact = Chorus(base + " --reuse exact");
  ASSERT_EQ(exact.code, 0) << exact.err;
  const nlohmann::json s = nlohmann::json::parse(seg.out), e = nlohmann::json::parse(exact.out);
  ASSERT_EQ(s["agents"].size(), 3u);
  EXPECT_EQ(s["reuse"], "segments");
  EXPECT_EQ(s["agents"][0]["reused_tokens"], 0);
  const size_t prompt = s["agents"][1]["prompt_tokens"].get<size_t>();
  for (size_t i = 1; i < 3; ++i) EXPECT_GT(s["agents"][i]["reused_tokens"].get<size_t>(), prompt * 7 / 10) << s.dump();
  EXPECT_EQ(e["reused_tokens"], 0);
  EXPECT_EQ(e["prefilled_tokens"], e["prompt_tokens"]);
  EXPECT_LT(s["prefilled_tokens"].get<size_t>(), e["prefilled_tokens"].get<size_t>() * 6 / 10);
  EXPECT_LT(s["kv_high_water_bytes"].get<size_t>(), e["kv_high_water_bytes"].get<size_t>());
}

TEST(CliRoles, BadInputNamesTheProblem) {
  const std::string doc = Write("doc2.txt", Article(100));
  const std::string roles = Write("roles2.txt", "A.\nB.\nC.\n");
  const std::string q = Write("q2.txt", "One?\nTwo?\n");
  const auto r =
      Chorus(std::string("agents -m ") + kModel + " --doc " + doc + " --roles " + roles + " --questions " + q);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("2 questions for 3 roles"), std::string::npos) << r.err;
  const auto p = Chorus(std::string("agents -m ") + kModel + " --doc " + doc + " --roles " + roles + " --questions " +
                        q + " --policy comix");
  EXPECT_NE(p.code, 0);
  EXPECT_NE(p.err.find("uniform policy"), std::string::npos) << p.err;
  const auto n = Chorus(std::string("agents -m ") + kModel + " --doc " + doc + " --questions " + q + " --reuse exact");
  EXPECT_NE(n.code, 0);
  EXPECT_NE(n.err.find("--reuse needs --roles"), std::string::npos) << n.err;
}

}  // namespace
