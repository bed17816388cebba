// eval::RunAgents (agents_run.h): the shared-document run and the one-request-per-role run.
#include "eval/agents_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include "eval/chunk_map.h"  // PrintChunkMap, ChunkMapJson
#include "eval/harness.h"    // ReadFile, ChatFrame
#include "eval/report.h"     // Versioned
#include "util/timer.h"

namespace chorus::eval {
namespace {

// The non-blank lines of a text.
std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.find_first_not_of(" \t\r") != std::string::npos) out.push_back(line);
  return out;
}

const char* ReuseName(Reuse r) { return r == Reuse::kSegments ? "segments" : "exact"; }

Result<AgentsReport> RunRoles(const AgentsConfig& c, const std::vector<std::string>& questions) {
  auto roles_text = ReadFile(c.roles_file);
  if (!roles_text.ok()) return roles_text.status();
  const std::vector<std::string> roles = Lines(*roles_text);
  if (roles.empty()) return Status::Error("'{}' has no roles (one system prompt per line)", c.roles_file);
  if (questions.size() != 1 && questions.size() != roles.size())
    return Status::Error("'{}' has {} questions for {} roles: give one question for every agent, or one per role",
                         c.questions_file, questions.size(), roles.size());
  EngineOptions eo = c.engine;
  eo.segments.reuse = c.reuse;
  auto engine_r = Engine::Open(eo);
  if (!engine_r.ok()) return engine_r.status();
  Engine& engine = *engine_r.value();
  RoleAgentsReport r{.reuse = c.reuse, .threads = eo.threads};
  std::vector<AgentId> ids;
  for (size_t i = 0; i < roles.size(); ++i) {
    const std::string& q = questions[questions.size() == 1 ? 0 : i];
    auto text = engine.RenderChat({{"system", roles[i]}, {"user", c.document + "\n\nQuestion: " + q}});
    if (!text.ok()) return text.status();
    const auto prompt = engine.Tokenize(*text, /*add_special=*/true, /*parse_special=*/true);
    r.prompt_tokens += prompt.size();
    auto id = engine.Submit(prompt, {.temperature = 0, .max_tokens = c.max_tokens});
    if (!id.ok()) return id.status().Context(fmt::format("agent {}", i + 1));
    ids.push_back(*id);
  }
  Timer t;
  while (engine.running() || engine.waiting()) {
    if (Status s = engine.Step(); !s.ok()) return s;
    if (c.progress && c.step_progress)
      std::fprintf(c.progress, "\r%zu agents running, %zu waiting ", engine.running(), engine.waiting());
  }
  if (c.progress && c.step_progress) std::fprintf(c.progress, "\n");
  r.seconds = t.Seconds();
  const EngineStats st = engine.Stats();
  for (size_t i = 0; i < ids.size(); ++i) {
    const AgentState& s = *engine.agent(ids[i]);
    r.generated_tokens += s.tokens.size();
    r.agents.push_back({.role = roles[i],
                        .answer = s.text,
                        .stop = ToString(s.stop),
                        .error = s.error,
                        .prompt_tokens = s.prompt_tokens,
                        .cached_tokens = s.cached_tokens,
                        .reused_tokens = s.reused_tokens,
                        .repaired_tokens = s.repaired_tokens,
                        .tokens = s.tokens.size(),
                        .first_token_seconds = s.first_token_seconds});
  }
  r.prefilled_tokens = st.prefilled_tokens;
  r.cached_tokens = st.prefix_hit_tokens;
  r.reused_tokens = st.segment_reused_tokens;
  r.repaired_tokens = st.segment_repaired_tokens;
  r.kv_high_water_bytes = st.high_water_bytes;
  return AgentsReport(std::move(r));
}

