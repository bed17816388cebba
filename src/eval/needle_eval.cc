// Long-context retrieval (see needle_eval.h).
#include "eval/needle_eval.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <span>
#include <sstream>

#include "chorus/engine.h"
#include "eval/harness.h"  // LoadModel, ReadFile, ChatFrame
#include "eval/report.h"   // Versioned
#include "util/timer.h"

namespace chorus::eval {
namespace {

// Tokens of the agent's prompt P (as Spawn encodes a prompt that continues a context) and of P + A
// for the answer A; errors if P + A does not tokenize as P's tokens followed by A's (the boundary
// must be stable for NLL(P + A) − NLL(P) to be the answer's NLL).
struct PromptAnswer {
  std::vector<int32_t> prompt, joint;  // P, then P + A (A = joint's tail after P)
  std::span<const int32_t> answer() const { return std::span<const int32_t>(joint).subspan(prompt.size()); }
};
Result<PromptAnswer> PromptAnswerTokens(const Tokenizer& tok, const std::string& prompt, const std::string& answer) {
  PromptAnswer r{tok.Encode(prompt, false, true), {}};
  const std::vector<int32_t> a = tok.Encode(answer, false, true);
  if (r.prompt.empty() || a.empty()) return Status::Error("empty prompt or answer");
  r.joint = r.prompt;
  r.joint.insert(r.joint.end(), a.begin(), a.end());
  if (tok.Encode(prompt + answer, false, true) != r.joint)
    return Status::Error("prompt + answer '{}' does not tokenize as the prompt's tokens then the answer's", answer);
  return r;
}

// Asks case `nc` on context `ctx` and scores the gold answer's likelihood; `r` arrives with the
// context's measurements.
Status AskCase(Engine& engine, const Tokenizer& tok, ContextId ctx, const NeedleConfig& c, const std::string& after,
               const NeedleCase& nc, NeedleCaseResult& r) {
  AgentOptions ao{.temperature = 0.0f, .max_tokens = c.answer_tokens, .ignore_eog = c.ignore_eog};
  // The answer is led in ("... is"), so the first generated tokens are the code.
  const std::string prompt = "\n\nQuestion: " + nc.question + after + nc.lead;
  CHORUS_ASSIGN_OR_RETURN(AgentId id, engine.Spawn(ctx, prompt, ao));
  Timer t_decode;  // steps only: the first token comes from the prompt's prefill in Spawn
  while (engine.running() > 0) CHORUS_RETURN_IF_ERROR(engine.Step());
  const double decode_s = t_decode.Seconds();
  const AgentState& st = *engine.agent(id);
  r.output = st.text;
  r.correct = ExactAnswer(st.text, nc.answer);
  r.decode_tokens_per_s = st.tokens.size() > 1 && decode_s > 0 ? (st.tokens.size() - 1) / decode_s : 0;
  // Teacher-forced likelihood of the gold answer after the same prompt.
  CHORUS_ASSIGN_OR_RETURN(PromptAnswer pa, PromptAnswerTokens(tok, prompt, " " + nc.answer));
  const std::span<const int32_t> a_tok = pa.answer();
  auto s_pa = engine.Score(ctx, std::span<const int32_t>(pa.joint));
  if (!s_pa.ok()) return s_pa.status().Context("scoring prompt + answer");
  // A one-token prompt has nothing to score (Score needs 2 tokens): its NLL is 0.
  Engine::ScoreResult s_p;
  if (pa.prompt.size() > 1) {
    auto s = engine.Score(ctx, std::span<const int32_t>(pa.prompt));
    if (!s.ok()) return s.status().Context("scoring the prompt");
    s_p = *s;
  }
  if (s_pa->count - s_p.count != a_tok.size())
    return Status::Error("scored {} − {} tokens, but the answer has {}", s_pa->count, s_p.count, a_tok.size());
  r.answer_nll = s_pa->nll - s_p.nll;
  r.answer_tokens = a_tok.size();
  r.greedy_starts_with_answer_tokens =
      st.tokens.size() >= a_tok.size() && std::equal(a_tok.begin(), a_tok.end(), st.tokens.begin());
  return Status::Ok();
}

// Every case on one config's engine.
Result<std::vector<NeedleCaseResult>> RunConfig(const NeedleConfig& c, const NeedleConfig::Run& run, size_t n_ctx,
                                                const Tokenizer& tok, const std::pair<std::string, std::string>& frame,
                                                const std::vector<NeedleCase>& cases) {
  // The agents' own KV is f16; a compressed policy gets the "auto" window (q8).
  EngineOptions eo{.model_path = c.model_path,
                   .threads = c.threads,
                   .n_ctx = n_ctx,
                   .policy = run.policy,
                   .private_k = "f16",
                   .private_v = "f16",
                   .encoder_path = run.policy.needs_questions() ? c.encoder : ""};
  eo.kv_window = c.kv_window;
  auto engine_r = Engine::Open(eo);
  if (!engine_r.ok()) return engine_r.status().Context("config " + run.name);
  Engine& engine = *engine_r.value();
  std::vector<NeedleCaseResult> out;
  // The question the config's context is made for: one case (its question), or — uniform and
  // comix contexts, which do not depend on it, and with shared_questions every context — the run
  // of consecutive cases with the same document (all their questions), prefilled once.
  const bool per_question = run.policy.needs_questions() && !c.shared_questions;
  for (size_t g0 = 0, g1 = 0; g0 < cases.size(); g0 = g1) {
    g1 = g0 + 1;
    while (!per_question && g1 < cases.size() && cases[g1].document == cases[g0].document) ++g1;
    std::vector<std::string> questions;
    for (size_t i = g0; i < g1; ++i) questions.push_back(cases[i].question);
    NeedleCaseResult shared;
    Timer t_share;
    auto ctx = run.policy.needs_questions() ? engine.ShareFor(frame.first + cases[g0].document, questions)
                                            : engine.Share(frame.first + cases[g0].document);
    if (!ctx.ok()) return ctx.status().Context(run.name);
    shared.prefill_seconds = t_share.Seconds();
    shared.bytes = engine.KvReport().shared_bytes;
    shared.tokens = engine.ContextTokens(*ctx);
    shared.fp16_bytes = engine.Fp16Bytes(shared.tokens);
    if (const ChunkMapReport* m = engine.chunk_map(*ctx)) {
      shared.search_seconds = m->search_seconds;
      shared.prefill_seconds = m->prefill_seconds;
      shared.map = m->blocks;
      if (!m->stored_v.empty()) {  // the allocator: the bits of the middle layer's blocks
        shared.k_bits_mid = m->stored_k[m->stored_k.size() / 2];
        shared.v_bits_mid = m->stored_v[m->stored_v.size() / 2];
      }
    }
    shared.search_seconds /= double(g1 - g0), shared.prefill_seconds /= double(g1 - g0);  // per case
    shared.context_questions = g1 - g0;
    for (size_t i = g0; i < g1; ++i) {
      const NeedleCase& nc = cases[i];
      NeedleCaseResult r = shared;
      r.depth = nc.depth, r.answer = nc.answer, r.kind = nc.kind;
      if (Status s = AskCase(engine, tok, *ctx, c, frame.second, nc, r); !s.ok()) return s.Context(run.name);
      if (c.log)
        std::fprintf(c.log, "%-22s case %2zu: %5zu tokens depth %.2f %s %-8s nll %7.4f | %s\n", run.name.c_str(), i,
                     r.tokens, nc.depth, r.correct ? "OK  " : "MISS", nc.answer.c_str(), r.answer_nll,
                     r.output.substr(0, 40).c_str());
      out.push_back(std::move(r));
    }
    engine.Release(*ctx);
  }
  return out;
}

// A config's totals; `base`: the f16 run's cases (null: none, the fp16 payload of the same tokens).
NeedleConfigResult Summarize(std::string name, std::vector<NeedleCaseResult> cases,
                             const std::vector<NeedleCaseResult>* base) {
  NeedleConfigResult c{.config = std::move(name), .cases = cases.size()};
  size_t agree = 0, base_bytes = 0;
  double search = 0, prefill = 0, decode = 0, nll = 0, p_answer = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const NeedleCaseResult& r = cases[i];
    c.correct += r.correct;
    c.bytes += r.bytes;
    c.tokens += r.tokens;
    search += r.search_seconds;
    prefill += r.prefill_seconds;
    decode += r.decode_tokens_per_s;
    nll += r.answer_nll;
    p_answer += std::exp(-r.answer_nll);
    if (base != nullptr) {
      agree += r.output == (*base)[i].output;
      base_bytes += (*base)[i].bytes;
    } else {
      base_bytes += r.fp16_bytes;
    }
  }
  const double n = cases.size(), ratio = base_bytes ? double(c.bytes) / base_bytes : 0;
  c.accuracy = c.correct / n;
  c.agreement_with_f16 = base != nullptr ? agree / n : -1.0;
  c.bytes_vs_f16 = ratio;
  c.bits_per_element = ratio * 16;
  c.search_seconds_per_1k = 1000 * search / c.tokens;
  c.prefill_seconds_per_1k = 1000 * prefill / c.tokens;
  c.decode_tokens_per_s = decode / n;
  c.mean_answer_nll = nll / n;
  c.mean_p_answer = p_answer / n;
  c.per_case = std::move(cases);
  return c;
}

}  // namespace

