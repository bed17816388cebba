// StateSeries and the /v1/state JSON (see dashboard.h).
#include "dashboard.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace chorus::server {

using json = nlohmann::json;

const char* PhaseName(AgentPhase p) {
  switch (p) {
    case AgentPhase::kWaiting: return "queued";
    case AgentPhase::kPrefill: return "prefill";
    case AgentPhase::kDecode: return "decode";
    case AgentPhase::kDone: return "done";
  }
  return "?";
}

void StateSeries::AddTtft(double s) {
  std::lock_guard lock(mu_);
  ttft_sum_ += s;
  ttft_max_ = std::max(ttft_max_, s);
  ttft_n_++;
}

bool StateSeries::MaybeSample(double now_s, const Counters& c) {
  std::lock_guard lock(mu_);
  if (!started_) {  // the first call sets the origin of the rates
    started_ = true;
    last_t_ = now_s;
    last_ = c;
    return false;
  }
  const double dt = now_s - last_t_;
  if (dt < interval_s_) return false;
  Point p{.t = now_s,
          .decode_tok_s = double(c.generated - std::min(c.generated, last_.generated)) / dt,
          .prefill_tok_s = double(c.prefilled - std::min(c.prefilled, last_.prefilled)) / dt,
          .running = c.running, .waiting = c.waiting};
  if (ttft_n_) p.ttft_mean = ttft_sum_ / double(ttft_n_), p.ttft_max = ttft_max_;
  ttft_sum_ = ttft_max_ = 0;
  ttft_n_ = 0;
  points_.push_back(p);
  while (points_.size() > keep_) points_.pop_front();
  last_t_ = now_s;
  last_ = c;
  return true;
}

json StateSeries::Json(double now_s) const {
  std::lock_guard lock(mu_);
  json t = json::array(), dec = json::array(), pre = json::array(), run = json::array(), wait = json::array(),
       tm = json::array(), tx = json::array();
  for (const Point& p : points_) {
    t.push_back(std::round((p.t - now_s) * 10) / 10);
    dec.push_back(std::round(p.decode_tok_s * 100) / 100);
    pre.push_back(std::round(p.prefill_tok_s * 100) / 100);
    run.push_back(p.running);
    wait.push_back(p.waiting);
    tm.push_back(p.ttft_mean < 0 ? json(nullptr) : json(p.ttft_mean));
    tx.push_back(p.ttft_max < 0 ? json(nullptr) : json(p.ttft_max));
  }
  return {{"interval_s", interval_s_}, {"keep", keep_}, {"t", t}, {"decode_tok_s", dec}, {"prefill_tok_s", pre},
          {"running", run}, {"waiting", wait}, {"ttft_mean_s", tm}, {"ttft_max_s", tx}};
}

