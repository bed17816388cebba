// The PolyKV protocol (see polykv_eval.h).
#include "eval/polykv_eval.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <span>

#include "chorus/engine.h"
#include "eval/harness.h"  // LoadModel, ReadFile, ChatFrame
#include "eval/report.h"   // Versioned

namespace chorus::eval {
namespace {

const char* kQuestions[] = {"What is this text about?",
                            "Summarize the text in one sentence.",
                            "Who is the main subject?",
                            "When did the main events happen?",
                            "Where does the story take place?",
                            "What is the most important fact?",
                            "List two names mentioned in the text.",
                            "What happened first?",
                            "What happened last?",
                            "Give a title for this text.",
                            "What numbers appear in the text?",
                            "Is the text positive or negative?",
                            "What is one consequence described?",
                            "Who else is mentioned?",
                            "Explain the text to a child."};

struct RunResult {
  double ppl = 0;
  size_t shared_bytes = 0;
  std::map<size_t, size_t> peak_bytes;                          // N -> peak total KV bytes
  std::map<size_t, size_t> baseline_bytes;                      // N -> fp16 copies per agent
  std::map<size_t, std::vector<std::vector<int32_t>>> answers;  // N -> per agent
};

Result<RunResult> RunOne(const PolykvConfig& a, const std::string& k, const std::string& v, const std::string& pk,
                         const std::string& pv, size_t sink, const std::string& pool_text, const std::string& rest_text,
                         const std::pair<std::string, std::string>& frame) {
  EngineOptions eo{.model_path = a.model_path,
                   .threads = a.threads,
                   .policy = {KvPolicy::Uniform{.k = k, .v = v}},
                   .private_k = pk,
                   .private_v = pv,
                   .sink_blocks = sink};
  if (!a.window.empty()) eo.kv_window = a.window;
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Open(eo));
  Engine& e = *engine;
  RunResult r;
  // Perplexity: the raw pool, then the raw rest (the paper's protocol).
  CHORUS_ASSIGN_OR_RETURN(ContextId raw, e.Share(pool_text));
  CHORUS_ASSIGN_OR_RETURN(Engine::ScoreResult sc, e.Score(raw, rest_text));
  r.ppl = std::exp(sc.nll / sc.count);
  e.Release(raw);
  // Agents: the pool inside the chat template's user turn, each question after it.
  CHORUS_ASSIGN_OR_RETURN(ContextId ctx, e.Share(frame.first + pool_text));
  r.shared_bytes = e.KvReport().shared_bytes;
  const size_t pool_tokens = e.ContextTokens(ctx);
  for (size_t n : a.agents) {
    std::vector<AgentId> ids;
    for (size_t i = 0; i < n; ++i) {
      CHORUS_ASSIGN_OR_RETURN(AgentId id,
                              e.Spawn(ctx, std::string("\n\nQuestion: ") + kQuestions[i % 15] + frame.second,
                                      {.max_tokens = a.max_tokens}));
      ids.push_back(id);
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

}  // namespace

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

Result<PolykvReport> RunPolykv(const PolykvConfig& a) {
  CHORUS_ASSIGN_OR_RETURN(std::string text, ReadFile(a.text_path));
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, LoadModel(a.model_path));
  const Tokenizer& tok = model->tokenizer();
  CHORUS_ASSIGN_OR_RETURN(auto frame, ChatFrame(*model));
  const std::vector<int32_t> all = tok.Encode(text, false, false);
  PolykvReport report{.max_tokens = a.max_tokens,
                      .threads = a.threads,
                      .private_kv = a.private_kv,
                      .window = a.window.empty() ? EngineOptions{}.kv_window : a.window};
  const size_t slash = a.private_kv.find('/');
  if (slash == std::string::npos) return Status::Error("--private must be K/V, e.g. q8/q8");
  const std::string pk = a.private_kv.substr(0, slash), pv = a.private_kv.substr(slash + 1);
  for (size_t d : a.doc_tokens) {
    if (d + 16 > all.size() || d > 8000) return Status::Error("--doc-tokens {} is out of range", d);
    const size_t cut = d * 7 / 10;
    // Documents start at an article boundary-free offset far enough into the file to vary by size.
    const size_t off = (d * 37) % (all.size() - d);
    const std::string pool_text = tok.Decode(std::span<const int32_t>(all).subspan(off, cut));
    const std::string rest_text = tok.Decode(std::span<const int32_t>(all).subspan(off + cut, d - cut));
    if (a.log) std::fprintf(a.log, "document of %zu tokens: f16 base ...\n", d);
    CHORUS_ASSIGN_OR_RETURN(RunResult base, RunOne(a, "f16", "f16", "f16", "f16", 0, pool_text, rest_text, frame));
    PolykvDocument doc{.doc_tokens = d, .pool_tokens = cut, .base_ppl = base.ppl};
    for (const std::string& cfg : a.configs) {
      const size_t s2 = cfg.find('/');
      if (s2 == std::string::npos) return Status::Error("--configs entry '{}' must be K/V", cfg);
      const std::string k = cfg.substr(0, s2), v = cfg.substr(s2 + 1);
      const bool paper = k == "polykv-paper";
      if (a.log) std::fprintf(a.log, "document of %zu tokens: %s ...\n", d, cfg.c_str());
      auto r =
          RunOne(a, k, v, paper ? "polykv-paper" : pk, paper ? "tq3" : pv, paper ? 0 : 1, pool_text, rest_text, frame);
      if (!r.ok()) return r.status().Context(cfg);
      PolykvRow row{.config = cfg,
                    .ppl = r->ppl,
                    .ppl_delta_pct = 100 * (r->ppl / base.ppl - 1),
                    .shared_bytes = r->shared_bytes};
      for (size_t n : a.agents) {
        double f1 = 0;
        size_t exact = 0;
        for (size_t i = 0; i < n; ++i) {
          f1 += TokenF1(base.answers[n][i], r->answers[n][i]);
          exact += base.answers[n][i] == r->answers[n][i];
        }
        size_t answer_tokens = 0;
        for (const auto& ans : r->answers[n]) answer_tokens += ans.size();
        row.agents.push_back({.n = n,
                              .mean_answer_tokens = double(answer_tokens) / n,
                              .kv_bytes = r->peak_bytes[n],
                              .fp16_copies_bytes = r->baseline_bytes[n],
                              .reduction_pct = 100.0 * (1 - double(r->peak_bytes[n]) / r->baseline_bytes[n]),
                              .answer_f1 = f1 / n,
                              .answers_identical = exact});
      }
      doc.configs.push_back(std::move(row));
    }
    report.documents.push_back(std::move(doc));
  }
  return report;
}

nlohmann::json ToJson(const PolykvReport& r) {
  nlohmann::json out = {
      {"max_tokens", r.max_tokens}, {"private_kv", r.private_kv}, {"threads", r.threads}, {"window", r.window}};
  for (const PolykvDocument& d : r.documents) {
    nlohmann::json doc = {{"doc_tokens", d.doc_tokens}, {"pool_tokens", d.pool_tokens}, {"base_ppl", d.base_ppl}};
    for (const PolykvRow& row : d.configs) {
      nlohmann::json c = {{"config", row.config},
                          {"ppl", row.ppl},
                          {"ppl_delta_pct", row.ppl_delta_pct},
                          {"shared_bytes", row.shared_bytes}};
      for (const PolykvAgents& ag : row.agents)
        c["agents"].push_back({{"n", ag.n},
                               {"mean_answer_tokens", ag.mean_answer_tokens},
                               {"kv_bytes", ag.kv_bytes},
                               {"fp16_copies_bytes", ag.fp16_copies_bytes},
                               {"reduction_pct", ag.reduction_pct},
                               {"answer_f1", ag.answer_f1},
                               {"answers_identical", ag.answers_identical}});
      doc["configs"].push_back(c);
    }
    out["documents"].push_back(doc);
  }
  return Versioned("polykv", std::move(out));
}

void PrintTable(const PolykvReport& r, std::FILE* out) {
  for (const PolykvDocument& doc : r.documents) {
    std::fprintf(out, "\ndocument %zu tokens (pool %zu), base PPL %.4f\n", doc.doc_tokens, doc.pool_tokens,
                 doc.base_ppl);
    std::fprintf(out, "%-18s %4s %12s %14s %9s %9s %8s %6s\n", "K/V", "N", "KV MiB", "fp16 copies MiB", "reduct.",
                 "dPPL %", "ans F1", "same");
    for (const PolykvRow& c : doc.configs)
      for (const PolykvAgents& ag : c.agents)
        std::fprintf(out, "%-18s %4zu %12.2f %14.2f %8.2f%% %+8.3f %8.3f %3zu/%zu\n", c.config.c_str(), ag.n,
                     ag.kv_bytes / 1048576.0, ag.fp16_copies_bytes / 1048576.0, ag.reduction_pct, c.ppl_delta_pct,
                     ag.answer_f1, ag.answers_identical, ag.n);
  }
}

}  // namespace chorus::eval
