// `chorus eval needle`: long-context retrieval (Cocktail's benchmark, docs/results/cocktail.md and
// allocator.md). Generates needle cases (tools/needle_gen.h) or reads them (--cases-file JSONL), then
// for each KV config prefills every document as a shared context (uniform formats; the paper's
// Cocktail or chorus's — the allocator with the question's relevance — with the question as the
// query; CoMix's allocator without it), asks the question
// as an agent (greedy), and scores: exact answer (the code appears in the output), agreement with
// the f16 run's output, the context's measured KV bytes against the f16 run's measured bytes, and the
// gold answer's teacher-forced likelihood: answer NLL = NLL(prompt + answer) − NLL(prompt), both
// scored as the continuation of the context, with the prompt tokenized exactly as the agent's (special
// tokens parsed) and the answer as " " + the code (how the model writes it after the lead).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>
#include <fstream>
#include <span>

#include "chorus/engine.h"
#include "tools/common.h"
#include "tools/needle_gen.h"
#include "tools/policy_flags.h"  // LoadSensitivityTables, SensitivityFor
#include "util/timer.h"

namespace chorus::cli {
namespace {

struct NeedleArgs {
  std::string model, file, dump, cases_file;
  NeedleOptions gen;
  std::vector<std::string> configs = {"f16", "kivi4", "kivi2", "cocktail-paper"};
  std::string encoder, kv_window = EngineOptions{}.kv_window;
  int threads = DefaultThreads(), max_tokens = 8;
  bool json = false, ignore_eog = false, shared_questions = false;
  std::vector<std::string> sensitivity;  // tables of the ':m' allocator configs (one per family)
};

struct Config {
  std::string name;  // the spec as given (+ "@shared" with --shared-questions)
  KvPolicy policy;   // f16, kivi4, q8/kivi2, cocktail-paper[:A:B[:N]], comix-…, cocktail-… (KvPolicy's grammar)
};

// Cases from a JSONL file (one object per line: document, question, answer, lead, optional depth
// and kind), e.g. written by --dump or scripts/make_needle_cases.py.
Result<std::vector<NeedleCase>> LoadCases(const std::string& path) {
  CHORUS_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  std::vector<NeedleCase> out;
  std::stringstream ss(text);
  size_t line_no = 0;
  for (std::string line; std::getline(ss, line);) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object())
      return Status::Error("{}:{}: not a JSON object", path, line_no);
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

// Exact answer: an all-digit answer must be the first run of digits of the output (spaces allowed
// between digits); any other answer must begin the output (leading spaces skipped), followed by
// the end or a character that is not a letter or digit.
bool ExactAnswer(const std::string& output, const std::string& answer) {
  if (answer.find_first_not_of("0123456789") == std::string::npos) {
    std::string digits;
    for (char ch : output)
      if (ch >= '0' && ch <= '9') digits += ch;
      else if (!digits.empty() && ch != ' ') break;
    return digits == answer;
  }
  const size_t p = output.find_first_not_of(' ');
  if (p == std::string::npos || output.compare(p, answer.size(), answer) != 0) return false;
  const size_t e = p + answer.size();
  return e == output.size() || !std::isalnum(static_cast<unsigned char>(output[e]));
}

struct CaseResult {
  std::string text;
  bool correct = false;
  size_t bytes = 0, tokens = 0, fp16_bytes = 0;  // fp16_bytes: Engine::Fp16Bytes, when no f16 run is there
  double search_s = 0, prefill_s = 0, decode_tok_s = 0;
  std::string map;
  std::string k_mid, v_mid;    // the allocator: bits per block of the middle layer (stored formats)
  size_t readers = 1;          // questions the context was made for / read by (a shared document's run of cases)
  double answer_nll = 0;       // nats, summed over the answer's tokens
  size_t answer_tokens = 0;
  bool greedy_answer = false;  // the generated tokens begin with exactly the scored answer tokens
};

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

int RunNeedle(const NeedleArgs& a) {
  auto tables = LoadSensitivityTables(a.sensitivity);
  if (!tables.ok()) return Fail(tables.status());
  std::vector<Config> configs;
  for (const auto& s : a.configs) {
    auto policy = KvPolicy::Parse(s);
    if (!policy.ok()) return Fail(policy.status().Context("--configs"));
    Config c{.name = s, .policy = *policy};
    if (a.shared_questions && c.policy.needs_questions()) c.name += "@shared";  // kept apart in summaries
    if (KvPolicy::Allocator* alloc = c.policy.allocator(); alloc && alloc->rank == KvPolicy::Rank::kMeasured) {
      auto t = SensitivityFor(*tables, std::string(FamilyName(alloc->family)), s);
      if (!t.ok()) return Fail(t.status());
      alloc->sensitivity = t->path;  // the engine reads it
    }
    configs.push_back(c);
  }
  if (Status s = CheckEngineWindowFlag(a.kv_window); !s.ok()) return Fail(s);
  if (a.file.empty() == a.cases_file.empty())
    return Fail(Status::Error("give either -f CORPUS (generated needle cases) or --cases-file JSONL"));
  auto model = LoadModel(a.model);
  if (!model.ok()) return Fail(model.status());
  Result<std::vector<NeedleCase>> cases = std::vector<NeedleCase>{};
  if (!a.cases_file.empty()) {
    cases = LoadCases(a.cases_file);
  } else {
    auto corpus = ReadFile(a.file);
    if (!corpus.ok()) return Fail(corpus.status());
    cases = MakeNeedleCases(*corpus, model.value()->tokenizer(), a.gen);
  }
  if (!cases.ok()) return Fail(cases.status());
  size_t longest = 0;  // the contexts' positions: the longest document + its question and answer
  for (const NeedleCase& nc : *cases) longest = std::max(longest, model.value()->tokenizer().Encode(nc.document, false, true).size());
  auto frame = ChatFrame(*model.value());
  if (!frame.ok()) return Fail(frame.status());
  if (!a.dump.empty()) {
    std::ofstream f(a.dump);
    for (const auto& c : *cases)
      f << nlohmann::json{{"document", c.document}, {"question", c.question}, {"answer", c.answer},
                          {"lead", c.lead}, {"depth", c.depth}}.dump() << "\n";
    if (!f) return Fail(Status::Error("cannot write '{}'", a.dump));
  }
  const size_t n_ctx = std::max(a.gen.max_tokens, longest + 64) + 256;
  std::vector<std::vector<CaseResult>> results(configs.size());
  for (size_t ci = 0; ci < configs.size(); ++ci) {
    const Config& c = configs[ci];
    // The agents' own KV is f16; a compressed policy gets the "auto" window (q8).
    EngineOptions eo{.model_path = a.model,
                     .threads = a.threads,
                     .n_ctx = n_ctx,
                     .policy = c.policy,
                     .private_k = "f16",
                     .private_v = "f16",
                     .encoder_path = c.policy.needs_questions() ? a.encoder : ""};
    eo.kv_window = a.kv_window;
    auto engine_r = Engine::Open(eo);
    if (!engine_r.ok()) return Fail(engine_r.status().Context("config " + c.name));
    Engine& engine = *engine_r.value();
    // The question the config's context is made for: one case (its question), or — uniform and
    // comix contexts, which do not depend on it, and with --shared-questions every context — the
    // run of consecutive cases with the same document (all their questions), prefilled once.
    const bool per_question = c.policy.needs_questions() && !a.shared_questions;
    for (size_t g0 = 0, g1 = 0; g0 < cases->size(); g0 = g1) {
      g1 = g0 + 1;
      while (!per_question && g1 < cases->size() && (*cases)[g1].document == (*cases)[g0].document) ++g1;
      std::vector<std::string> questions;
      for (size_t i = g0; i < g1; ++i) questions.push_back((*cases)[i].question);
      CaseResult shared;
      Timer t_share;
      auto ctx = c.policy.needs_questions() ? engine.ShareFor(frame->first + (*cases)[g0].document, questions)
                                            : engine.Share(frame->first + (*cases)[g0].document);
      if (!ctx.ok()) return Fail(ctx.status().Context(c.name));
      shared.prefill_s = t_share.Seconds();
      shared.bytes = engine.KvReport().shared_bytes;
      shared.tokens = engine.ContextTokens(*ctx);
      shared.fp16_bytes = engine.Fp16Bytes(shared.tokens);
      if (const ChunkMapReport* m = engine.chunk_map(*ctx)) {
        shared.search_s = m->search_seconds;
        shared.prefill_s = m->prefill_seconds;
        shared.map = m->blocks;
        if (!m->stored_v.empty()) {  // the allocator: the bits of the middle layer's blocks
          shared.k_mid = m->stored_k[m->stored_k.size() / 2];
          shared.v_mid = m->stored_v[m->stored_v.size() / 2];
        }
      }
      shared.search_s /= double(g1 - g0), shared.prefill_s /= double(g1 - g0);  // per case
      shared.readers = g1 - g0;
      for (size_t i = g0; i < g1; ++i) {
        const NeedleCase& nc = (*cases)[i];
        CaseResult r = shared;
        AgentOptions ao{.temperature = 0.0f, .max_tokens = a.max_tokens, .ignore_eog = a.ignore_eog};
        // The answer is led in ("... is"), so the first generated tokens are the code.
        const std::string prompt = "\n\nQuestion: " + nc.question + frame->second + nc.lead;
        auto id = engine.Spawn(*ctx, prompt, ao);
        if (!id.ok()) return Fail(id.status().Context(c.name));
        Timer t_decode;  // steps only: the first token comes from the prompt's prefill in Spawn
        while (engine.running() > 0)
          if (Status s = engine.Step(); !s.ok()) return Fail(s);
        const double decode_s = t_decode.Seconds();
        const AgentState& st = *engine.agent(*id);
        r.text = st.text;
        r.correct = ExactAnswer(st.text, nc.answer);
        r.decode_tok_s = st.tokens.size() > 1 && decode_s > 0 ? (st.tokens.size() - 1) / decode_s : 0;
        // Teacher-forced likelihood of the gold answer after the same prompt.
        auto pa = PromptAnswerTokens(model.value()->tokenizer(), prompt, " " + nc.answer);
        if (!pa.ok()) return Fail(pa.status().Context(c.name));
        const std::vector<int32_t>& p_tok = pa->prompt;
        const std::span<const int32_t> a_tok = pa->answer();
        auto s_pa = engine.Score(*ctx, std::span<const int32_t>(pa->joint));
        if (!s_pa.ok()) return Fail(s_pa.status().Context(c.name + ": scoring prompt + answer"));
        // A one-token prompt has nothing to score (Score needs 2 tokens): its NLL is 0.
        Engine::ScoreResult s_p;
        if (p_tok.size() > 1) {
          auto s = engine.Score(*ctx, std::span<const int32_t>(p_tok));
          if (!s.ok()) return Fail(s.status().Context(c.name + ": scoring the prompt"));
          s_p = *s;
        }
        if (s_pa->count - s_p.count != a_tok.size())
          return Fail(Status::Error("{}: scored {} − {} tokens, but the answer has {}", c.name, s_pa->count, s_p.count,
                                    a_tok.size()));
        r.answer_nll = s_pa->nll - s_p.nll;
        r.answer_tokens = a_tok.size();
        r.greedy_answer = st.tokens.size() >= a_tok.size() && std::equal(a_tok.begin(), a_tok.end(), st.tokens.begin());
        // Per-case lines go to stderr in both modes (progress during long runs; --json prints to stdout).
        std::fprintf(stderr, "%-22s case %2zu: %5zu tokens depth %.2f %s %-8s nll %7.4f | %s\n", c.name.c_str(), i,
                     r.tokens, nc.depth, r.correct ? "OK  " : "MISS", nc.answer.c_str(), r.answer_nll,
                     r.text.substr(0, 40).c_str());
        results[ci].push_back(std::move(r));
      }
      engine.Release(*ctx);
    }
  }
  // Baseline: the f16 run, if one was asked for.
  size_t base = SIZE_MAX;
  for (size_t ci = 0; ci < configs.size(); ++ci)
    if (configs[ci].policy == KvPolicy{KvPolicy::Uniform{.k = "f16", .v = "f16"}}) base = ci;
  nlohmann::json out = nlohmann::json::array();
  if (!a.json)
    std::printf("%-22s %9s %10s %11s %9s %9s %7s %12s %12s %9s\n", "config", "accuracy", "agree_f16", "bytes/f16",
                "bits/el", "ans_nll", "P(ans)", "search s/1K", "prefill s/1K", "decode/s");
  for (size_t ci = 0; ci < configs.size(); ++ci) {
    size_t correct = 0, agree = 0, bytes = 0, base_bytes = 0, tokens = 0;
    double search = 0, prefill = 0, decode = 0, nll = 0, p_answer = 0;
    for (size_t i = 0; i < cases->size(); ++i) {
      const CaseResult& r = results[ci][i];
      correct += r.correct;
      bytes += r.bytes;
      tokens += r.tokens;
      search += r.search_s;
      prefill += r.prefill_s;
      decode += r.decode_tok_s;
      nll += r.answer_nll;
      p_answer += std::exp(-r.answer_nll);
      if (base != SIZE_MAX) {
        agree += r.text == results[base][i].text;
        base_bytes += results[base][i].bytes;
      } else {
        base_bytes += r.fp16_bytes;  // no f16 run: the fp16 payload of the same tokens
      }
    }
    const double n = cases->size(), ratio = base_bytes ? double(bytes) / base_bytes : 0;
    nlohmann::json per_case = nlohmann::json::array();
    for (size_t i = 0; i < cases->size(); ++i) {
      const CaseResult& r = results[ci][i];
      per_case.push_back({{"tokens", r.tokens}, {"depth", (*cases)[i].depth}, {"answer", (*cases)[i].answer},
                          {"kind", (*cases)[i].kind}, {"k_bits_mid", r.k_mid}, {"v_bits_mid", r.v_mid},
                          {"context_questions", r.readers},
                          {"output", r.text}, {"correct", r.correct}, {"bytes", r.bytes}, {"map", r.map},
                          {"search_seconds", r.search_s}, {"prefill_seconds", r.prefill_s},
                          {"decode_tokens_per_s", r.decode_tok_s}, {"answer_nll", r.answer_nll},
                          {"answer_tokens", r.answer_tokens}, {"greedy_starts_with_answer_tokens", r.greedy_answer}});
    }
    out.push_back({{"config", configs[ci].name}, {"accuracy", correct / n},
                   {"agreement_with_f16", base != SIZE_MAX ? agree / n : -1.0}, {"bytes", bytes},
                   {"bytes_vs_f16", ratio}, {"bits_per_element", ratio * 16}, {"tokens", tokens},
                   {"search_seconds_per_1k", 1000 * search / tokens}, {"prefill_seconds_per_1k", 1000 * prefill / tokens}, {"decode_tokens_per_s", decode / n},
                   {"mean_answer_nll", nll / n}, {"mean_p_answer", p_answer / n}, {"cases", per_case}});
    if (!a.json)
      std::printf("%-22s %4zu/%-4zu %10.2f %10.1f%% %9.2f %9.4f %7.3f %12.3f %12.3f %9.1f\n", configs[ci].name.c_str(),
                  correct, cases->size(), base != SIZE_MAX ? agree / n : -1.0, 100 * ratio, 16 * ratio, nll / n,
                  p_answer / n, 1000 * search / tokens, 1000 * prefill / tokens, decode / n);
  }
  if (a.json) PrintJson({{"configs", out}, {"threads", a.threads}, {"seed", a.gen.seed}});
  return 0;
}

}  // namespace

std::pair<CLI::App*, RunFn> AddNeedleEval(CLI::App* eval) {
  auto a = std::make_shared<NeedleArgs>();
  CLI::App* cmd = eval->add_subcommand("needle", "Long-context retrieval: facts planted at random depths of WikiText-2 "
                                                 "excerpts; exact-answer accuracy, agreement with f16, measured bytes "
                                                 "(uniform formats vs Cocktail).");
  cmd->add_option("-m,--model", a->model, "GGUF model file")->required();
  cmd->add_option("-f,--file", a->file, "corpus (WikiText-2 test) for generated needle cases");
  cmd->add_option("--cases-file", a->cases_file, "cases as JSONL (document, question, answer, lead; e.g. from "
                                                 "scripts/make_needle_cases.py) instead of -f");
  cmd->add_option("--cases", a->gen.cases, "documents")->check(CLI::Range(1, 100000))->capture_default_str();
  cmd->add_option("--min-tokens", a->gen.min_tokens, "shortest document")->capture_default_str();
  cmd->add_option("--max-tokens", a->gen.max_tokens, "longest document")->capture_default_str();
  cmd->add_option("--facts", a->gen.facts, "facts planted per document")->capture_default_str();
  cmd->add_option("--seed", a->gen.seed, "generator seed")->capture_default_str();
  cmd->add_option("--configs", a->configs, "f16, kivi4, K/V pairs, cocktail-paper[:ALPHA:BETA[:CHUNK]], "
                                           "comix-FAMILY:AVG[:tTIERS][:kB][:m], cocktail-FAMILY:AVG[:tTIERS][:kB][:gGAIN][:v][:m]")
      ->delimiter(',')->capture_default_str();
  cmd->add_option("--comix-sensitivity", a->sensitivity, "tables of the ':m' allocator configs (the measured "
                                                         "ranking), one per family: `chorus eval sensitivity -o FILE`")
      ->delimiter(',');
  cmd->add_option("--encoder", a->encoder, "cocktail(-paper): sentence-embedding model directory (default: all-MiniLM-L6-v2 next to the model if installed, else the LLM's hidden states; 'hidden-states' forces those)");
  cmd->add_option("-n,--answer-tokens", a->max_tokens, "tokens generated per answer")->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--kv-window", a->kv_window, "rows of every sequence's newest <32 tokens before sealing: f16, q8 "
                  "or auto (the engine's: q8 for every compressed config, cocktail-paper included; f16 for f16)")->capture_default_str();
  cmd->add_flag("--shared-questions", a->shared_questions, "cocktail(-paper): consecutive cases with the same "
                "document share one context made for all their questions (several agents deciding one context's "
                "precision); without it each case's context is made for its own question");
  cmd->add_flag("--ignore-eog", a->ignore_eog, "keep decoding past end-of-generation (decode speed runs)");
  cmd->add_option("--dump", a->dump, "write the generated cases as JSONL");
  cmd->add_option("-t,--threads", a->threads, "threads")->check(CLI::Range(1, 256))->capture_default_str();
  cmd->add_flag("--json", a->json, "print one JSON object (with every case)");
  return {cmd, [a] { return RunNeedle(*a); }};
}

}  // namespace chorus::cli