json StateJson(const EngineSnapshot& snap, const std::map<AgentId, RequestInfo>& infos, const json& series,
               const StateInfo& info) {
  const EngineStats& st = snap.stats;
  json j;
  j["server"] = {{"model", info.model_id},
                 {"fingerprint", info.fingerprint},
                 {"policy", ToString(snap.policy.kind())},
                 {"policy_spec", FormatSpec(snap.policy)},
                 {"n_layer", snap.n_layer},
                 {"uptime_s", info.uptime_s},
                 {"sampled_at", info.sampled_at_unix},
                 {"max_running", info.max_running}};
  // The same numbers as /metrics chorus_kv_bytes{kind} (a partition of held_bytes) + free.
  j["budget"] = {{"budget_bytes", st.budget_bytes}, {"held_bytes", st.total_bytes},
                 {"high_water_bytes", st.high_water_bytes}, {"pinned_bytes", st.pinned_bytes},
                 {"cached_bytes", st.cached_bytes}, {"in_use_bytes", st.in_use_bytes},
                 {"overhead_bytes", st.overhead_bytes}, {"free_bytes", st.free_bytes},
                 {"shared_bytes", st.shared_bytes}};
  j["counts"] = {{"running", st.prefilling + st.decoding},
                 {"prefilling", st.prefilling},
                 {"decoding", st.decoding},
                 {"waiting", st.waiting},
                 {"contexts", 0},
                 {"cached_blocks", st.cached_blocks},
                 {"generated_tokens", st.generated_tokens},
                 {"prefix_hit_tokens", st.prefix_hit_tokens},
                 {"segment_reused_tokens", st.segment_reused_tokens},
                 {"segment_repaired_tokens", st.segment_repaired_tokens},
                 {"prefix_queried_tokens", st.prefix_queried_tokens}};
  size_t contexts = 0;
  for (const SharedRunSnapshot& r : snap.runs) contexts += r.kind != "prefix";
  j["counts"]["contexts"] = contexts;

  json reqs = json::array();
  size_t fp16_tokens = 0, agents = 0;
  for (const RequestSnapshot& r : snap.requests) {
    json o{{"engine_id", r.id},
           {"state", PhaseName(r.phase)},
           {"prompt_tokens", r.prompt_tokens},
           {"cached_tokens", r.cached_tokens},
           {"tokens", r.generated_tokens},
           {"private_bytes", r.private_bytes},
           {"projected_private_bytes", r.projected_private_bytes},
           {"reused_tokens", r.reused_tokens},
           {"repaired_tokens", r.repaired_tokens}};
    o["segments"] = json::array();
    for (const RequestSnapshot::Segment& g : r.segments)
      o["segments"].push_back({{"at", g.at}, {"tokens", g.tokens}, {"shift", g.shift}});
    auto it = infos.find(r.id);
    const RequestInfo none{.id = fmt::format("engine-{}", r.id)};
    const RequestInfo& ri = it == infos.end() ? none : it->second;
    o["id"] = ri.id;
    o["tenant"] = ri.tenant;
    o["preview"] = ri.preview;
    o["age_s"] = std::round(ri.age_s * 10) / 10;
    o["tok_s"] = std::round(ri.tok_s * 100) / 100;
    reqs.push_back(std::move(o));
    if (r.phase == AgentPhase::kPrefill || r.phase == AgentPhase::kDecode) fp16_tokens += r.context_tokens, ++agents;
  }
  j["requests"] = std::move(reqs);
  // What the running requests would hold if each kept its own fp16 KV (the baseline of
  // docs/results/serve.md), beside what chorus holds for everything.
  const size_t copies = fp16_tokens * snap.fp16_bytes_per_token;
  j["fp16"] = {{"bytes_per_token", snap.fp16_bytes_per_token}, {"tokens", fp16_tokens}, {"agents", agents},
               {"copies_bytes", copies}, {"per_agent_bytes", agents ? copies / agents : 0},
               {"ratio", st.total_bytes ? double(copies) / double(st.total_bytes) : 0.0}};

  json runs = json::array();
  for (const SharedRunSnapshot& r : snap.runs) {
    json o{{"kind", r.kind}, {"context", r.context ? json(fmt::format("ctx-{}", r.context)) : json(nullptr)},
           {"first_token", r.first_token}, {"tokens", r.tokens}, {"bytes", r.bytes}, {"readers", r.readers},
           {"hits", r.hits}, {"hit_tokens", r.hit_tokens}, {"preview", r.preview}};
    if (r.kind == "cocktail")
      o["map"] = {{"kind", "cocktail"}, {"chunks", r.chunk_map},
                  {"legend", {{"S", "sink (f16)"}, {"F", "fp16"}, {"4", "int4 (kivi4)"}, {"2", "int2 (kivi2)"}}}};
    else if (r.has_map)
      o["map"] = {{"kind", "blocks"}, {"k", r.k_map}, {"v", r.v_map}};
    else
      o["map"] = nullptr;
    runs.push_back(std::move(o));
  }
  j["runs"] = std::move(runs);
  j["runs_total"] = snap.runs_total;
  json formats = json::array();
  for (const KvFormatLegend& f : snap.formats)
    formats.push_back({{"code", std::string(1, f.code)}, {"name", f.name}, {"k_bits", std::round(f.k_bits * 1000) / 1000},
                       {"v_bits", std::round(f.v_bits * 1000) / 1000}});
  j["formats"] = std::move(formats);
  j["series"] = series;
  return j;
}

json StateFor(const json& state, const std::string& tenant, const std::set<std::string>& contexts) {
  json j = state;
  json reqs = json::array();
  for (const json& r : state["requests"])
    if (r.value("tenant", "") == tenant) reqs.push_back(r);
  j["requests"] = std::move(reqs);
  json runs = json::array();
  for (const json& r : state["runs"])
    if (r["context"].is_string() && contexts.count(r["context"].get<std::string>())) runs.push_back(r);
  j["counts"]["contexts"] = runs.size();
  j["runs_total"] = runs.size();
  j["runs"] = std::move(runs);
  return j;
}

}  // namespace chorus::server