Result<std::vector<NeedleCase>> LoadNeedleCases(const std::string& path) {
  CHORUS_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  std::vector<NeedleCase> out;
  std::stringstream ss(text);
  size_t line_no = 0;
  for (std::string line; std::getline(ss, line);) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return Status::Error("{}:{}: not a JSON object", path, line_no);
    NeedleCase nc;
    const std::pair<const char*, std::string*> fields[] = {
        {"document", &nc.document}, {"question", &nc.question}, {"answer", &nc.answer}, {"lead", &nc.lead}};
    for (auto [key, dst] : fields) {
      if (!j.contains(key) || !j[key].is_string() || j[key].get<std::string>().empty())
        return Status::Error("{}:{}: needs a non-empty string \"{}\"", path, line_no, key);
      *dst = j[key].get<std::string>();
    }
    if (j.contains("depth") && j["depth"].is_number()) nc.depth = j["depth"].get<double>();
    if (j.contains("kind") && j["kind"].is_string()) nc.kind = j["kind"].get<std::string>();
    out.push_back(std::move(nc));
  }
  if (out.empty()) return Status::Error("{}: no cases", path);
  return out;
}

bool ExactAnswer(const std::string& output, const std::string& answer) {
  if (answer.find_first_not_of("0123456789") == std::string::npos) {
    std::string digits;
    for (char ch : output)
      if (ch >= '0' && ch <= '9')
        digits += ch;
      else if (!digits.empty() && ch != ' ')
        break;
    return digits == answer;
  }
  const size_t p = output.find_first_not_of(' ');
  if (p == std::string::npos || output.compare(p, answer.size(), answer) != 0) return false;
  const size_t e = p + answer.size();
  return e == output.size() || !std::isalnum(static_cast<unsigned char>(output[e]));
}

