// eval::RunDepthBench on a synthetic model without the peer: one row per depth with every K/V pair
// measured and its roofline, a narrower KV holding fewer bytes. Catches: a format pair dropped, the
// KV bytes of the wrong store, bad pairs and depths past the context that crash.
#include "eval/depth_bench.h"

#include <gtest/gtest.h>
#include <unistd.h>  // getpid

#include <cstdio>
#include <filesystem>
#include <string>

#include "eval/report.h"  // kEvalSchema
#include "tiny_model.h"   // TinyModelDir

namespace chorus::eval {
namespace {

TEST(DepthBench, EveryPairAtEveryDepth) {
  const std::string dir = TinyModelDir("depth_bench");  // holds tiny.gguf
  auto model = Model::Load(dir + "/tiny.gguf");
  ASSERT_TRUE(model.ok()) << model.status().message();
  std::FILE* table = std::tmpfile();
  DepthBenchConfig c{.model = dir + "/tiny.gguf",
                     .depths = {64, 128},
                     .kv = {"f16/f16", "q8/tq3"},
                     .peer_kv = {},
                     .threads = 1,
                     .tg = 4,
                     .reps = 1,
                     .table = table};
  auto r = RunDepthBench(**model, c);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->rows.size(), 2u);
  for (const nlohmann::json& row : r->rows) {
    ASSERT_TRUE(row["chorus"].contains("f16/f16") && row["chorus"].contains("q8/tq3")) << row.dump();
    EXPECT_LT(row["chorus"]["q8/tq3"]["kv_bytes"].get<size_t>(), row["chorus"]["f16/f16"]["kv_bytes"].get<size_t>());
    EXPECT_GT(row["chorus"]["f16/f16"]["tg"].get<double>(), 0);
    EXPECT_TRUE(row["chorus"]["f16/f16"].contains("roofline"));
  }
  EXPECT_GT(std::ftell(table), 0);  // the table was written
  const nlohmann::json j = ToJson(*r);
  EXPECT_EQ(j["schema"], kEvalSchema);
  EXPECT_EQ(j["kind"], "depth");

  c.kv = {"q8"};
  auto bad = RunDepthBench(**model, c);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--kv entry 'q8' must be K/V"), std::string::npos);
  c.kv = {"f16/f16"}, c.depths = {5000};
  auto deep = RunDepthBench(**model, c);
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(deep.status().message().find("exceed the model's context of 4096"), std::string::npos);
  std::fclose(table);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace chorus::eval
