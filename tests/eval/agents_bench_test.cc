// eval::RunAgentsBench on a synthetic model without the peer: a row per agent count with every K/V
// config measured and its roofline, more agents holding more KV at their peak, the narrower format
// holding a smaller shared document, and the tables written. Catches: a config or agent count
// dropped, KV bytes read from the wrong report, a policy that is not uniform formats accepted.
#include "eval/agents_bench.h"

#include <gtest/gtest.h>
#include <unistd.h>  // getpid

#include <cstdio>
#include <filesystem>
#include <string>

#include "eval/report.h"  // kEvalSchema
#include "tiny_model.h"   // TinyModelDir

namespace chorus::eval {
namespace {

TEST(AgentsBench, EveryConfigAtEveryAgentCount) {
  const std::string dir = TinyModelDir("agents_bench");  // holds tiny.gguf
  auto model = Model::Load(dir + "/tiny.gguf");
  ASSERT_TRUE(model.ok()) << model.status().message();
  std::string doc;
  for (int i = 0; i < 4; ++i) doc += "the quick brown fox " + std::to_string(i) + " jumps. ";
  std::FILE* table = std::tmpfile();
  AgentsBenchConfig c{.model = dir + "/tiny.gguf",
                      .doc = doc,
                      .agents = {1, 3},
                      .doc_tokens = 256,
                      .kv = {"f16/f16", "q8/tq3"},
                      .peer_kv = {},
                      .threads = 1,
                      .tg = 4,
                      .reps = 1,
                      .table = table,
                      .log = nullptr};
  auto r = RunAgentsBench(**model, c);
  ASSERT_TRUE(r.ok()) << r.status().message();
  for (const char* kv : {"f16/f16", "q8/tq3"}) {
    ASSERT_TRUE(r->chorus.contains(kv)) << r->chorus.dump();
    EXPECT_GT(r->chorus[kv]["shared_bytes"].get<size_t>(), 0u);
    EXPECT_EQ(r->chorus[kv]["rounds"].get<size_t>(), 1u);
    for (const char* n : {"1", "3"}) {
      ASSERT_TRUE(r->rows.contains(n) && r->rows[n]["chorus"].contains(kv)) << r->rows.dump();
      const nlohmann::json& cell = r->rows[n]["chorus"][kv];
      EXPECT_GT(cell["decode_tokens_per_s"].get<double>(), 0) << cell;
      EXPECT_TRUE(cell.contains("roofline")) << cell;
    }
    EXPECT_GT(r->rows["3"]["chorus"][kv]["peak_kv_bytes"].get<size_t>(),
              r->rows["1"]["chorus"][kv]["peak_kv_bytes"].get<size_t>());
  }
  EXPECT_LT(r->chorus["q8/tq3"]["shared_bytes"].get<size_t>(), r->chorus["f16/f16"]["shared_bytes"].get<size_t>());
  EXPECT_GT(std::ftell(table), 0);  // the tables were written
  const nlohmann::json j = ToJson(*r);
  EXPECT_EQ(j["schema"], kEvalSchema);
  EXPECT_EQ(j["kind"], "agents");
  EXPECT_FALSE(j.contains("llama_cpp_raw"));  // no peer was asked for

  c.kv = {"comix-kivi:3"};
  auto bad = RunAgentsBench(**model, c);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("must be uniform formats K/V"), std::string::npos) << bad.status().message();
  c.kv = {"f16/f16"}, c.agents = {0};
  auto none = RunAgentsBench(**model, c);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("at least 1"), std::string::npos) << none.status().message();
  std::fclose(table);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace chorus::eval
