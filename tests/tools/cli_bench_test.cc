// `chorus bench --json` prints one JSON object on stdout (the human tables go to stderr), in every
// mode: multi-agent, decode at depth, the plain pp/tg run and the machine probe. Small sizes, no
// llama.cpp peer. The roofline fields are checked against what they must be: a decode step reads
// every weight once (so its bytes are the file's weight bytes, within the embedding table's share),
// and a deeper step reads more KV.
#include <sys/stat.h>

#include "cli_run.h"

namespace {

using cli_test::Chorus;
using cli_test::Json;
using cli_test::kModel;

TEST(CliBench, JsonModesPrintOnlyJson) {
  const std::string base = std::string("bench -m ") + kModel + " -t 1 --reps 1 --no-peer --json ";
  const nlohmann::json agents = Json(Chorus(base + "--agents 1,2 --doc-file examples/du_fu.txt --doc-tokens 64 --tg 2 --kv f16/f16"));
  EXPECT_GT(agents["rows"]["2"]["chorus"]["f16/f16"]["decode_tokens_per_s"].get<double>(), 0.0) << agents;
  EXPECT_GT(agents["rows"]["2"]["chorus"]["f16/f16"]["peak_kv_bytes"].get<size_t>(), 0u) << agents;
  const nlohmann::json depth = Json(Chorus(base + "--depths 0,64 --tg 2 --kv f16/f16"));
  ASSERT_EQ(depth["rows"].size(), 2u) << depth;
  EXPECT_GT(depth["rows"][1]["chorus"]["f16/f16"]["tg"].get<double>(), 0.0) << depth;
  EXPECT_GT(depth["rows"][1]["chorus"]["f16/f16"]["roofline"]["bytes"].get<double>(),
            depth["rows"][0]["chorus"]["f16/f16"]["roofline"]["bytes"].get<double>()) << depth;
  EXPECT_GT(depth["machine"]["read_bytes_per_s"].get<double>(), 0.0) << depth;
  const nlohmann::json plain = Json(Chorus(base + "--pp 16 --tg 2"));
  const double weights = plain["model_file_weight_bytes"].get<double>();
  const nlohmann::json& tg = plain["roofline"]["1"]["tg"];
  // SmolLM2's output matrix is its embedding table (tied): every byte of the file's weights but the
  // norms is read per token, and nothing else of that size.
  EXPECT_GT(tg["bytes"].get<double>(), 0.95 * weights) << plain;
  EXPECT_LT(tg["bytes"].get<double>(), 1.05 * weights) << plain;
  EXPECT_GT(tg["percent_of_roof"].get<double>(), 0.0) << plain;
  EXPECT_EQ(plain["roofline"]["1"]["pp"]["tokens"].get<int>(), 16) << plain;
  const nlohmann::json machine = Json(Chorus("bench --machine -t 1 --json"));
  ASSERT_EQ(machine["machine"].size(), 1u) << machine;
  EXPECT_GT(machine["machine"][0]["f32_flops_per_s"].get<double>(), 0.0) << machine;
}

// `--doc-file`'s default is WikiText-2 beside the checkout, which a user's clone lacks: run from a
// directory with no ../shared, the error says where to put it and names a file the repository ships.
TEST(CliBench, MissingDefaultDocumentSaysWhereToPutIt) {
  const std::string dir = testing::TempDir() + "cli_bench_nodoc." + std::to_string(getpid());
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  char cwd[4096];
  ASSERT_NE(getcwd(cwd, sizeof cwd), nullptr);
  if (std::ifstream(dir + "/../shared/data/wikitext-2/test.txt")) GTEST_SKIP() << "WikiText-2 is beside " << dir;
  const std::string cmd = "cd " + dir + " && " + CHORUS_BIN + " bench -m " + cwd + "/" + kModel +
                          " --agents 1 --no-peer -t 1 --reps 1 2>&1";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int status = pclose(p);
  rmdir(dir.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << out;
  EXPECT_NE(out.find("the default of --doc-file"), std::string::npos) << out;
  EXPECT_NE(out.find("docs/EVAL.md"), std::string::npos) << out;
  EXPECT_NE(out.find("--doc-file examples/du_fu.txt"), std::string::npos) << out;
}

}  // namespace
