// `chorus eval needle`: long-context retrieval (Cocktail's benchmark, docs/results/cocktail.md).
// Generates needle cases (tools/needle_gen.h), then for each KV config prefills every document as a
// shared context (uniform formats, or Cocktail with the question as the query), asks the question
// as an agent (greedy), and scores: exact answer (the code appears in the output), agreement with
// the f16 run's output, the context's measured KV bytes against the f16 run's measured bytes, and the
// gold answer's teacher-forced likelihood: answer NLL = NLL(prompt + answer) − NLL(prompt), both
// scored as the continuation of the context, with the prompt tokenized exactly as the agent's (special
// tokens parsed) and the answer as " " + the code (how the model writes it after the lead).
#include <algorithm>
#include <cmath>
#include <fstream>
#include <span>

#include "chorus/engine.h"
#include "tools/common.h"
#include "tools/needle_gen.h"
#include "util/timer.h"

namespace chorus::cli {
namespace {

struct NeedleArgs {
  std::string model, file, dump;
  NeedleOptions gen;
  std::vector<std::string> configs = {"f16", "kivi4", "kivi2", "cocktail-paper"};
  std::string encoder, kv_window = EngineOptions{}.kv_window;
  int threads = DefaultThreads(), max_tokens = 8;
  bool json = false, ignore_eog = false;
};

struct Config {
  std::string name;
  bool cocktail = false;
  std::string k = "f16", v = "f16";
  double alpha = 0.6, beta = 0.1;
  size_t chunk = 32;
};

// "f16", "kivi4", "q8/kivi2" (K/V), "cocktail-paper" or "cocktail-paper:ALPHA:BETA[:CHUNK]".
Result<Config> ParseConfig(const std::string& s) {
  Config c{.name = s};
  constexpr std::string_view kPaper = "cocktail-paper";
  if (s.rfind(kPaper, 0) == 0) {
    c.cocktail = true;
    if (s.size() > kPaper.size()) {
      const char* use = "bad config '{}': use cocktail-paper:ALPHA:BETA[:CHUNK]";
      if (s[kPaper.size()] != ':') return Status::Error(fmt::runtime(use), s);
      char* end = nullptr;
      const char* p = s.c_str() + kPaper.size() + 1;
      c.alpha = std::strtod(p, &end);
      if (end == p || *end != ':') return Status::Error(fmt::runtime(use), s);
      p = end + 1;
      c.beta = std::strtod(p, &end);
      if (end == p || (*end != ':' && *end != 0)) return Status::Error(fmt::runtime(use), s);
      if (*end == ':') c.chunk = std::strtoul(end + 1, nullptr, 10);
    }
    return c;
  }
  if (s.rfind("cocktail", 0) == 0)
    return Status::Error("config '{}': the needle benchmark runs the paper's scheme as cocktail-paper[:ALPHA:BETA[:CHUNK]]; "
                         "chorus's cocktail (CoMix's allocator weighted by relevance) runs in `chorus eval ppl|kld` so far", s);
  const size_t slash = s.find('/');
  c.k = s.substr(0, slash);
  c.v = slash == std::string::npos ? c.k : s.substr(slash + 1);
  return c;
}

struct CaseResult {
  std::string text;
  bool correct = false;
  size_t bytes = 0, tokens = 0, fp16_bytes = 0;  // fp16_bytes: Engine::Fp16Bytes, when no f16 run is there
  double search_s = 0, prefill_s = 0, decode_tok_s = 0;
  std::string map;
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
  std::vector<Config> configs;
  for (const auto& s : a.configs) {
    auto c = ParseConfig(s);
    if (!c.ok()) return Fail(c.status());
    configs.push_back(*c);
  }
  if (Status s = CheckEngineWindowFlag(a.kv_window); !s.ok()) return Fail(s);
  auto corpus = ReadFile(a.file);
  if (!corpus.ok()) return Fail(corpus.status());
  auto model = LoadModel(a.model);
  if (!model.ok()) return Fail(model.status());
  auto cases = MakeNeedleCases(*corpus, model.value()->tokenizer(), a.gen);
  if (!cases.ok()) return Fail(cases.status());
  auto frame = ChatFrame(*model.value());
  if (!frame.ok()) return Fail(frame.status());
  if (!a.dump.empty()) {
    std::ofstream f(a.dump);
    for (const auto& c : *cases)
      f << nlohmann::json{{"document", c.document}, {"question", c.question}, {"answer", c.answer},
                          {"lead", c.lead}, {"depth", c.depth}}.dump() << "\n";
    if (!f) return Fail(Status::Error("cannot write '{}'", a.dump));
  }
  const size_t n_ctx = a.gen.max_tokens + 256;
  std::vector<std::vector<CaseResult>> results(configs.size());
  for (size_t ci = 0; ci < configs.size(); ++ci) {
    const Config& c = configs[ci];
    EngineOptions eo{.model_path = a.model, .threads = a.threads, .n_ctx = n_ctx, .shared_k = c.k, .shared_v = c.v,
                     .private_k = "f16", .private_v = "f16", .cocktail_alpha = c.alpha, .cocktail_beta = c.beta,
                     .cocktail_chunk_tokens = c.chunk, .encoder_path = c.cocktail ? a.encoder : ""};
    eo.kv_window = a.kv_window;
    if (c.cocktail) eo.policy = "cocktail-paper";  // the "auto" window: q8, as for every compressed config
    auto engine_r = Engine::Open(eo);
    if (!engine_r.ok()) return Fail(engine_r.status().Context("config " + c.name));
    Engine& engine = *engine_r.value();
    for (size_t i = 0; i < cases->size(); ++i) {
      const NeedleCase& nc = (*cases)[i];
      CaseResult r;
      Timer t_share;
      auto ctx = c.cocktail ? engine.ShareFor(frame->first + nc.document, {nc.question})
                            : engine.Share(frame->first + nc.document);
      if (!ctx.ok()) return Fail(ctx.status().Context(c.name));
      r.prefill_s = t_share.Seconds();
      r.bytes = engine.KvReport().shared_bytes;
      r.tokens = engine.ContextTokens(*ctx);
      r.fp16_bytes = engine.Fp16Bytes(r.tokens);
      if (const ChunkMapReport* m = engine.chunk_map(*ctx)) {
        r.search_s = m->search_seconds;
        r.prefill_s = m->prefill_seconds;
        r.map = m->blocks;
      }
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
      // Exact answer: the code's digits are the first digits of the output (spaces allowed between).
      std::string digits;
      for (char ch : st.text)
        if (ch >= '0' && ch <= '9') digits += ch;
        else if (!digits.empty() && ch != ' ') break;
      r.correct = digits == nc.answer;
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
      engine.Release(*ctx);
      // Per-case lines go to stderr in both modes (progress during long runs; --json prints to stdout).
      std::fprintf(stderr, "%-22s case %2zu: %5zu tokens depth %.2f %s %-8s nll %7.4f | %s\n", c.name.c_str(), i,
                   r.tokens, nc.depth, r.correct ? "OK  " : "MISS", nc.answer.c_str(), r.answer_nll,
                   r.text.substr(0, 40).c_str());
      results[ci].push_back(std::move(r));
    }
  }
  // Baseline: the f16 run, if one was asked for.
  size_t base = SIZE_MAX;
  for (size_t ci = 0; ci < configs.size(); ++ci)
    if (!configs[ci].cocktail && configs[ci].k == "f16" && configs[ci].v == "f16") base = ci;
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
  cmd->add_option("-f,--file", a->file, "corpus (WikiText-2 test)")->required();
  cmd->add_option("--cases", a->gen.cases, "documents")->check(CLI::Range(1, 100000))->capture_default_str();
  cmd->add_option("--min-tokens", a->gen.min_tokens, "shortest document")->capture_default_str();
  cmd->add_option("--max-tokens", a->gen.max_tokens, "longest document")->capture_default_str();
  cmd->add_option("--facts", a->gen.facts, "facts planted per document")->capture_default_str();
  cmd->add_option("--seed", a->gen.seed, "generator seed")->capture_default_str();
  cmd->add_option("--configs", a->configs, "f16, kivi4, K/V pairs, cocktail-paper or cocktail-paper:ALPHA:BETA[:CHUNK]")
      ->delimiter(',')->capture_default_str();
  cmd->add_option("--encoder", a->encoder, "cocktail-paper: sentence-embedding model directory (default: all-MiniLM-L6-v2 next to the model if installed, else the LLM's hidden states; 'hidden-states' forces those)");
  cmd->add_option("-n,--answer-tokens", a->max_tokens, "tokens generated per answer")->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--kv-window", a->kv_window, "rows of every sequence's newest <32 tokens before sealing: f16, q8 "
                  "or auto (the engine's: q8 for every compressed config, cocktail-paper included; f16 for f16)")->capture_default_str();
  cmd->add_flag("--ignore-eog", a->ignore_eog, "keep decoding past end-of-generation (decode speed runs)");
  cmd->add_option("--dump", a->dump, "write the generated cases as JSONL");
  cmd->add_option("-t,--threads", a->threads, "threads")->check(CLI::Range(1, 256))->capture_default_str();
  cmd->add_flag("--json", a->json, "print one JSON object (with every case)");
  return {cmd, [a] { return RunNeedle(*a); }};
}

}  // namespace chorus::cli
