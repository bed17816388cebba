// `chorus agents`: one shared document, one agent per question, all decoding together; prints each
// answer and the measured KV memory against an fp16 copy per agent.
#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "chorus/engine.h"
#include "model/chat_template.h"  // ApplyChatTemplate
#include "tools/agents_roles.h"   // RunRoles
#include "tools/common.h"
#include "tools/policy_flags.h"  // PolicyFlags
#include "util/timer.h"

namespace chorus::cli {
namespace {

struct AgentsArgs {
  std::string model, doc, questions;
  PolicyFlags pol;  // --policy, --kv-budget, --comix-sensitivity, --encoder
  std::string private_k = "q8", private_v = "q8";
  int threads = DefaultThreads(), max_tokens = 96, ctx = 0;
  size_t sink = 1;
  bool json = false, quiet = false;
  std::string window;  // --kv-window; empty = the engine's default
  std::string roles;   // --roles FILE: one system prompt per agent (agents_roles.cc)
  std::string reuse = "segments";
  double repair = SegmentOptions{}.repair;
};

int RunAgents(const AgentsArgs& a, const CLI::App& cmd) {
  const KvPolicy& policy = a.pol.policy;
  const bool cocktail = policy.needs_questions();
  const auto* uniform = std::get_if<KvPolicy::Uniform>(&policy.rule);
  auto doc = ReadDocument(a.doc);
  if (!doc.ok()) return Fail(doc.status());
  auto qtext = ReadFile(a.questions);
  if (!qtext.ok()) return Fail(qtext.status());
  std::vector<std::string> questions;
  std::istringstream qs(qtext.value());
  for (std::string line; std::getline(qs, line);)
    if (line.find_first_not_of(" \t\r") != std::string::npos) questions.push_back(line);
  if (questions.empty())
    return Fail(Status::Error("'{}' has no questions (one per line){}", a.questions,
                              cocktail ? fmt::format(": --policy {} needs them (their relevance to each chunk of the "
                                                     "document decides its precision)",
                                                     a.pol.spec)
                                       : ""));

  const size_t budget = a.pol.budget_bytes;
  EngineOptions eo{.model_path = a.model,
                   .threads = a.threads,
                   .n_ctx = static_cast<size_t>(a.ctx),
                   .policy = policy,
                   .private_k = a.private_k,
                   .private_v = a.private_v,
                   .sink_blocks = a.sink,
                   .kv_budget_bytes = budget,
                   .encoder_path = a.pol.encoder};
  if (KvPolicy::Allocator* alloc = eo.policy.allocator()) alloc->join_reserve = 0;  // every reader is announced below
  if (!a.window.empty()) {
    if (Status s = CheckEngineWindowFlag(a.window); !s.ok()) return Fail(s);
    eo.kv_window = a.window;
  }
  if (!a.roles.empty()) {
    if (!policy.is_uniform())
      return Fail(
          Status::Error("--roles runs every agent as its own request with segment reuse, which needs a "
                        "uniform policy (chorus, polykv, polykv-paper, K/V), not --policy {}",
                        a.pol.spec));
    eo.segments.repair = a.repair;
    return RunRoles({.engine = eo,
                     .document = doc.value(),
                     .roles_file = a.roles,
                     .questions_file = a.questions,
                     .max_tokens = a.max_tokens,
                     .reuse = a.reuse == "exact" ? Reuse::kExact : Reuse::kSegments,
                     .json = a.json,
                     .quiet = a.quiet});
  }
  for (const char* o : {"--reuse", "--repair"})
    if (cmd.count(o)) return Fail(Status::Error("{} needs --roles (one system prompt per agent)", o));
  auto engine_r = Engine::Open(eo);
  if (!engine_r.ok()) return Fail(engine_r.status());
  Engine& engine = *engine_r.value();
  auto model_r = LoadModel(a.model);  // for the chat frame only (mmap'ed: no copy)
  if (!model_r.ok()) return Fail(model_r.status());
  auto frame = ChatFrame(*model_r.value());
  if (!frame.ok()) return Fail(frame.status());

  Timer t_share;
  const auto show = [&](size_t done, size_t total) {
    if (!a.quiet) std::fprintf(stderr, "\rprefilling the shared document: %zu/%zu tokens", done, total);
  };
  // Every question is a reader of the document, known now: CoMix plans the document's bits for
  // all of them (ShareOptions), so the document does not take the bytes its readers need.
  size_t reader_tokens = 0;
  for (const std::string& q : questions)
    reader_tokens = std::max(reader_tokens, engine.Tokenize("\n\nQuestion: " + q + frame->second, false, true).size());
  reader_tokens += size_t(a.max_tokens);
  // cocktail: the questions of every agent decide the document's precision together (each block's
  // relevance is the highest any question gives its chunk), its readers planned as under comix.
  const ShareOptions share{.readers = questions.size(), .reader_tokens = reader_tokens, .progress = show};
  auto ctx = policy.kind() == KvPolicyKind::kCocktailPaper
                 ? engine.ShareFor(frame->first + doc.value(), questions, show)
             : policy.kind() == KvPolicyKind::kRelevance ? engine.ShareFor(frame->first + doc.value(), questions, share)
                                                         : engine.Share(frame->first + doc.value(), share);
  if (!a.quiet) std::fprintf(stderr, "\n");
  if (!ctx.ok()) return Fail(ctx.status());
  const double share_s = t_share.Seconds();
  const size_t doc_tokens = engine.ContextTokens(*ctx);
  if (const ChunkMapReport* cm = engine.chunk_map(*ctx); cm && !a.json) PrintChunkMap(*cm, engine.KvReport().shared_bytes, doc_tokens, engine);

  Timer t_run;
  std::vector<AgentId> ids;           // started agents
  std::vector<size_t> started;        // their question index
  std::vector<std::string> refused;
  std::vector<size_t> queue;          // refused for lack of budget: retried whenever an agent finishes
  std::string last_refusal;
  AgentOptions ao{.temperature = 0.0f, .max_tokens = a.max_tokens};
  auto try_spawn = [&](size_t qi, bool first) {
    auto id = engine.Spawn(*ctx, "\n\nQuestion: " + questions[qi] + frame->second, ao);
    if (id.ok()) {
      ids.push_back(*id);
      started.push_back(qi);
      if (!first) std::fprintf(stderr, "agent %zu started from the queue\n", qi + 1);
      return true;
    }
    last_refusal = id.status().message();
    if (first) std::fprintf(stderr, "agent %zu queued: %s\n", qi + 1, last_refusal.c_str());
    return false;
  };
  for (size_t qi = 0; qi < questions.size(); ++qi)
    if (!try_spawn(qi, true)) queue.push_back(qi);
  if (ids.empty()) return Fail(Status::Error("no agent could start: {}", last_refusal));
  const std::string first_allocation = engine.AllocationReport();
  if (!first_allocation.empty() && !a.json) std::printf("allocation after the agents joined:\n%s\n", first_allocation.c_str());
  size_t peak_total = engine.KvReport().total_bytes, peak_private = engine.KvReport().private_bytes;
  const size_t shared_bytes = engine.KvReport().shared_bytes;
  Timer t_decode;
  size_t steps = 0;
  while (engine.running() > 0) {
    if (Status s = engine.Step(); !s.ok()) return Fail(s);
    ++steps;
    for (auto it = queue.begin(); it != queue.end();) {  // bytes freed by finished agents
      if (try_spawn(*it, false)) it = queue.erase(it);
      else ++it;
    }
    if (engine.running() == 0)
      for (size_t qi : queue) {  // nobody left to free bytes: refused for good
        auto id = engine.Spawn(*ctx, "\n\nQuestion: " + questions[qi] + frame->second, ao);
        if (id.ok()) {
          ids.push_back(*id), started.push_back(qi);
        } else {
          refused.push_back(id.status().message());
          std::fprintf(stderr, "agent %zu refused: %s\n", qi + 1, id.status().message().c_str());
        }
      }
    if (engine.running() == 0) queue.clear();
    const EngineKvReport r = engine.KvReport();
    peak_total = std::max(peak_total, r.total_bytes);
    peak_private = std::max(peak_private, r.private_bytes);
    if (!a.quiet && !a.json) std::fprintf(stderr, "\rstep %zu: %zu agents running", steps, engine.running());
  }
  if (!a.quiet && !a.json) std::fprintf(stderr, "\n");
  const double decode_s = t_decode.Seconds(), run_s = t_run.Seconds();
  size_t generated = 0, baseline = 0;
  nlohmann::json agents_json = nlohmann::json::array();
  for (size_t i = 0; i < ids.size(); ++i) {
    const AgentState& s = *engine.agent(ids[i]);
    generated += s.tokens.size();
    baseline += engine.Fp16Bytes(doc_tokens + s.prompt_tokens + s.tokens.size());
    agents_json.push_back({{"question", questions[started[i]]},
                           {"answer", s.text},
                           {"tokens", s.tokens.size()},
                           {"prompt_tokens", s.prompt_tokens},
                           {"stop", ToString(s.stop)},
                           {"error", s.error},
                           {"private_bytes", s.peak_private_bytes},
                           {"tokens_per_s", s.tokens.size() / s.seconds}});
    if (!a.json) std::printf("\n[agent %zu] %s\n%s\n", started[i] + 1, questions[started[i]].c_str(), s.text.c_str());
    if (s.stop == StopReason::kError)
      std::fprintf(stderr, "agent %zu failed after %zu tokens: %s\n", started[i] + 1, s.tokens.size(), s.error.c_str());
  }
  const double reduction = 100.0 * (1.0 - double(peak_total) / baseline);
  const std::string allocation = engine.AllocationReport(true);
  if (!allocation.empty() && !a.json) {
    // The allocation in force at the end and how it changed (periodic and first-observation
    // reallocations are counted, joins and finishes listed).
    std::istringstream lines(allocation);
    size_t quiet = 0;
    std::printf("\nallocation at the end (bits per layer; '-': nothing left to seal):\n");
    for (std::string line; std::getline(lines, line);) {
      if (line.find("realloc:") != std::string::npos && line.find("join") == std::string::npos &&
          line.find("finish") == std::string::npos) {
        ++quiet;
        continue;
      }
      std::printf("%s\n", line.c_str());
    }
    const auto t = engine.AllocationTiming();
    std::printf("  + %zu reallocations on first observations / every 64 sealed blocks; %zu in all, %.1f us mean, "
                "%.1f us max\n",
                quiet, t.count, t.mean_us, t.max_us);
    std::printf("  KV held at peak %zu bytes of the %s budget\n", peak_total,
                budget ? std::to_string(budget).c_str()
                       : fmt::format("{} bits on average", policy.allocator()->avg_bits).c_str());
  }
  if (a.json) {
    PrintJson({{"agents", agents_json},
               {"refused", refused},
               {"doc_tokens", doc_tokens},
               {"shared_k", uniform ? uniform->k : ToString(policy.kind())},
               {"shared_v", uniform ? uniform->v : ToString(policy.kind())},
               {"private_k", eo.private_k},
               {"private_v", eo.private_v},
               {"shared_bytes", shared_bytes},
               {"peak_private_bytes", peak_private},
               {"peak_total_bytes", peak_total},
               {"fp16_per_agent_baseline_bytes", baseline},
               {"reduction_pct", reduction},
               {"prefill_seconds", share_s},
               {"decode_seconds", decode_s},
               {"generated_tokens", generated},
               {"aggregate_tokens_per_s", generated / decode_s},
               {"run_seconds", run_s},
               {"threads", a.threads},
               {"policy", a.pol.spec},
               {"policy_spec", FormatSpec(policy)},
               {"budget_bytes", budget},
               {"allocation", allocation},
               {"chunk_map", engine.chunk_map(*ctx) ? ChunkMapJson(*engine.chunk_map(*ctx)) : nlohmann::json()}});
    return 0;
  }
  if (policy.allocator()) {
    std::printf(
        "\n%zu agents over a %zu-token document (%s%s, bits per layer as allocated above, %d threads)\n", ids.size(),
        doc_tokens, FormatSpec(policy).c_str(),
        policy.kind() == KvPolicyKind::kRelevance
            ? fmt::format(": the document's blocks weighted by the {} questions' relevance", questions.size()).c_str()
            : "",
        a.threads);
  } else {
    const std::string shared_desc = uniform ? "K " + uniform->k + " / V " + uniform->v
                                            : std::string("cocktail-paper: f16/kivi4/kivi2 per block, map above");
    std::printf("\n%zu agents over a %zu-token document (shared %s, private K %s / V %s, %d threads)\n", ids.size(),
                doc_tokens, shared_desc.c_str(), eo.private_k.c_str(), eo.private_v.c_str(), a.threads);
  }
  std::printf("  shared KV (stored once)        %10.2f MiB\n", shared_bytes / 1048576.0);
  for (size_t i = 0; i < ids.size(); ++i)
    std::printf("  agent %-3zu private KV (peak)   %10.2f MiB  %4zu tokens  %6.1f tok/s\n", i + 1,
                engine.agent(ids[i])->peak_private_bytes / 1048576.0, engine.agent(ids[i])->tokens.size(),
                engine.agent(ids[i])->tokens.size() / engine.agent(ids[i])->seconds);
  std::printf("  total KV held (peak, measured) %10.2f MiB\n", peak_total / 1048576.0);
  std::printf("  fp16 copy per agent (baseline) %10.2f MiB\n", baseline / 1048576.0);
  std::printf("  reduction                      %9.1f %%\n", reduction);
  std::printf("  document prefill %.2f s (%.0f tok/s); decode %zu tokens in %.2f s = %.1f tok/s aggregate\n", share_s,
              doc_tokens / share_s, generated, decode_s, generated / decode_s);
  return 0;
}

}  // namespace

RunFn AddAgents(CLI::App& app) {
  auto a = std::make_shared<AgentsArgs>();
  CLI::App* cmd = app.add_subcommand("agents", "Many agents, one document: the document's KV is computed and "
                                               "compressed once, every agent (one per question) reads it, all "
                                               "decode together in one batch per step.");
  cmd->add_option("-m,--model", a->model, "GGUF model file")->required();
  cmd->add_option("--doc", a->doc, "the shared document (text file)")->required();
  cmd->add_option("--questions", a->questions,
                  "questions, one per line: one agent each (with --roles: one per "
                  "role, or one asked by every role)")
      ->required();
  cmd->add_option("--roles", a->roles,
                  "one system prompt per line, one agent each, each followed by the document "
                  "and its question (as agent frameworks build prompts): every agent is its own "
                  "request; the document is computed once and reused at the other agents' "
                  "offsets (segments), its head recomputed (--repair)");
  cmd->add_option("--reuse", a->reuse,
                  "with --roles: segments (reuse the document after another role) or exact "
                  "(only identical prefixes: every role prefills the document)")
      ->check(CLI::IsMember({"exact", "segments"}))
      ->capture_default_str();
  cmd->add_option("--repair", a->repair, "with --roles: fraction of a reused span recomputed at its head")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("-n,--max-tokens", a->max_tokens, "tokens per answer")->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  AddPolicyFlags(cmd, a->pol,
                 {.default_spec = "chorus",
                  .budget_any_policy = true,
                  .where = "for the shared document (uniform: its formats; comix: bits per agent x layer x K/V "
                           "under one budget; cocktail: the same, the document's blocks weighted by their relevance "
                           "to the questions, all agents deciding together; cocktail-paper: f16/kivi4/kivi2 per "
                           "chunk by its similarity to the questions)"});
  cmd->add_option("--kv-private-k", a->private_k, "K format of each agent's own blocks")->capture_default_str();
  cmd->add_option("--kv-private-v", a->private_v, "V format of each agent's own blocks")->capture_default_str();
  cmd->add_option("--kv-sink", a->sink, "leading 32-token blocks of a context kept f16")->capture_default_str();
  cmd->add_option("--kv-window", a->window,
                  "rows of every sequence's newest <32 tokens before sealing: f16, q8 (half the "
                  "bytes) or auto (q8 unless the shared formats are f16/f16; default: " +
                      EngineOptions{}.kv_window + ")");
  cmd->add_option("-c,--ctx", a->ctx, "positions per agent (document + question + answer)")
      ->check(CLI::Range(1, 1 << 24));
  cmd->add_option("-t,--threads", a->threads, "threads")->check(CLI::Range(1, 256))->capture_default_str();
  cmd->add_flag("--quiet", a->quiet, "no progress lines");
  cmd->add_flag("--json", a->json, "print one JSON object");
  return [a, cmd] {
    if (Status s = CheckPolicyFlags(cmd, a->pol, /*need_query=*/false); !s.ok()) return Fail(s);
    return RunAgents(*a, *cmd);
  };
}

}  // namespace chorus::cli