Result<AgentsReport> RunShared(const AgentsConfig& c, const std::vector<std::string>& questions) {
  const KvPolicy& policy = c.engine.policy;  // as given: the report names it without the join reserve
  EngineOptions eo = c.engine;
  if (KvPolicy::Allocator* alloc = eo.policy.allocator()) alloc->join_reserve = 0;  // every reader is announced below
  auto engine_r = Engine::Open(eo);
  if (!engine_r.ok()) return engine_r.status();
  Engine& engine = *engine_r.value();
  auto frame = ChatFrame(engine);
  if (!frame.ok()) return frame.status();
  SharedAgentsReport r{.policy = policy,
                       .policy_name = c.policy_name,
                       .private_k = eo.private_k,
                       .private_v = eo.private_v,
                       .questions = questions.size(),
                       .budget_bytes = eo.kv_budget_bytes,
                       .threads = eo.threads};

  Timer t_share;
  const auto show = [&](size_t done, size_t total) {
    if (c.progress) std::fprintf(c.progress, "\rprefilling the shared document: %zu/%zu tokens", done, total);
  };
  // Every question is a reader of the document, known now: CoMix plans the document's bits for
  // all of them (ShareOptions), so the document does not take the bytes its readers need.
  size_t reader_tokens = 0;
  for (const std::string& q : questions)
    reader_tokens = std::max(reader_tokens, engine.Tokenize("\n\nQuestion: " + q + frame->second, false, true).size());
  reader_tokens += size_t(c.max_tokens);
  // cocktail: the questions of every agent decide the document's precision together (each block's
  // relevance is the highest any question gives its chunk), its readers planned as under comix.
  const ShareOptions share{.readers = questions.size(), .reader_tokens = reader_tokens, .progress = show};
  const std::string doc = frame->first + c.document;
  auto ctx = policy.kind() == KvPolicyKind::kCocktailPaper ? engine.ShareFor(doc, questions, show)
             : policy.kind() == KvPolicyKind::kRelevance   ? engine.ShareFor(doc, questions, share)
                                                           : engine.Share(doc, share);
  if (c.progress) std::fprintf(c.progress, "\n");
  if (!ctx.ok()) return ctx.status();
  r.prefill_seconds = t_share.Seconds();
  r.doc_tokens = engine.ContextTokens(*ctx);
  r.doc_fp16_bytes = engine.Fp16Bytes(r.doc_tokens);
  if (const ChunkMapReport* cm = engine.chunk_map(*ctx)) {
    r.chunk_map = *cm;
    r.chunk_map_bytes = engine.KvReport().shared_bytes;
  }

  Timer t_run;
  std::vector<AgentId> ids;     // started agents
  std::vector<size_t> started;  // their question index
  std::vector<size_t> queue;    // refused for lack of budget: retried whenever an agent finishes
  std::string last_refusal;
  const AgentOptions ao{.temperature = 0.0f, .max_tokens = c.max_tokens};
  auto try_spawn = [&](size_t qi, bool first) {
    auto id = engine.Spawn(*ctx, "\n\nQuestion: " + questions[qi] + frame->second, ao);
    if (id.ok()) {
      ids.push_back(*id);
      started.push_back(qi);
      if (!first && c.log) std::fprintf(c.log, "agent %zu started from the queue\n", qi + 1);
      return true;
    }
    last_refusal = id.status().message();
    if (first && c.log) std::fprintf(c.log, "agent %zu queued: %s\n", qi + 1, last_refusal.c_str());
    return false;
  };
  for (size_t qi = 0; qi < questions.size(); ++qi)
    if (!try_spawn(qi, true)) queue.push_back(qi);
  if (ids.empty()) return Status::Error("no agent could start: {}", last_refusal);
  r.first_allocation = engine.AllocationReport();
  r.peak_total_bytes = engine.KvReport().total_bytes;
  r.peak_private_bytes = engine.KvReport().private_bytes;
  r.shared_bytes = engine.KvReport().shared_bytes;
  Timer t_decode;
  size_t steps = 0;
  while (engine.running() > 0) {
    if (Status s = engine.Step(); !s.ok()) return s;
    ++steps;
    for (auto it = queue.begin(); it != queue.end();) {  // bytes freed by finished agents
      if (try_spawn(*it, false))
        it = queue.erase(it);
      else
        ++it;
    }
    if (engine.running() == 0)
      for (size_t qi : queue) {  // nobody left to free bytes: refused for good
        auto id = engine.Spawn(*ctx, "\n\nQuestion: " + questions[qi] + frame->second, ao);
        if (id.ok()) {
          ids.push_back(*id), started.push_back(qi);
        } else {
          r.refused.push_back(id.status().message());
          if (c.log) std::fprintf(c.log, "agent %zu refused: %s\n", qi + 1, id.status().message().c_str());
        }
      }
    if (engine.running() == 0) queue.clear();
    const EngineKvReport kv = engine.KvReport();
    r.peak_total_bytes = std::max(r.peak_total_bytes, kv.total_bytes);
    r.peak_private_bytes = std::max(r.peak_private_bytes, kv.private_bytes);
    if (c.progress && c.step_progress)
      std::fprintf(c.progress, "\rstep %zu: %zu agents running", steps, engine.running());
  }
  if (c.progress && c.step_progress) std::fprintf(c.progress, "\n");
  r.decode_seconds = t_decode.Seconds();
  r.run_seconds = t_run.Seconds();
  for (size_t i = 0; i < ids.size(); ++i) {
    const AgentState& s = *engine.agent(ids[i]);
    r.generated_tokens += s.tokens.size();
    r.baseline_bytes += engine.Fp16Bytes(r.doc_tokens + s.prompt_tokens + s.tokens.size());
    r.agents.push_back({.index = started[i],
                        .question = questions[started[i]],
                        .answer = s.text,
                        .stop = ToString(s.stop),
                        .error = s.error,
                        .tokens = s.tokens.size(),
                        .prompt_tokens = s.prompt_tokens,
                        .private_bytes = s.peak_private_bytes,
                        .tokens_per_s = s.tokens.size() / s.seconds});
    if (s.stop == StopReason::kError && c.log)
      std::fprintf(c.log, "agent %zu failed after %zu tokens: %s\n", started[i] + 1, s.tokens.size(), s.error.c_str());
  }
  r.reduction_pct = 100.0 * (1.0 - double(r.peak_total_bytes) / r.baseline_bytes);
  r.allocation = engine.AllocationReport(true);
  r.allocation_timing = engine.AllocationTiming();
  return AgentsReport(std::move(r));
}

