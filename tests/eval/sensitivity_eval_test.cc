// chorus calibrate on a synthetic model: the tables land next to the model under its fingerprint,
// are written whole (no temporary left), hold a positive KLD for every probe, and an allocator
// policy with the :m rank finds them without being told where; without them the engine says how to
// calibrate. Catches: a table written to another path than the engine reads, a probe that compresses
// nothing, a half-written file.
#include "eval/sensitivity_eval.h"

#include <gtest/gtest.h>
#include <unistd.h>  // getpid

#include <filesystem>
#include <string>

#include "chorus/engine.h"
#include "tiny_model.h"  // TinyModelDir

namespace chorus::eval {
namespace {

std::string Text() {
  std::string t;
  for (int i = 0; i < 200; ++i) t += "the quick brown fox " + std::to_string(i * 7919 % 1000) + " jumps over it. ";
  return t;
}

TEST(Calibrate, TablesLandNextToTheModelAndTheAllocatorFindsThem) {
  const std::string dir = TinyModelDir("calibrate");  // holds tiny.gguf
  const std::string model = dir + "/tiny.gguf";
  const KvPolicy policy = KvPolicy::Parse("comix-kivi:3:t24:m").value();
  auto missing = Engine::Open({.model_path = model, .threads = 1, .n_ctx = 256, .policy = policy});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("run `chorus calibrate -m " + model), std::string::npos)
      << missing.status().message();

  size_t calls = 0;
  auto paths = Calibrate({.model_path = model,
                          .text = Text(),
                          .text_name = "synthetic text",
                          .bits = {2, 4},
                          .ctx = 128,
                          .chunks = 2,
                          .threads = 1,
                          .progress =
                              [&](size_t done, size_t total, const std::string&) {
                                EXPECT_EQ(total, 2u * 2u * 2u);  // layers × sides × widths, per family
                                EXPECT_EQ(done, calls++ % total + 1);
                              }},
                         {KvPolicy::Family::kKivi, KvPolicy::Family::kTq});
  ASSERT_TRUE(paths.ok()) << paths.status().message();
  ASSERT_EQ(paths->size(), 2u);
  EXPECT_EQ(calls, 16u);
  for (const std::string& p : *paths) {
    EXPECT_EQ(p.rfind(model + ".chorus-", 0), 0u) << p;
    auto table = LoadComixSensitivity(p);
    ASSERT_TRUE(table.ok()) << table.status().message();
    ASSERT_EQ((*table)->n_layer, 2u);
    for (double kld : (*table)->kld) EXPECT_GT(kld, 0);
  }
  EXPECT_NE((*paths)[0].find("-kivi-"), std::string::npos);
  for (const auto& e : std::filesystem::directory_iterator(dir))
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();  // written whole
  auto found = Engine::Open({.model_path = model, .threads = 1, .n_ctx = 256, .policy = policy});
  EXPECT_TRUE(found.ok()) << found.status().message();
  std::filesystem::remove_all(dir);
}

TEST(Calibrate, BadInputNamesTheProblem) {
  auto none = MeasureSensitivity({.model_path = "/no/such/model.gguf", .text = Text()});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("/no/such/model.gguf"), std::string::npos) << none.status().message();
}

}  // namespace
}  // namespace chorus::eval