Result<NeedleReport> RunNeedle(const NeedleConfig& c) {
  if (c.corpus_path.empty() == c.cases_path.empty())
    return Status::Error("give either -f CORPUS (generated needle cases) or --cases-file JSONL");
  CHORUS_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, LoadModel(c.model_path));
  const Tokenizer& tok = model->tokenizer();
  std::vector<NeedleCase> cases;
  if (!c.cases_path.empty()) {
    CHORUS_ASSIGN_OR_RETURN(cases, LoadNeedleCases(c.cases_path));
  } else {
    CHORUS_ASSIGN_OR_RETURN(std::string corpus, ReadFile(c.corpus_path));
    CHORUS_ASSIGN_OR_RETURN(cases, MakeNeedleCases(corpus, tok, c.gen));
  }
  size_t longest = 0;  // the contexts' positions: the longest document + its question and answer
  for (const NeedleCase& nc : cases) longest = std::max(longest, tok.Encode(nc.document, false, true).size());
  CHORUS_ASSIGN_OR_RETURN(auto frame, ChatFrame(*model));
  if (!c.dump_path.empty()) {
    std::ofstream f(c.dump_path);
    for (const auto& nc : cases)
      f << nlohmann::json{{"document", nc.document},
                          {"question", nc.question},
                          {"answer", nc.answer},
                          {"lead", nc.lead},
                          {"depth", nc.depth}}
               .dump()
        << "\n";
    if (!f) return Status::Error("cannot write '{}'", c.dump_path);
  }
  const size_t n_ctx = std::max(c.gen.max_tokens, longest + 64) + 256;
  std::vector<std::vector<NeedleCaseResult>> results;
  for (const NeedleConfig::Run& run : c.runs) {
    CHORUS_ASSIGN_OR_RETURN(auto r, RunConfig(c, run, n_ctx, tok, frame, cases));
    results.push_back(std::move(r));
  }
  // Baseline: the f16 run, if one was asked for (the last such).
  size_t base = SIZE_MAX;
  for (size_t ci = 0; ci < c.runs.size(); ++ci)
    if (c.runs[ci].policy == KvPolicy{KvPolicy::Uniform{.k = "f16", .v = "f16"}}) base = ci;
  NeedleReport report{.threads = c.threads, .seed = c.gen.seed};
  for (size_t ci = 0; ci < c.runs.size(); ++ci)
    report.configs.push_back(Summarize(c.runs[ci].name, results[ci], base != SIZE_MAX ? &results[base] : nullptr));
  return report;
}

