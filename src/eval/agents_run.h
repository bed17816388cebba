// `chorus agents`: many agents over one document. Shared (the default): the document's KV is
// computed and compressed once (Engine::Share / ShareFor by the policy), every agent (one per
// question) reads it, all decode together in one batch per step; agents refused for lack of budget
// wait in a queue until a finished agent frees bytes. Roles (`roles_file` set): one system prompt
// per agent before the same document, each agent a request of its own (Engine::Submit), the
// document reused across roles by segments (METHODS.md §5b). The report holds what the text and the
// JSON print; progress and queue lines go to `progress` / `log` while the run goes.
#pragma once
#include <cstddef>
#include <cstdio>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "chorus/engine.h"     // EngineOptions, ChunkMapReport, Reuse
#include "chorus/kv_policy.h"  // KvPolicy
#include "util/status.h"

namespace chorus::eval {

struct AgentsConfig {
  EngineOptions engine;            // model, threads, policy, private formats, sink, budget, encoder, window
  std::string policy_name;         // the policy as the user wrote it (reported as "policy", named in errors)
  std::string document;            // the shared document's text (its file is read by the caller)
  std::string questions_file;      // one question per line (blank lines skipped): one agent each; with
                                   // roles, one per role or one asked by every role
  std::string roles_file;          // non-empty: one system prompt per line, each agent its own request;
                                   // needs a uniform policy
  int max_tokens = 96;             // per answer (greedy)
  Reuse reuse = Reuse::kSegments;  // with roles: EngineOptions::segments.reuse
  std::FILE* progress = stderr;    // "\r" progress lines (nullptr: none)
  bool step_progress = true;       // also a progress line per decode step
  std::FILE* log = stderr;         // agents queued, started from the queue, refused or failed
};

// One document shared by every agent.
struct SharedAgentsReport {
  struct Agent {
    size_t index = 0;  // its question's line (0-based among the questions)
    std::string question, answer, stop, error;
    size_t tokens = 0, prompt_tokens = 0, private_bytes = 0;  // private_bytes: its peak
    double tokens_per_s = 0;
  };
  std::vector<Agent> agents;         // in the order they started
  std::vector<std::string> refused;  // why each agent that never started was refused
  KvPolicy policy;
  std::string policy_name, private_k, private_v;
  size_t questions = 0, doc_tokens = 0, budget_bytes = 0;
  size_t shared_bytes = 0, peak_private_bytes = 0, peak_total_bytes = 0, baseline_bytes = 0;
  double reduction_pct = 0, prefill_seconds = 0, decode_seconds = 0, run_seconds = 0;
  size_t generated_tokens = 0;
  int threads = 0;
  std::string first_allocation, allocation;  // Engine::AllocationReport after the joins / at the end (history)
  Engine::AllocationStats allocation_timing;
  std::optional<ChunkMapReport> chunk_map;         // cocktail policies
  size_t chunk_map_bytes = 0, doc_fp16_bytes = 0;  // the document's KV when shared, and in fp16
};

// One request per role.
struct RoleAgentsReport {
  struct Agent {
    std::string role, answer, stop, error;
    size_t prompt_tokens = 0, cached_tokens = 0, reused_tokens = 0, repaired_tokens = 0, tokens = 0;
    double first_token_seconds = 0;
  };
  std::vector<Agent> agents;
  Reuse reuse = Reuse::kSegments;
  size_t prompt_tokens = 0, prefilled_tokens = 0, cached_tokens = 0, reused_tokens = 0, repaired_tokens = 0;
  size_t kv_high_water_bytes = 0, generated_tokens = 0;
  double seconds = 0;
  int threads = 0;
};

using AgentsReport = std::variant<SharedAgentsReport, RoleAgentsReport>;

Result<AgentsReport> RunAgents(const AgentsConfig& config);
// kind "agents_shared" / "agents_roles"; the fields `chorus agents --json` prints.
nlohmann::json ToJson(const AgentsReport& report);
// The text `chorus agents` prints: each answer, the allocation and chunk map where there is one,
// and the KV held against an fp16 copy per agent (shared) or the tokens reused (roles).
void PrintText(const AgentsReport& report, std::FILE* out);

}  // namespace chorus::eval