nlohmann::json SharedJson(const SharedAgentsReport& r) {
  const auto* uniform = std::get_if<KvPolicy::Uniform>(&r.policy.rule);
  nlohmann::json agents = nlohmann::json::array();
  for (const auto& a : r.agents)
    agents.push_back({{"question", a.question},
                      {"answer", a.answer},
                      {"tokens", a.tokens},
                      {"prompt_tokens", a.prompt_tokens},
                      {"stop", a.stop},
                      {"error", a.error},
                      {"private_bytes", a.private_bytes},
                      {"tokens_per_s", a.tokens_per_s}});
  return Versioned("agents_shared", {{"agents", agents},
                                     {"refused", r.refused},
                                     {"doc_tokens", r.doc_tokens},
                                     {"shared_k", uniform ? uniform->k : ToString(r.policy.kind())},
                                     {"shared_v", uniform ? uniform->v : ToString(r.policy.kind())},
                                     {"private_k", r.private_k},
                                     {"private_v", r.private_v},
                                     {"shared_bytes", r.shared_bytes},
                                     {"peak_private_bytes", r.peak_private_bytes},
                                     {"peak_total_bytes", r.peak_total_bytes},
                                     {"fp16_per_agent_baseline_bytes", r.baseline_bytes},
                                     {"reduction_pct", r.reduction_pct},
                                     {"prefill_seconds", r.prefill_seconds},
                                     {"decode_seconds", r.decode_seconds},
                                     {"generated_tokens", r.generated_tokens},
                                     {"aggregate_tokens_per_s", r.generated_tokens / r.decode_seconds},
                                     {"run_seconds", r.run_seconds},
                                     {"threads", r.threads},
                                     {"policy", r.policy_name},
                                     {"policy_spec", FormatSpec(r.policy)},
                                     {"budget_bytes", r.budget_bytes},
                                     {"allocation", r.allocation},
                                     {"chunk_map", r.chunk_map ? ChunkMapJson(*r.chunk_map) : nlohmann::json()}});
}