nlohmann::json ToJson(const NeedleReport& report) {
  nlohmann::json out = nlohmann::json::array();
  for (const NeedleConfigResult& c : report.configs) {
    nlohmann::json per_case = nlohmann::json::array();
    for (const NeedleCaseResult& r : c.per_case)
      per_case.push_back({{"tokens", r.tokens},
                          {"depth", r.depth},
                          {"answer", r.answer},
                          {"kind", r.kind},
                          {"k_bits_mid", r.k_bits_mid},
                          {"v_bits_mid", r.v_bits_mid},
                          {"context_questions", r.context_questions},
                          {"output", r.output},
                          {"correct", r.correct},
                          {"bytes", r.bytes},
                          {"map", r.map},
                          {"search_seconds", r.search_seconds},
                          {"prefill_seconds", r.prefill_seconds},
                          {"decode_tokens_per_s", r.decode_tokens_per_s},
                          {"answer_nll", r.answer_nll},
                          {"answer_tokens", r.answer_tokens},
                          {"greedy_starts_with_answer_tokens", r.greedy_starts_with_answer_tokens}});
    out.push_back({{"config", c.config},
                   {"accuracy", c.accuracy},
                   {"agreement_with_f16", c.agreement_with_f16},
                   {"bytes", c.bytes},
                   {"bytes_vs_f16", c.bytes_vs_f16},
                   {"bits_per_element", c.bits_per_element},
                   {"tokens", c.tokens},
                   {"search_seconds_per_1k", c.search_seconds_per_1k},
                   {"prefill_seconds_per_1k", c.prefill_seconds_per_1k},
                   {"decode_tokens_per_s", c.decode_tokens_per_s},
                   {"mean_answer_nll", c.mean_answer_nll},
                   {"mean_p_answer", c.mean_p_answer},
                   {"cases", per_case}});
  }
  return Versioned("needle", {{"configs", out}, {"threads", report.threads}, {"seed", report.seed}});
}

void PrintTable(const NeedleReport& report, std::FILE* out) {
  std::fprintf(out, "%-22s %9s %10s %11s %9s %9s %7s %12s %12s %9s\n", "config", "accuracy", "agree_f16", "bytes/f16",
               "bits/el", "ans_nll", "P(ans)", "search s/1K", "prefill s/1K", "decode/s");
  for (const NeedleConfigResult& c : report.configs)
    std::fprintf(out, "%-22s %4zu/%-4zu %10.2f %10.1f%% %9.2f %9.4f %7.3f %12.3f %12.3f %9.1f\n", c.config.c_str(),
                 c.correct, c.cases, c.agreement_with_f16, 100 * c.bytes_vs_f16, c.bits_per_element, c.mean_answer_nll,
                 c.mean_p_answer, c.search_seconds_per_1k, c.prefill_seconds_per_1k, c.decode_tokens_per_s);
}

}  // namespace chorus::eval
