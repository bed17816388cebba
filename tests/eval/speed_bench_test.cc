// eval::RunSpeedBench on a synthetic model, called as a library: a row per thread count with pp
// and tg measured, their spread around the median, and each against its roofline; a peer that
// cannot run is reported as an error beside our numbers, not instead of them. Catches: a thread
// count dropped, the prompt length lost from the roofline, a failed peer failing the run.
#include "eval/speed_bench.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "eval/report.h"  // kEvalSchema
#include "tiny_model.h"   // TinyModelDir

namespace chorus::eval {
namespace {

std::string Printed(const SpeedBenchReport& r) {
  std::FILE* out = std::tmpfile();
  PrintTable(r, out);
  std::rewind(out);
  std::string text(8192, '\0');
  text.resize(std::fread(text.data(), 1, text.size(), out));
  std::fclose(out);
  return text;
}

TEST(SpeedBench, PpAndTgPerThreadCountAgainstTheirRoof) {
  const std::string dir = TinyModelDir("speed_bench");  // holds tiny.gguf
  auto model = Model::Load(dir + "/tiny.gguf");
  ASSERT_TRUE(model.ok()) << model.status().message();
  SpeedBenchConfig c{
      .model = dir + "/tiny.gguf", .threads = {1, 2}, .pp = 8, .tg = 3, .reps = 2, .peer = "none", .log = nullptr};
  auto r = RunSpeedBench(**model, c);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->chorus.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const auto& s = r->chorus[i];
    EXPECT_EQ(s.threads, int(i) + 1);
    EXPECT_GT(s.pp, 0);
    EXPECT_GT(s.tg, 0);
    EXPECT_LE(s.pp_min, s.pp);
    EXPECT_GE(s.pp_max, s.pp);
    EXPECT_LE(s.tg_min, s.tg);
    EXPECT_GE(s.tg_max, s.tg);
    EXPECT_GT(s.kv_bytes_per_token, 0);
    EXPECT_GT(s.machine.read_bytes_per_s, 0);
    EXPECT_GE(s.tg_cost.bytes, double(r->model_file_weight_bytes) * 0.5);  // a decode step reads the weights
  }
  EXPECT_GT(r->pp_cost.bytes, 0);
  EXPECT_FALSE(r->peer_run);
  const nlohmann::json j = ToJson(*r);
  EXPECT_EQ(j["schema"], kEvalSchema);
  EXPECT_EQ(j["kind"], "speed");
  EXPECT_EQ(j["roofline"]["2"]["pp"]["tokens"], 8);
  EXPECT_EQ(j["roofline"]["1"]["tg"]["tokens"], 1);
  EXPECT_EQ(j["chorus"]["2"]["tg"].get<double>(), r->chorus[1].tg);
  EXPECT_FALSE(j.contains("llama_cpp") || j.contains("llama_cpp_error") || j.contains("ratio")) << j;
  const std::string text = Printed(*r);
  EXPECT_NE(text.find("pp8"), std::string::npos) << text;
  EXPECT_NE(text.find("tg3"), std::string::npos) << text;
  EXPECT_NE(text.find("chorus, 2 thread(s): pp spread"), std::string::npos) << text;
  EXPECT_EQ(text.find("peer not run"), std::string::npos) << text;

  // A peer that cannot run: our numbers stay, the error is reported beside them.
  c.threads = {1}, c.reps = 1, c.peer = "python", c.python = "/no/such/python";
  auto p = RunSpeedBench(**model, c);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_TRUE(p->peer_run);
  EXPECT_GT(p->chorus.at(0).tg, 0);
  EXPECT_FALSE(p->llama_cpp_error.empty());
  EXPECT_EQ(ToJson(*p)["llama_cpp_error"], p->llama_cpp_error);
  EXPECT_NE(Printed(*p).find("peer not run: " + p->llama_cpp_error), std::string::npos);

  c.threads = {};
  auto none = RunSpeedBench(**model, c);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no thread counts"), std::string::npos) << none.status().message();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace chorus::eval
