// CoMix benchmark harness: staggered agents in one KvStore, batched teacher-forced decode, scoring
// against the full-KV run (see header).
#include "eval/comix_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <memory>
#include <sstream>

#include "chorus/kv_policy.h"       // KvPolicy (the config spec)
#include "eval/divergence.h"        // KlFromLogProbs
#include "kv/kv_batch.h"            // KvBatch
#include "kv/kv_store.h"            // KvStore
#include "model/forward.h"          // ForwardPass
#include "ops/elementwise.h"        // LogSumExp
#include "policy/comix_policy.h"    // ComixPolicy
#include "policy/uniform_policy.h"  // UniformPolicy
#include "util/timer.h"

namespace chorus::eval {

Result<ComixBenchConfig> ParseComixBenchConfig(const std::string& spec) {
  ComixBenchConfig c;
  c.name = spec;
  // The harness's own suffixes; the rest is a KvPolicy spec (uniform formats or the allocator).
  std::string policy_spec;
  std::stringstream parts(spec);
  for (std::string part; std::getline(parts, part, ':');) {
    if (part == "budget")
      c.fixed_budget = true;
    else if (part == "joint")
      c.joint = true;
    else
      policy_spec += (policy_spec.empty() ? "" : ":") + part;
  }
  CHORUS_ASSIGN_OR_RETURN(const KvPolicy policy, KvPolicy::Parse(policy_spec));
  if (const auto* u = std::get_if<KvPolicy::Uniform>(&policy.rule)) {
    if ((c.fixed_budget || c.joint) || u->sink_blocks >= 0)
      return Status::Error("'{}': :budget, :joint and :sN apply to comix-… configs only", spec);
    c.k = u->k, c.v = u->v;
    return c;
  }
  const auto* a = std::get_if<KvPolicy::Allocator>(&policy.rule);
  if (a == nullptr) return Status::Error("'{}': eval comix compares uniform formats and comix-… configs", spec);
  c.comix = true;
  c.family = FamilyName(a->family);
  c.avg_bits = a->avg_bits;
  c.worst_case = a->rank == KvPolicy::Rank::kBound;
  c.calibrated = a->rank == KvPolicy::Rank::kCalibrated;
  c.measured = a->rank == KvPolicy::Rank::kMeasured;
  c.min_k_bits = a->min_k_bits;
  c.tiers = a->tiers;
  return c;
}

namespace {

struct Agent {
  std::unique_ptr<KvSequence> seq;
  const std::vector<int32_t>* text = nullptr;
  size_t lp_row0 = 0;  // first row of this agent in the base log-probs
  int32_t next = 0;
  bool joined = false, done = false;
  std::vector<int32_t> answer;
};

size_t ArgMax(const float* x, size_t n) { return size_t(std::max_element(x, x + n) - x); }

}  // namespace

Result<ComixBenchResult> RunComixBench(const Model& model, const ComixBenchSetup& setup, const ComixBenchConfig& cfg,
                                       std::vector<float>* base_lp, bool is_base) {
  const ModelConfig& c = model.config();
  const size_t V = c.n_vocab, N = setup.texts.size();
  std::unique_ptr<PrecisionPolicy> policy;
  ComixPolicy* comix = nullptr;
  if (cfg.comix) {
    ComixOptions co{.n_layer = c.n_layer,
                    .n_head = c.n_head,
                    .n_head_kv = c.n_head_kv,
                    .head_dim = c.head_dim,
                    .family = cfg.family == "kivi" ? ComixFamily::kKivi : ComixFamily::kTq,
                    .budget_bytes = cfg.fixed_budget ? cfg.budget_bytes : 0,
                    .avg_bits = cfg.avg_bits,
                    .sink_blocks = setup.sink_blocks,
                    .worst_case = cfg.worst_case,
                    .split_kv = !cfg.joint,
                    .window = setup.window,
                    .threads = size_t(setup.threads),
                    .prefill_tokens = kBlockTokens,
                    .tiers = cfg.tiers,
                    .min_k_bits = cfg.min_k_bits,
                    .calibrated = cfg.calibrated,
                    .measured = cfg.sensitivity};
    CHORUS_RETURN_IF_ERROR(ComixPolicy::Validate(co));
    auto p = std::make_unique<ComixPolicy>(co);
    comix = p.get();
    policy = std::move(p);
  } else {
    CHORUS_ASSIGN_OR_RETURN(KvFormat k, ParseKvFormat(cfg.k));
    CHORUS_ASSIGN_OR_RETURN(KvFormat v, ParseKvFormat(cfg.v));
    policy = std::make_unique<UniformPolicy>(k, v, setup.sink_blocks);
  }
  // CoMix: one block per prefill micro-batch (every layer observed before most blocks are sealed).
  ForwardPass fwd(model, cfg.comix ? kBlockTokens : 512);
  KvStoreOptions so = fwd.StoreOptions();
  if (!is_base) so.window = setup.window;
  so.threads = size_t(setup.threads);
  KvStore store(so, policy.get());
  if (comix) comix->SetStore(&store);
  ThreadPool pool(setup.threads);
  ComixBenchResult r;
  r.config = cfg;
  std::vector<Agent> agents(N);
  size_t rows_total = 0;
  for (size_t i = 0; i < N; ++i) {
    if (setup.texts[i].size() <= setup.prefill) return Status::Error("agent {}'s text is shorter than the prefill", i);
    agents[i].text = &setup.texts[i];
    agents[i].lp_row0 = rows_total;
    rows_total += setup.texts[i].size() - setup.prefill;
  }
  if (is_base) base_lp->assign(rows_total * V, 0.0f);
  r.answers.resize(N);

  // One logits row of agent a: score it (excerpt) or take the greedy answer token.
  auto handle = [&](Agent& a, size_t idx, const float* row) {
    const size_t consumed = a.seq->size();
    const std::vector<int32_t>& text = *a.text;
    if (consumed < text.size()) {
      const float lse = float(LogSumExp(row, V));
      const size_t lp_row = a.lp_row0 + consumed - setup.prefill;
      float* b = base_lp->data() + lp_row * V;
      if (is_base) {
        for (size_t i = 0; i < V; ++i) b[i] = row[i] - lse;
      } else {
        r.kld.push_back(float(KlFromLogProbs(b, row, lse, V)));
        r.top1 += ArgMax(b, V) == ArgMax(row, V);
      }
      r.nll -= row[text[consumed]] - lse;
      ++r.scored;
      a.next = text[consumed];
      return;
    }
    a.next = int32_t(ArgMax(row, V));
    a.answer.push_back(a.next);
    if (a.answer.size() >= setup.answer_tokens) {
      a.done = true;
      r.answers[idx] = a.answer;
      if (comix) comix->RemoveUnit(a.seq->id());
      a.seq.reset();
    }
  };
  auto track_peak = [&] {
    const KvUsage u = store.Usage();
    if (u.total() > r.peak_bytes) r.peak_bytes = u.total(), r.peak_tokens = u.tokens;
  };

  std::vector<float> logits(std::max<size_t>(N, 1) * V);
  auto live_count = [&] {
    size_t n = 0;
    for (const Agent& a : agents) n += a.joined && !a.done;
    return n;
  };
  std::vector<int32_t> tokens;
  Timer decode_timer;
  for (size_t step = 0;; ++step) {
    bool all_done = true;
    for (size_t i = 0; i < N; ++i) {
      Agent& a = agents[i];
      if (!a.joined && step >= i * setup.join_every) {  // joins now, or retries from the queue
        const size_t cap = a.text->size() + setup.answer_tokens;
        a.seq = store.NewSequence(cap);
        if (comix) {
          if (Status st = comix->AddUnit(a.seq->id(), cap, 0, 1.0, fmt::format("agent {}", i + 1)); !st.ok()) {
            if (step == i * setup.join_every) ++r.queued;  // refused: waits until others finish
            a.seq.reset();
            all_done = false;
            if (live_count() == 0) return st;  // nobody will ever free bytes
            continue;
          }
        }
        a.joined = true;
        std::span<const int32_t> pre(a.text->data(), setup.prefill);
        CHORUS_RETURN_IF_ERROR(fwd.Run(pre, *a.seq, pool, LogitsFor::kLast, logits.data()));
        handle(a, i, logits.data());
        track_peak();
        if (comix && r.heat_map.empty() && live_count() == std::min<size_t>(N, 3)) r.heat_map = comix->HeatMap();
      }
      all_done = all_done && a.joined && a.done;
    }
    if (all_done) break;
    KvBatch batch(store);
    tokens.clear();
    std::vector<size_t> live;
    for (size_t i = 0; i < N; ++i)
      if (agents[i].joined && !agents[i].done) {
        batch.Add(agents[i].seq.get(), 1);
        tokens.push_back(agents[i].next);
        live.push_back(i);
      }
    if (live.empty()) continue;
    decode_timer.Reset();
    CHORUS_RETURN_IF_ERROR(fwd.Run(tokens, batch, pool, LogitsFor::kAll, logits.data()));
    r.decode_seconds += decode_timer.Seconds();
    r.decode_tokens += live.size();
    track_peak();
    for (size_t j = 0; j < live.size(); ++j) handle(agents[live[j]], live[j], logits.data() + j * V);
  }
  if (comix) {
    const auto& ev = comix->events();
    r.reallocs = ev.size();
    for (const ComixEvent& e : ev) {
      r.realloc_mean_us += e.micros;
      r.realloc_max_us = std::max(r.realloc_max_us, e.micros);
      if (e.why.rfind("join", 0) == 0 || e.why.rfind("finish", 0) == 0 || r.events.size() < 4)
        r.events.push_back(
            fmt::format("{:<34} units {:>2}  avg bits K {:.2f} V {:.2f}  future {} / {} B  {} changed  "
                        "{:.0f} us",
                        e.why, e.units, e.avg_k_bits, e.avg_v_bits, e.projected, e.capacity, e.changed, e.micros));
    }
    if (!ev.empty()) r.realloc_mean_us /= double(ev.size());
  }
  return r;
}

}  // namespace chorus::eval
