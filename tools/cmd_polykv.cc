// `chorus eval polykv`: the PolyKV paper's protocol on our engine — a WikiText document, 70 % of it in
// a shared compressed pool, perplexity of the remaining 30 % given the pool, N agents answering
// greedily; measured KV bytes against fp16 copies per agent, answer agreement with uncompressed KV.
#include <algorithm>
#include <map>
#include <set>

#include "chorus/engine.h"
#include "tools/common.h"
#include "util/timer.h"

namespace chorus::cli {
namespace {

struct PolykvArgs {
  std::string model, file;
  std::vector<size_t> doc_tokens{600, 1900, 5000};
  std::vector<size_t> agents{1, 3, 5, 10, 15};
  std::vector<std::string> configs{"polykv-paper/tq3", "q8/tq3", "tq4/tq3", "tq4/tq2"};
  std::string private_kv = "q8/q8";
  std::string window;  // --kv-window; empty = the engine's default
  int max_tokens = 32, threads = DefaultThreads();
  bool json = false;
};

const char* kQuestions[] = {
    "What is this text about?", "Summarize the text in one sentence.", "Who is the main subject?",
    "When did the main events happen?", "Where does the story take place?", "What is the most important fact?",
    "List two names mentioned in the text.", "What happened first?", "What happened last?",
    "Give a title for this text.", "What numbers appear in the text?", "Is the text positive or negative?",
    "What is one consequence described?", "Who else is mentioned?", "Explain the text to a child."};

// Token-level F1 between two answers (bags of token ids).
double TokenF1(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  if (a.empty() && b.empty()) return 1.0;
  std::multiset<int32_t> ma(a.begin(), a.end());
  size_t common = 0;
  for (int32_t t : b) {
    auto it = ma.find(t);
    if (it != ma.end()) {
      ++common;
      ma.erase(it);
    }
  }
  if (common == 0) return 0.0;
  const double p = double(common) / b.size(), r = double(common) / a.size();
  return 2 * p * r / (p + r);
}

struct RunResult {
  double ppl = 0;
  size_t shared_bytes = 0;
  std::map<size_t, size_t> peak_bytes;       // N -> peak total KV bytes
  std::map<size_t, size_t> baseline_bytes;   // N -> fp16 copies per agent
  std::map<size_t, std::vector<std::vector<int32_t>>> answers;  // N -> per agent
};

Result<RunResult> RunOne(const PolykvArgs& a, const std::string& k, const std::string& v, const std::string& pk,
                         const std::string& pv, size_t sink, const std::string& pool_text,
                         const std::string& rest_text, const std::pair<std::string, std::string>& frame) {
  EngineOptions eo{.model_path = a.model,
                   .threads = a.threads,
                   .policy = {KvPolicy::Uniform{.k = k, .v = v}},
                   .private_k = pk,
                   .private_v = pv,
                   .sink_blocks = sink};
  if (!a.window.empty()) eo.kv_window = a.window;
  auto engine_r = Engine::Open(eo);
  if (!engine_r.ok()) return engine_r.status();
  Engine& e = *engine_r.value();
  RunResult r;
  // Perplexity: the raw pool, then the raw rest (the paper's protocol).
  auto raw = e.Share(pool_text);
  if (!raw.ok()) return raw.status();
  auto sc = e.Score(*raw, rest_text);
  if (!sc.ok()) return sc.status();
  r.ppl = std::exp(sc->nll / sc->count);
  e.Release(*raw);
  // Agents: the pool inside the chat template's user turn, each question after it.
  auto ctx = e.Share(frame.first + pool_text);
  if (!ctx.ok()) return ctx.status();
  r.shared_bytes = e.KvReport().shared_bytes;
  const size_t pool_tokens = e.ContextTokens(*ctx);
  for (size_t n : a.agents) {
    std::vector<AgentId> ids;
    for (size_t i = 0; i < n; ++i) {
      auto id = e.Spawn(*ctx, std::string("\n\nQuestion: ") + kQuestions[i % 15] + frame.second,
                        {.max_tokens = a.max_tokens});
      if (!id.ok()) return id.status();
      ids.push_back(*id);
    }
    size_t peak = e.KvReport().total_bytes;
    while (e.running()) {
      CHORUS_RETURN_IF_ERROR(e.Step());
      peak = std::max(peak, e.KvReport().total_bytes);
    }
    size_t base = 0;
    for (AgentId id : ids) {
      const AgentState& s = *e.agent(id);
      base += e.Fp16Bytes(pool_tokens + s.prompt_tokens + s.tokens.size());
      r.answers[n].push_back(s.tokens);
    }
    r.peak_bytes[n] = peak;
    r.baseline_bytes[n] = base;
  }
  return r;
}

int RunPolykv(const PolykvArgs& a) {
  auto text = ReadFile(a.file);
  if (!text.ok()) return Fail(text.status());
  auto model_r = LoadModel(a.model);
  if (!model_r.ok()) return Fail(model_r.status());
  const Tokenizer& tok = model_r.value()->tokenizer();
  auto frame = ChatFrame(*model_r.value());
  if (!frame.ok()) return Fail(frame.status());
  const std::vector<int32_t> all = tok.Encode(text.value(), false, false);
  nlohmann::json out = {{"max_tokens", a.max_tokens}, {"private_kv", a.private_kv}, {"threads", a.threads},
                        {"window", a.window.empty() ? EngineOptions{}.kv_window : a.window}};
  const size_t slash = a.private_kv.find('/');
  if (slash == std::string::npos) return Fail(Status::Error("--private must be K/V, e.g. q8/q8"));
  const std::string pk = a.private_kv.substr(0, slash), pv = a.private_kv.substr(slash + 1);
  for (size_t d : a.doc_tokens) {
    if (d + 16 > all.size() || d > 8000) return Fail(Status::Error("--doc-tokens {} is out of range", d));
    const size_t cut = d * 7 / 10;
    // Documents start at an article boundary-free offset far enough into the file to vary by size.
    const size_t off = (d * 37) % (all.size() - d);
    const std::string pool_text = tok.Decode(std::span<const int32_t>(all).subspan(off, cut));
    const std::string rest_text = tok.Decode(std::span<const int32_t>(all).subspan(off + cut, d - cut));
    std::fprintf(stderr, "document of %zu tokens: f16 base ...\n", d);
    auto base = RunOne(a, "f16", "f16", "f16", "f16", 0, pool_text, rest_text, frame.value());
    if (!base.ok()) return Fail(base.status());
    nlohmann::json doc = {{"doc_tokens", d}, {"pool_tokens", cut}, {"base_ppl", base->ppl}};
    for (const std::string& cfg : a.configs) {
      const size_t s2 = cfg.find('/');
      if (s2 == std::string::npos) return Fail(Status::Error("--configs entry '{}' must be K/V", cfg));
      const std::string k = cfg.substr(0, s2), v = cfg.substr(s2 + 1);
      const bool paper = k == "polykv-paper";
      std::fprintf(stderr, "document of %zu tokens: %s ...\n", d, cfg.c_str());
      auto r = RunOne(a, k, v, paper ? "polykv-paper" : pk, paper ? "tq3" : pv, paper ? 0 : 1, pool_text, rest_text,
                      frame.value());
      if (!r.ok()) return Fail(r.status().Context(cfg));
      nlohmann::json c = {{"config", cfg}, {"ppl", r->ppl}, {"ppl_delta_pct", 100 * (r->ppl / base->ppl - 1)},
                          {"shared_bytes", r->shared_bytes}};
      for (size_t n : a.agents) {
        double f1 = 0;
        size_t exact = 0;
        for (size_t i = 0; i < n; ++i) {
          f1 += TokenF1(base->answers[n][i], r->answers[n][i]);
          exact += base->answers[n][i] == r->answers[n][i];
        }
        size_t answer_tokens = 0;
        for (const auto& ans : r->answers[n]) answer_tokens += ans.size();
        c["agents"].push_back({{"n", n}, {"mean_answer_tokens", double(answer_tokens) / n}, {"kv_bytes", r->peak_bytes[n]}, {"fp16_copies_bytes", r->baseline_bytes[n]},
                               {"reduction_pct", 100.0 * (1 - double(r->peak_bytes[n]) / r->baseline_bytes[n])},
                               {"answer_f1", f1 / n}, {"answers_identical", exact}});
      }
      doc["configs"].push_back(c);
    }
    out["documents"].push_back(doc);
  }
  if (a.json) {
    PrintJson(out);
    return 0;
  }
  for (const auto& doc : out["documents"]) {
    std::printf("\ndocument %zu tokens (pool %zu), base PPL %.4f\n", doc["doc_tokens"].get<size_t>(),
                doc["pool_tokens"].get<size_t>(), doc["base_ppl"].get<double>());
    std::printf("%-18s %4s %12s %14s %9s %9s %8s %6s\n", "K/V", "N", "KV MiB", "fp16 copies MiB", "reduct.",
                "dPPL %", "ans F1", "same");
    for (const auto& c : doc["configs"])
      for (const auto& ag : c["agents"])
        std::printf("%-18s %4zu %12.2f %14.2f %8.2f%% %+8.3f %8.3f %3zu/%zu\n", c["config"].get<std::string>().c_str(),
                    ag["n"].get<size_t>(), ag["kv_bytes"].get<size_t>() / 1048576.0,
                    ag["fp16_copies_bytes"].get<size_t>() / 1048576.0, ag["reduction_pct"].get<double>(),
                    c["ppl_delta_pct"].get<double>(), ag["answer_f1"].get<double>(),
                    ag["answers_identical"].get<size_t>(), ag["n"].get<size_t>());
  }
  return 0;
}

}  // namespace

std::pair<CLI::App*, RunFn> AddPolykvEval(CLI::App* eval) {
  auto a = std::make_shared<PolykvArgs>();
  CLI::App* cmd = eval->add_subcommand("polykv", "PolyKV's protocol: 70 % of a document in a shared compressed "
                                                 "pool, PPL of the rest, N agents; measured bytes vs fp16 copies.");
  cmd->add_option("-m,--model", a->model, "GGUF model file")->required();
  cmd->add_option("-f,--file", a->file, "text to cut documents from (WikiText-2 test)")->required();
  cmd->add_option("--doc-tokens", a->doc_tokens, "document sizes in tokens")->delimiter(',')->capture_default_str();
  cmd->add_option("--agents", a->agents, "agent counts")->delimiter(',')->check(CLI::Range(1, 512))
      ->capture_default_str();
  cmd->add_option("--configs", a->configs, "shared K/V formats to compare with f16")->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--private", a->private_kv, "agents' own K/V formats")->capture_default_str();
  cmd->add_option("--kv-window", a->window, "rows of the newest <32 tokens: f16 or q8 (default: the engine's)");
  cmd->add_option("-n,--max-tokens", a->max_tokens, "tokens per answer")->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("-t,--threads", a->threads, "threads")->check(CLI::Range(1, 256))->capture_default_str();
  cmd->add_flag("--json", a->json, "print one JSON object");
  return {cmd, [a] { return RunPolykv(*a); }};
}

}  // namespace chorus::cli
