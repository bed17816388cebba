// `chorus agents --roles FILE`: one system prompt per agent before the same document, as agent
// frameworks build prompts. Every agent is a request of its own (Engine::Submit); the document's
// KV is computed once and reused by the others at their own offset (segments, METHODS.md §5b).
#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include "tools/agents_roles.h"
#include "util/timer.h"

namespace chorus::cli {

namespace {

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.find_first_not_of(" \t\r") != std::string::npos) out.push_back(line);
  return out;
}

}  // namespace

int RunRoles(const RolesRun& r) {
  auto roles_text = ReadFile(r.roles_file);
  if (!roles_text.ok()) return Fail(roles_text.status());
  auto q_text = ReadFile(r.questions_file);
  if (!q_text.ok()) return Fail(q_text.status());
  const std::vector<std::string> roles = Lines(*roles_text), questions = Lines(*q_text);
  if (roles.empty()) return Fail(Status::Error("'{}' has no roles (one system prompt per line)", r.roles_file));
  if (questions.size() != 1 && questions.size() != roles.size())
    return Fail(Status::Error("'{}' has {} questions for {} roles: give one question for every agent, or one per role",
                              r.questions_file, questions.size(), roles.size()));
  EngineOptions eo = r.engine;
  eo.segments.reuse = r.reuse;
  auto engine_r = Engine::Open(eo);
  if (!engine_r.ok()) return Fail(engine_r.status());
  Engine& engine = *engine_r.value();
  std::vector<AgentId> ids;
  size_t prompt_tokens = 0;
  for (size_t i = 0; i < roles.size(); ++i) {
    const std::string& q = questions[questions.size() == 1 ? 0 : i];
    auto text = engine.RenderChat({{"system", roles[i]}, {"user", r.document + "\n\nQuestion: " + q}});
    if (!text.ok()) return Fail(text.status());
    const auto prompt = engine.Tokenize(*text, /*add_special=*/true, /*parse_special=*/true);
    prompt_tokens += prompt.size();
    auto id = engine.Submit(prompt, {.temperature = 0, .max_tokens = r.max_tokens});
    if (!id.ok()) return Fail(id.status().Context(fmt::format("agent {}", i + 1)));
    ids.push_back(*id);
  }
  Timer t;
  while (engine.running() || engine.waiting()) {
    if (Status s = engine.Step(); !s.ok()) return Fail(s);
    if (!r.quiet && !r.json)
      std::fprintf(stderr, "\r%zu agents running, %zu waiting ", engine.running(), engine.waiting());
  }
  if (!r.quiet && !r.json) std::fprintf(stderr, "\n");
  const double seconds = t.Seconds();
  const EngineStats st = engine.Stats();
  nlohmann::json agents = nlohmann::json::array();
  size_t generated = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const AgentState& s = *engine.agent(ids[i]);
    generated += s.tokens.size();
    agents.push_back({{"role", roles[i]},
                      {"answer", s.text},
                      {"prompt_tokens", s.prompt_tokens},
                      {"cached_tokens", s.cached_tokens},
                      {"reused_tokens", s.reused_tokens},
                      {"repaired_tokens", s.repaired_tokens},
                      {"first_token_seconds", s.first_token_seconds},
                      {"tokens", s.tokens.size()},
                      {"stop", ToString(s.stop)},
                      {"error", s.error}});
    if (!r.json) {
      std::printf("\n[agent %zu] %s\n%s\n", i + 1, roles[i].c_str(), s.text.c_str());
      std::printf(
          "  prompt %zu tokens: %zu cached (exact prefix), %zu reused (segments), %zu prefilled; "
          "first token after %.0f ms\n",
          s.prompt_tokens, s.cached_tokens, s.reused_tokens, s.prompt_tokens - s.cached_tokens - s.reused_tokens,
          1e3 * s.first_token_seconds);
    }
  }
  const double share = prompt_tokens ? double(st.prefix_hit_tokens + st.segment_reused_tokens) / prompt_tokens : 0;
  if (r.json) {
    PrintJson({{"agents", agents},
               {"reuse", r.reuse == Reuse::kSegments ? "segments" : "exact"},
               {"prompt_tokens", prompt_tokens},
               {"prefilled_tokens", st.prefilled_tokens},
               {"cached_tokens", st.prefix_hit_tokens},
               {"reused_tokens", st.segment_reused_tokens},
               {"repaired_tokens", st.segment_repaired_tokens},
               {"kv_high_water_bytes", st.high_water_bytes},
               {"generated_tokens", generated},
               {"seconds", seconds},
               {"threads", eo.threads}});
    return 0;
  }
  std::printf(
      "\n%zu agents, %zu prompt tokens: %llu prefilled, %llu cached, %llu reused (%.1f %% not computed; "
      "reuse %s); KV high water %.2f MiB; %zu tokens generated in %.2f s (%.1f tok/s aggregate, %d threads)\n",
      ids.size(), prompt_tokens, (unsigned long long)st.prefilled_tokens, (unsigned long long)st.prefix_hit_tokens,
      (unsigned long long)st.segment_reused_tokens, 100 * share, r.reuse == Reuse::kSegments ? "segments" : "exact",
      st.high_water_bytes / 1048576.0, generated, seconds, generated / seconds, eo.threads);
  return 0;
}

}  // namespace chorus::cli
