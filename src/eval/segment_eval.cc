// Segment reuse against a full prefill: KLD, greedy agreement, needles, TTFT (segment_eval.h).
#include "eval/segment_eval.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

namespace chorus::eval {
namespace {

Result<std::vector<int32_t>> Prompt(const Engine& e, const std::string& role, const std::string& doc,
                                    const std::string& question) {
  CHORUS_ASSIGN_OR_RETURN(const std::string text,
                          e.RenderChat({{"system", role}, {"user", doc + "\n\nQuestion: " + question}}));
  return e.Tokenize(text, /*add_special=*/true, /*parse_special=*/true);
}

Result<const AgentState*> Run(Engine& e, const std::vector<int32_t>& prompt, const AgentOptions& o) {
  CHORUS_ASSIGN_OR_RETURN(const AgentId id, e.Submit(prompt, o));
  while (e.running() || e.waiting()) CHORUS_RETURN_IF_ERROR(e.Step());
  const AgentState* s = e.agent(id);
  if (!s->error.empty()) return Status::Error(s->error);
  return s;
}

// KL(p || q) of two raw logit rows, nats.
double Kld(const float* p, const float* q, size_t n) {
  double mp = -INFINITY, mq = -INFINITY;
  for (size_t i = 0; i < n; ++i) {
    mp = std::max(mp, double(p[i]));
    mq = std::max(mq, double(q[i]));
  }
  double sp = 0, sq = 0;
  for (size_t i = 0; i < n; ++i) {
    sp += std::exp(p[i] - mp);
    sq += std::exp(q[i] - mq);
  }
  const double lsp = mp + std::log(sp), lsq = mq + std::log(sq);
  double k = 0;
  for (size_t i = 0; i < n; ++i) {
    const double lp = p[i] - lsp;
    k += std::exp(lp) * (lp - (q[i] - lsq));
  }
  return std::max(0.0, k);
}

struct Reference {
  std::vector<int32_t> tokens;
  std::vector<float> logits;
  std::string text;
};

}  // namespace

std::vector<SegmentCase> MakeSegmentCases(const std::string& corpus, size_t n_docs, size_t words, uint64_t seed) {
  std::vector<std::string> w;
  for (size_t i = 0; i < corpus.size();) {
    const size_t b = corpus.find_first_not_of(" \t\r\n", i);
    if (b == std::string::npos) break;
    const size_t e = std::min(corpus.size(), corpus.find_first_of(" \t\r\n", b));
    w.push_back(corpus.substr(b, e - b));
    i = e;
  }
  std::mt19937_64 rng(seed);
  std::vector<SegmentCase> cases;
  if (w.size() < words + 1) return cases;
  static const char* kItems[] = {"vault", "archive", "garden gate", "ledger", "harbour office", "observatory"};
  for (size_t d = 0; d < n_docs; ++d) {
    const size_t start = std::uniform_int_distribution<size_t>(0, w.size() - words - 1)(rng);
    const size_t depth = std::uniform_int_distribution<size_t>(words / 10, words * 9 / 10)(rng);
    const std::string item = kItems[rng() % std::size(kItems)];
    const std::string code = std::to_string(std::uniform_int_distribution<int>(1000, 9999)(rng));
    std::string doc;
    for (size_t i = 0; i < words; ++i) {
      if (i == depth) doc += "The secret code of the " + item + " is " + code + ". ";
      doc += w[start + i] + (i + 1 < words ? " " : "");
    }
    cases.push_back({.document = doc,
                     .questions = {"What is the secret code of the " + item + "?",
                                   "What is the main topic of the text?", "Name one fact the text states."},
                     .needles = {code, "", ""}});
  }
  return cases;
}

namespace {

// One question's answer against a reference: greedy agreement, and the KLD per answer token
// teacher-forced on the reference's greedy answer.
struct Tally {
  std::vector<double> klds;
  size_t same = 0, n = 0;
  Status Add(Engine& e, const std::vector<int32_t>& p, const AgentState& greedy, const Reference& ref, int max_tokens) {
    ++n;
    same += greedy.tokens == ref.tokens;
    if (ref.tokens.empty()) return Status::Ok();  // the reference ended at once: nothing to compare
    CHORUS_ASSIGN_OR_RETURN(
        const AgentState* t,
        Run(e, p, {.max_tokens = int(ref.tokens.size()), .forced_tokens = ref.tokens, .capture_logits = true}));
    (void)max_tokens;
    const size_t V = e.vocab_size();
    for (size_t i = 0; i < ref.tokens.size(); ++i)
      klds.push_back(Kld(ref.logits.data() + i * V, t->logits.data() + i * V, V));
    return Status::Ok();
  }
  double mean() const {
    double sum = 0;
    for (double k : klds) sum += k;
    return klds.empty() ? 0 : sum / double(klds.size());
  }
  double p99() {
    if (klds.empty()) return 0;
    std::sort(klds.begin(), klds.end());
    return klds[std::min(klds.size() - 1, size_t(0.99 * double(klds.size())))];
  }
  double agree() const { return n ? double(same) / double(n) : 0; }
};

using Refs = std::vector<std::vector<std::vector<Reference>>>;  // [case][reader][question]

}  // namespace

Result<SegmentEvalReport> RunSegmentEval(const SegmentEvalConfig& c) {
  if (c.cases.empty() || c.reader_roles.empty()) return Status::Error("segment eval: no cases or no reader roles");
  SegmentEvalReport report;
  auto say = [&](const std::string& s) {
    if (c.progress) c.progress(s);
  };
  const size_t R = c.reader_roles.size();
  // Every reader's greedy answer from a full prefill with reuse off (exact prefix hits are
  // bit-identical), at the evaluated formats and, as the yardstick of their own error, at f16.
  const auto references = [&](const EngineOptions& o, const char* name, Refs* out, const Refs* yardstick,
                              SegmentEvalPoint* pt) -> Status {
    CHORUS_ASSIGN_OR_RETURN(auto e, Engine::Open(o));
    report.model = e->model_name();
    Tally vs_f16;
    size_t ttft_n = 0, needle_hits = 0;
    out->assign(c.cases.size(), {});
    for (size_t ci = 0; ci < c.cases.size(); ++ci) {
      const SegmentCase& sc = c.cases[ci];
      (*out)[ci].assign(R, {});
      for (size_t r = 0; r < R; ++r)
        for (size_t qi = 0; qi < sc.questions.size(); ++qi) {
          CHORUS_ASSIGN_OR_RETURN(const auto p, Prompt(*e, c.reader_roles[r], sc.document, sc.questions[qi]));
          CHORUS_ASSIGN_OR_RETURN(const AgentState* s,
                                  Run(*e, p, {.max_tokens = c.max_tokens, .capture_logits = true}));
          (*out)[ci][r].push_back({s->tokens, s->logits, s->text});
          if (pt) {
            if (qi == 0) pt->mean_ttft_ms += 1e3 * s->first_token_seconds, ++ttft_n;
            if (qi < sc.needles.size() && !sc.needles[qi].empty()) {
              ++pt->needles;
              needle_hits += s->text.find(sc.needles[qi]) != std::string::npos;
            }
            ++pt->answers;
            if (yardstick) CHORUS_RETURN_IF_ERROR(vs_f16.Add(*e, p, *s, (*yardstick)[ci][r][qi], c.max_tokens));
          }
        }
      say(fmt::format("{}: case {}/{}", name, ci + 1, c.cases.size()));
    }
    if (pt) {
      pt->mean_ttft_ms /= double(std::max<size_t>(1, ttft_n));
      pt->greedy_identical = 1;
      pt->needle_exact = pt->needles ? double(needle_hits) / pt->needles : 0;
      pt->mean_kld_f16 = vs_f16.mean();
      pt->greedy_identical_f16 = yardstick ? vs_f16.agree() : 0;
    }
    return Status::Ok();
  };
  Refs refs, f16;
  if (c.f16_yardstick) {
    EngineOptions fo = c.engine;
    fo.segments.reuse = Reuse::kExact;
    fo.policy = {KvPolicy::Uniform{.k = "f16", .v = "f16"}};
    fo.private_k = fo.private_v = "f16";
    CHORUS_RETURN_IF_ERROR(references(fo, "f16 reference", &f16, nullptr, nullptr));
  }
  SegmentEvalPoint full{.repair = -1};
  EngineOptions ro = c.engine;
  ro.segments.reuse = Reuse::kExact;
  CHORUS_RETURN_IF_ERROR(references(ro, "reference", &refs, c.f16_yardstick ? &f16 : nullptr, &full));
  report.points.push_back(full);

  for (double f : c.repair_fractions) {
    EngineOptions so = c.engine;
    so.segments = {.reuse = Reuse::kSegments, .repair = f, .repair_min_tokens = f > 0 ? c.repair_min_tokens : 0};
    CHORUS_ASSIGN_OR_RETURN(auto e, Engine::Open(so));
    SegmentEvalPoint pt{.repair = f};
    Tally vs_ref, vs_f16;
    size_t hits = 0, ttfts = 0, prompt_tokens = 0, reused = 0, repaired = 0;
    for (size_t ci = 0; ci < c.cases.size(); ++ci) {
      const SegmentCase& sc = c.cases[ci];
      // The source role computes the document first (its question: the case's first).
      CHORUS_ASSIGN_OR_RETURN(const auto src, Prompt(*e, c.source_role, sc.document, sc.questions.front()));
      CHORUS_RETURN_IF_ERROR(Run(*e, src, {.max_tokens = 1}).status());
      for (size_t r = 0; r < R; ++r)
        for (size_t qi = 0; qi < sc.questions.size(); ++qi) {
          CHORUS_ASSIGN_OR_RETURN(const auto p, Prompt(*e, c.reader_roles[r], sc.document, sc.questions[qi]));
          CHORUS_ASSIGN_OR_RETURN(const AgentState* g, Run(*e, p, {.max_tokens = c.max_tokens}));
          const AgentState greedy = *g;
          if (qi == 0) {
            pt.mean_ttft_ms += 1e3 * greedy.first_token_seconds;
            ++ttfts;
          }
          if (qi < sc.needles.size() && !sc.needles[qi].empty()) {
            ++pt.needles;
            hits += greedy.text.find(sc.needles[qi]) != std::string::npos;
          }
          prompt_tokens += p.size();
          reused += greedy.reused_tokens;
          repaired += greedy.repaired_tokens;
          // Teacher-forced on the references' answers: the same KV (its own continuation is cached now).
          CHORUS_RETURN_IF_ERROR(vs_ref.Add(*e, p, greedy, refs[ci][r][qi], c.max_tokens));
          if (c.f16_yardstick) CHORUS_RETURN_IF_ERROR(vs_f16.Add(*e, p, greedy, f16[ci][r][qi], c.max_tokens));
          ++pt.answers;
        }
      say(fmt::format("repair {:.2f}: case {}/{}", f, ci + 1, c.cases.size()));
    }
    pt.mean_kld = vs_ref.mean();
    pt.p99_kld = vs_ref.p99();
    pt.greedy_identical = vs_ref.agree();
    pt.mean_kld_f16 = vs_f16.mean();
    pt.greedy_identical_f16 = vs_f16.agree();
    pt.needle_exact = pt.needles ? double(hits) / pt.needles : 0;
    pt.mean_ttft_ms /= double(std::max<size_t>(1, ttfts));
    pt.reused_fraction = prompt_tokens ? double(reused) / double(prompt_tokens) : 0;
    pt.repaired_tokens = pt.answers ? double(repaired) / double(pt.answers) : 0;
    report.points.push_back(pt);
  }
  return report;
}

std::string ToJson(const SegmentEvalReport& r) {
  nlohmann::json j = {{"version", r.version}, {"kind", "segments"}, {"model", r.model}};
  for (const SegmentEvalPoint& p : r.points)
    j["points"].push_back({{"repair", p.repair},
                           {"answers", p.answers},
                           {"mean_kld", p.mean_kld},
                           {"p99_kld", p.p99_kld},
                           {"greedy_identical", p.greedy_identical},
                           {"mean_kld_f16", p.mean_kld_f16},
                           {"greedy_identical_f16", p.greedy_identical_f16},
                           {"needle_exact", p.needle_exact},
                           {"needles", p.needles},
                           {"mean_ttft_ms", p.mean_ttft_ms},
                           {"reused_fraction", p.reused_fraction},
                           {"repaired_tokens", p.repaired_tokens}});
  return j.dump(2);
}

}  // namespace chorus::eval
