// eval::RunBench, `chorus bench` in one call, on the tiny model: the config's fields pick the mode
// (the report's kind), text mode prints a table and returns null, the document modes read and cut
// doc_file, and a missing default text names where WikiText-2 goes. Catches a mode dispatched to
// the wrong benchmark, JSON printed into the table stream, a lost error.
#include "eval/bench.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "tiny_model.h"  // TinyModelDir

namespace chorus::eval {
namespace {

BenchConfig Tiny(const std::string& dir) {
  return {.model = dir + "/tiny.gguf", .threads = {1}, .pp = 8, .tg = 2, .reps = 1, .no_peer = true, .json = true};
}

TEST(Bench, ConfigPicksTheMode) {
  const std::string dir = TinyModelDir("bench_modes");
  auto speed = RunBench(Tiny(dir), stdout);
  ASSERT_TRUE(speed.ok()) << speed.status().message();
  EXPECT_EQ((*speed)["kind"], "speed");
  BenchConfig depth = Tiny(dir);
  depth.depths = {32};
  auto d = RunBench(depth, stdout);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ((*d)["kind"], "depth");
  BenchConfig agents = Tiny(dir);
  agents.agents = {2};
  agents.doc_tokens = 64;
  agents.doc_file = dir + "/doc.txt";
  std::ofstream(agents.doc_file) << std::string(2000, 'a') + " the quick brown fox jumps over the lazy dog";
  auto ag = RunBench(agents, stdout);
  ASSERT_TRUE(ag.ok()) << ag.status().message();
  EXPECT_EQ((*ag)["kind"], "agents");
}

TEST(Bench, TextModePrintsTheTableAndReturnsNull) {
  const std::string dir = TinyModelDir("bench_text");
  BenchConfig c = Tiny(dir);
  c.json = false;
  std::FILE* out = std::tmpfile();
  auto r = RunBench(c, out);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->is_null());
  std::rewind(out);
  std::string text(8192, '\0');
  text.resize(std::fread(text.data(), 1, text.size(), out));
  std::fclose(out);
  EXPECT_NE(text.find("tg"), std::string::npos) << text;
  EXPECT_EQ(text.find("\"schema\""), std::string::npos) << text;
}

TEST(Bench, DocumentErrorsNameTheFile) {
  const std::string dir = TinyModelDir("bench_doc");
  BenchConfig c = Tiny(dir);
  c.agents = {2};
  c.doc_file = dir + "/short.txt";
  std::ofstream(c.doc_file) << "a few words";
  auto r = RunBench(c, stdout);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "'" + c.doc_file + "' has fewer than 4096 tokens");
  c.doc_file = dir + "/missing.txt";
  r = RunBench(c, stdout);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "cannot read file '" + c.doc_file + "'");
}

TEST(Bench, MissingDefaultTextSaysWhereWikiTextGoes) {
  // From a directory where the default's relative path leads nowhere.
  const std::filesystem::path home = std::filesystem::current_path();
  std::filesystem::current_path(TinyModelDir("bench_default"));
  auto r = ReadDefaultText(kWikiTextTest, "--doc-file");
  std::filesystem::current_path(home);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("or pass --doc-file FILE"), std::string::npos) << r.status().message();
  EXPECT_EQ(ReadDefaultText("/nonexistent.txt", "-f").status().message(), "cannot read file '/nonexistent.txt'");
}

}  // namespace
}  // namespace chorus::eval