nlohmann::json RolesJson(const RoleAgentsReport& r) {
  nlohmann::json agents = nlohmann::json::array();
  for (const auto& a : r.agents)
    agents.push_back({{"role", a.role},
                      {"answer", a.answer},
                      {"prompt_tokens", a.prompt_tokens},
                      {"cached_tokens", a.cached_tokens},
                      {"reused_tokens", a.reused_tokens},
                      {"repaired_tokens", a.repaired_tokens},
                      {"first_token_seconds", a.first_token_seconds},
                      {"tokens", a.tokens},
                      {"stop", a.stop},
                      {"error", a.error}});
  return Versioned("agents_roles", {{"agents", agents},
                                    {"reuse", ReuseName(r.reuse)},
                                    {"prompt_tokens", r.prompt_tokens},
                                    {"prefilled_tokens", r.prefilled_tokens},
                                    {"cached_tokens", r.cached_tokens},
                                    {"reused_tokens", r.reused_tokens},
                                    {"repaired_tokens", r.repaired_tokens},
                                    {"kv_high_water_bytes", r.kv_high_water_bytes},
                                    {"generated_tokens", r.generated_tokens},
                                    {"seconds", r.seconds},
                                    {"threads", r.threads}});
}

void PrintShared(const SharedAgentsReport& r, std::FILE* out) {
  const KvPolicy& policy = r.policy;
  const auto* uniform = std::get_if<KvPolicy::Uniform>(&policy.rule);
  if (r.chunk_map) PrintChunkMap(*r.chunk_map, r.chunk_map_bytes, r.doc_tokens, r.doc_fp16_bytes, out);
  if (!r.first_allocation.empty())
    std::fprintf(out, "allocation after the agents joined:\n%s\n", r.first_allocation.c_str());
  for (const auto& a : r.agents)
    std::fprintf(out, "\n[agent %zu] %s\n%s\n", a.index + 1, a.question.c_str(), a.answer.c_str());
  if (!r.allocation.empty()) {
    // The allocation in force at the end and how it changed (periodic and first-observation
    // reallocations are counted, joins and finishes listed).
    std::istringstream lines(r.allocation);
    size_t quiet = 0;
    std::fprintf(out, "\nallocation at the end (bits per layer; '-': nothing left to seal):\n");
    for (std::string line; std::getline(lines, line);) {
      if (line.find("realloc:") != std::string::npos && line.find("join") == std::string::npos &&
          line.find("finish") == std::string::npos) {
        ++quiet;
        continue;
      }
      std::fprintf(out, "%s\n", line.c_str());
    }
    const auto& t = r.allocation_timing;
    std::fprintf(out,
                 "  + %zu reallocations on first observations / every 64 sealed blocks; %zu in all, %.1f us mean, "
                 "%.1f us max\n",
                 quiet, t.count, t.mean_us, t.max_us);
    std::fprintf(out, "  KV held at peak %zu bytes of the %s budget\n", r.peak_total_bytes,
                 r.budget_bytes ? std::to_string(r.budget_bytes).c_str()
                                : fmt::format("{} bits on average", policy.allocator()->avg_bits).c_str());
  }
  if (policy.allocator()) {
    std::fprintf(
        out, "\n%zu agents over a %zu-token document (%s%s, bits per layer as allocated above, %d threads)\n",
        r.agents.size(), r.doc_tokens, FormatSpec(policy).c_str(),
        policy.kind() == KvPolicyKind::kRelevance
            ? fmt::format(": the document's blocks weighted by the {} questions' relevance", r.questions).c_str()
            : "",
        r.threads);
  } else {
    const std::string shared_desc = uniform ? "K " + uniform->k + " / V " + uniform->v
                                            : std::string("cocktail-paper: f16/kivi4/kivi2 per block, map above");
    std::fprintf(out, "\n%zu agents over a %zu-token document (shared %s, private K %s / V %s, %d threads)\n",
                 r.agents.size(), r.doc_tokens, shared_desc.c_str(), r.private_k.c_str(), r.private_v.c_str(),
                 r.threads);
  }
  std::fprintf(out, "  shared KV (stored once)        %10.2f MiB\n", r.shared_bytes / 1048576.0);
  for (size_t i = 0; i < r.agents.size(); ++i)
    std::fprintf(out, "  agent %-3zu private KV (peak)   %10.2f MiB  %4zu tokens  %6.1f tok/s\n", i + 1,
                 r.agents[i].private_bytes / 1048576.0, r.agents[i].tokens, r.agents[i].tokens_per_s);
  std::fprintf(out, "  total KV held (peak, measured) %10.2f MiB\n", r.peak_total_bytes / 1048576.0);
  std::fprintf(out, "  fp16 copy per agent (baseline) %10.2f MiB\n", r.baseline_bytes / 1048576.0);
  std::fprintf(out, "  reduction                      %9.1f %%\n", r.reduction_pct);
  std::fprintf(out, "  document prefill %.2f s (%.0f tok/s); decode %zu tokens in %.2f s = %.1f tok/s aggregate\n",
               r.prefill_seconds, r.doc_tokens / r.prefill_seconds, r.generated_tokens, r.decode_seconds,
               r.generated_tokens / r.decode_seconds);
}

