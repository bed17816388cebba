// eval::RunAgents on a synthetic model, called as a library: every question gets an agent over the
// one shared document and its answer, the shared KV is counted once against an fp16 copy per agent,
// agents refused for lack of budget wait and start when bytes are freed, roles run as requests of
// their own, and bad input is an error naming it. Catches: an agent dropped or answered twice, the
// document counted per agent, a queued agent never started, a report of another policy.
#include "eval/agents_run.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "eval/report.h"  // kEvalSchema
#include "tiny_model.h"   // TinyModelDir

namespace chorus::eval {
namespace {

std::string Write(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

std::string Document() {
  std::string doc;
  for (int i = 0; i < 6; ++i) doc += "the quick brown fox " + std::to_string(i) + " jumps. ";
  return doc;
}

AgentsConfig Config(const std::string& dir, const std::string& policy) {
  return {.engine = {.model_path = dir + "/tiny.gguf",
                     .threads = 1,
                     .n_ctx = 1024,
                     .policy = KvPolicy::Parse(policy).value(),
                     .private_k = "q8",
                     .private_v = "q8"},
          .policy_name = policy,
          .document = Document(),
          .questions_file = Write(dir + "/q.txt", "who jumps?\n\nover what?\n  \nhow many foxes?\n"),
          .max_tokens = 4,
          .progress = nullptr,
          .log = nullptr};
}

TEST(AgentsRun, EveryQuestionAnsweredOverOneSharedDocument) {
  const std::string dir = TinyModelDir("agents_run");  // holds tiny.gguf
  auto r = RunAgents(Config(dir, "q8/q8"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(std::holds_alternative<SharedAgentsReport>(*r));
  const SharedAgentsReport& s = std::get<SharedAgentsReport>(*r);
  ASSERT_EQ(s.agents.size(), 3u);  // blank lines are not questions
  EXPECT_EQ(s.agents[2].question, "how many foxes?");
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(s.agents[i].index, i);
    EXPECT_EQ(s.agents[i].tokens, 4u);
    EXPECT_GT(s.agents[i].prompt_tokens, s.doc_tokens);  // the document and the question
    EXPECT_GT(s.agents[i].private_bytes, 0u);
  }
  EXPECT_TRUE(s.refused.empty());
  EXPECT_GT(s.doc_tokens, 100u);
  EXPECT_EQ(s.generated_tokens, 12u);
  EXPECT_GT(s.shared_bytes, 0u);
  // The document is held once: the peak is the shared bytes and the agents' own, far below three fp16 copies.
  EXPECT_GE(s.peak_total_bytes, s.shared_bytes + s.agents[0].private_bytes);
  EXPECT_LT(s.peak_total_bytes, s.baseline_bytes / 2);
  EXPECT_GT(s.reduction_pct, 50);
  EXPECT_FALSE(s.chunk_map);
  const nlohmann::json j = ToJson(*r);
  EXPECT_EQ(j["schema"], kEvalSchema);
  EXPECT_EQ(j["kind"], "agents_shared");
  EXPECT_EQ(j["shared_k"], "q8");
  EXPECT_EQ(j["policy"], "q8/q8");
  EXPECT_EQ(j["agents"].size(), 3u);
  std::FILE* out = std::tmpfile();
  PrintText(*r, out);
  std::rewind(out);
  std::string text(4096, '\0');
  text.resize(std::fread(text.data(), 1, text.size(), out));
  std::fclose(out);
  EXPECT_NE(text.find("[agent 3] how many foxes?"), std::string::npos) << text;
  EXPECT_NE(text.find("3 agents over a " + std::to_string(s.doc_tokens) + "-token document (shared K q8 / V q8"),
            std::string::npos)
      << text;

  // A budget for the document and two agents (on this model: the share's scratch and reservations
  // fit from 210000 bytes, a third agent from 242000): the third queues and starts when one finishes.
  AgentsConfig tight = Config(dir, "q8/q8");
  tight.engine.kv_budget_bytes = 220000;
  std::FILE* log = std::tmpfile();
  tight.log = log;
  auto q = RunAgents(tight);
  ASSERT_TRUE(q.ok()) << q.status().message();
  std::rewind(log);
  std::string lines(4096, '\0');
  lines.resize(std::fread(lines.data(), 1, lines.size(), log));
  std::fclose(log);
  EXPECT_NE(lines.find("queued"), std::string::npos) << lines;
  EXPECT_NE(lines.find("started from the queue"), std::string::npos) << lines;
  const SharedAgentsReport& qs = std::get<SharedAgentsReport>(*q);
  ASSERT_EQ(qs.agents.size(), 3u) << lines;
  EXPECT_TRUE(qs.refused.empty());
  EXPECT_LE(qs.peak_total_bytes, tight.engine.kv_budget_bytes);
  EXPECT_EQ(qs.agents[2].index, 2u);                                              // started last
  for (const auto& a : qs.agents) EXPECT_EQ(a.answer, s.agents[a.index].answer);  // greedy, same prompt
  std::filesystem::remove_all(dir);
}

TEST(AgentsRun, AllocatorPolicyReportsItsAllocation) {
  const std::string dir = TinyModelDir("agents_run_comix");
  auto r = RunAgents(Config(dir, "comix-tq:3"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  const SharedAgentsReport& s = std::get<SharedAgentsReport>(*r);
  EXPECT_EQ(s.agents.size(), 3u);
  EXPECT_FALSE(s.allocation.empty());
  const nlohmann::json j = ToJson(*r);
  EXPECT_EQ(j["policy_spec"], "comix-tq:3");  // as given (the run's join reserve is its own)
  EXPECT_EQ(j["shared_k"], "comix");
  std::filesystem::remove_all(dir);
}

TEST(AgentsRun, RolesAreRequestsOfTheirOwn) {
  const std::string dir = TinyModelDir("agents_run_roles", "{% for message in messages %}<|im_start|>");  // ChatML
  AgentsConfig c = Config(dir, "q8/q8");
  c.roles_file = Write(dir + "/roles.txt", "terse\npoet\nclerk\n");
  auto r = RunAgents(c);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(std::holds_alternative<RoleAgentsReport>(*r));
  const RoleAgentsReport& s = std::get<RoleAgentsReport>(*r);
  ASSERT_EQ(s.agents.size(), 3u);
  EXPECT_EQ(s.agents[1].role, "poet");
  size_t prompt = 0;
  for (const auto& a : s.agents) prompt += a.prompt_tokens;
  EXPECT_EQ(s.prompt_tokens, prompt);
  EXPECT_EQ(s.generated_tokens, 12u);
  EXPECT_EQ(ToJson(*r)["kind"], "agents_roles");
  EXPECT_EQ(ToJson(*r)["reuse"], "segments");
  std::filesystem::remove_all(dir);
}

TEST(AgentsRun, BadInputIsAnErrorNamingIt) {
  const std::string dir = TinyModelDir("agents_run_bad");
  const auto error = [](const AgentsConfig& c) {
    auto r = RunAgents(c);
    return r.ok() ? std::string("(ran)") : r.status().message();
  };
  AgentsConfig c = Config(dir, "cocktail-tq:3");
  c.questions_file = Write(dir + "/empty.txt", " \n\n");
  EXPECT_NE(error(c).find("has no questions (one per line): --policy cocktail-tq:3 needs them"), std::string::npos)
      << error(c);
  c = Config(dir, "comix-tq:3");
  c.roles_file = Write(dir + "/roles.txt", "a\nb\n");
  EXPECT_NE(error(c).find("needs a uniform policy"), std::string::npos) << error(c);
  c = Config(dir, "q8/q8");
  c.roles_file = dir + "/roles.txt";
  EXPECT_NE(error(c).find("has 3 questions for 2 roles"), std::string::npos) << error(c);
  c.roles_file = dir + "/no-such.txt";
  EXPECT_NE(error(c).find("no-such.txt"), std::string::npos) << error(c);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace chorus::eval