void PrintRoles(const RoleAgentsReport& r, std::FILE* out) {
  for (size_t i = 0; i < r.agents.size(); ++i) {
    const auto& a = r.agents[i];
    std::fprintf(out, "\n[agent %zu] %s\n%s\n", i + 1, a.role.c_str(), a.answer.c_str());
    std::fprintf(out,
                 "  prompt %zu tokens: %zu cached (exact prefix), %zu reused (segments), %zu prefilled; "
                 "first token after %.0f ms\n",
                 a.prompt_tokens, a.cached_tokens, a.reused_tokens, a.prompt_tokens - a.cached_tokens - a.reused_tokens,
                 1e3 * a.first_token_seconds);
  }
  const double share = r.prompt_tokens ? double(r.cached_tokens + r.reused_tokens) / r.prompt_tokens : 0;
  std::fprintf(out,
               "\n%zu agents, %zu prompt tokens: %zu prefilled, %zu cached, %zu reused (%.1f %% not computed; "
               "reuse %s); KV high water %.2f MiB; %zu tokens generated in %.2f s (%.1f tok/s aggregate, %d threads)\n",
               r.agents.size(), r.prompt_tokens, r.prefilled_tokens, r.cached_tokens, r.reused_tokens, 100 * share,
               ReuseName(r.reuse), r.kv_high_water_bytes / 1048576.0, r.generated_tokens, r.seconds,
               r.generated_tokens / r.seconds, r.threads);
}

}  // namespace

Result<AgentsReport> RunAgents(const AgentsConfig& c) {
  const KvPolicy& policy = c.engine.policy;
  auto text = ReadFile(c.questions_file);
  if (!text.ok()) return text.status();
  const std::vector<std::string> questions = Lines(*text);
  if (questions.empty())
    return Status::Error("'{}' has no questions (one per line){}", c.questions_file,
                         policy.needs_questions()
                             ? fmt::format(": --policy {} needs them (their relevance to each chunk of the "
                                           "document decides its precision)",
                                           c.policy_name)
                             : "");
  if (c.roles_file.empty()) return RunShared(c, questions);
  if (!policy.is_uniform())
    return Status::Error(
        "--roles runs every agent as its own request with segment reuse, which needs a uniform policy (chorus, "
        "polykv, polykv-paper, K/V), not --policy {}",
        c.policy_name);
  return RunRoles(c, questions);
}

nlohmann::json ToJson(const AgentsReport& report) {
  if (const auto* r = std::get_if<SharedAgentsReport>(&report)) return SharedJson(*r);
  return RolesJson(std::get<RoleAgentsReport>(report));
}

void PrintText(const AgentsReport& report, std::FILE* out) {
  if (const auto* r = std::get_if<SharedAgentsReport>(&report)) return PrintShared(*r, out);
  PrintRoles(std::get<RoleAgentsReport>(report), out);
}

}  // namespace chorus::eval
