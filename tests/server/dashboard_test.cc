// The dashboard's JSON (GET /v1/state) built from a real Engine::Snapshot of a tiny random-weight
// model, and the time series behind its charts. Catches: a budget split that does not add up to
// what the store holds or differs from what /metrics reports (EngineStats), shared runs whose
// bytes do not add up to chorus_kv_shared_bytes, readers counted wrong (a shared document read by
// two agents, a prefix read by two requests), precision maps of the wrong shape or with codes the
// legend does not name, a Cocktail context whose chunk map is not the engine's, the fp16-copies
// figure off its definition, user text altered on its way into JSON, and series rates computed
// from the wrong interval.
#include "server/dashboard.h"

#include <gtest/gtest.h>
#include <unistd.h>  // getpid

#include <cstdio>
#include <set>
#include <string>

#include "../model/synthetic_model.h"

namespace chorus::server {
namespace {

using json = nlohmann::json;

std::unique_ptr<Engine> OpenTiny(EngineOptions o = {}) {
  const testing::SyntheticSpec s = testing::TinySpec("dash");
  static int serial = 0;  // unique per process and call (ctest runs the cases as parallel processes)
  const std::string path = std::string(::testing::TempDir()) + "/dashboard_test." + std::to_string(getpid()) + "." +
                           std::to_string(serial++) + ".gguf";
  EXPECT_TRUE(testing::SyntheticModel(s).WriteFile(path).ok());
  o.model_path = path;
  o.threads = 2;
  o.n_ctx = 512;
  if (o.kv_budget_bytes == 0) o.kv_budget_bytes = 64 << 20;
  auto e = Engine::Open(o);
  std::remove(path.c_str());
  EXPECT_TRUE(e.ok()) << e.status().message();
  return e.ok() ? std::move(e).value() : nullptr;
}

std::vector<int32_t> Prefix(int n, int salt) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(3 + (i * 37 + salt) % 290);
  return p;
}

json State(Engine& e, const std::map<AgentId, RequestInfo>& infos = {}) {
  StateSeries series;
  return StateJson(e.Snapshot(), infos, series.Json(0), {.model_id = "tiny"});
}

// The invariants every state document keeps, whatever runs.
void CheckInvariants(const json& j, const EngineStats& st) {
  const json& b = j["budget"];
  EXPECT_EQ(b["pinned_bytes"].get<size_t>() + b["cached_bytes"].get<size_t>() + b["in_use_bytes"].get<size_t>() +
                b["overhead_bytes"].get<size_t>(),
            b["held_bytes"].get<size_t>());
  EXPECT_EQ(b["held_bytes"].get<size_t>() + b["free_bytes"].get<size_t>(), b["budget_bytes"].get<size_t>());
  // The same numbers /metrics publishes (EngineStats taken at the same instant).
  EXPECT_EQ(b["held_bytes"].get<size_t>(), st.total_bytes);
  EXPECT_EQ(b["in_use_bytes"].get<size_t>(), st.in_use_bytes);
  EXPECT_EQ(b["shared_bytes"].get<size_t>(), st.shared_bytes);
  EXPECT_EQ(j["counts"]["running"].get<size_t>(), st.prefilling + st.decoding);
  EXPECT_EQ(j["requests"].size(), st.prefilling + st.decoding + st.waiting);
  // Every run listed (none cut here): their bytes are the shared bytes.
  ASSERT_EQ(j["runs_total"].get<size_t>(), j["runs"].size());
  size_t run_bytes = 0;
  std::set<std::string> codes;
  for (const json& f : j["formats"]) {
    codes.insert(f["code"].get<std::string>());
    EXPECT_GT(f["k_bits"].get<double>(), 1.0) << f.dump();
    EXPECT_LE(f["k_bits"].get<double>(), 17.0) << f.dump();
  }
  const size_t L = j["server"]["n_layer"].get<size_t>();
  for (const json& r : j["runs"]) {
    run_bytes += r["bytes"].get<size_t>();
    EXPECT_EQ(r["tokens"].get<size_t>() % 32, 0u);
    if (r["map"].is_null() || r["map"]["kind"] != "blocks") continue;
    for (const char* side : {"k", "v"}) {
      ASSERT_EQ(r["map"][side].size(), L) << r.dump();
      for (const json& line : r["map"][side]) {
        const std::string s = line.get<std::string>();
        EXPECT_EQ(s.size(), r["tokens"].get<size_t>() / 32);
        for (char c : s) EXPECT_TRUE(c == '.' || codes.count(std::string(1, c))) << "code " << c << " not in the legend";
      }
    }
  }
  EXPECT_EQ(run_bytes, st.shared_bytes);
  // fp16 copies: every running request's tokens at fp16, all layers.
  size_t tokens = 0;
  for (const json& r : j["requests"])
    if (r["state"] == "prefill" || r["state"] == "decode") tokens += r["prompt_tokens"].get<size_t>() + r["tokens"].get<size_t>();
  EXPECT_EQ(j["fp16"]["tokens"].get<size_t>(), tokens);
  EXPECT_EQ(j["fp16"]["copies_bytes"].get<size_t>(), tokens * j["fp16"]["bytes_per_token"].get<size_t>());
}

TEST(Dashboard, SharedContextReadByTwoAgents) {
  auto e = OpenTiny();
  ASSERT_NE(e, nullptr);
  CheckInvariants(State(*e), e->Stats());  // empty engine
  EXPECT_TRUE(State(*e)["requests"].empty());
  std::string doc;
  for (int i = 0; i < 40; ++i) doc += "word" + std::to_string(i) + " ";
  auto ctx = e->Share(doc);
  ASSERT_TRUE(ctx.ok()) << ctx.status().message();
  const size_t doc_tokens = e->ContextTokens(*ctx);
  ASSERT_GE(doc_tokens, 64u) << "the test wants at least two full blocks";
  auto a = e->Spawn(*ctx, " question one", {.max_tokens = 40, .ignore_eog = true});
  auto b = e->Spawn(*ctx, " question two", {.max_tokens = 40, .ignore_eog = true});
  ASSERT_TRUE(a.ok() && b.ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(e->Step().ok());
  const std::string nasty = "<script>alert(1)</script> & \"quotes\" \xE2\x9C\x93";
  const json j = State(*e, {{*a, {.id = "chatcmpl-1", .preview = nasty, .tok_s = 12.5}}});
  CheckInvariants(j, e->Stats());
  ASSERT_EQ(j["requests"].size(), 2u);
  for (const json& r : j["requests"]) {
    EXPECT_EQ(r["state"], "decode");
    EXPECT_GT(r["private_bytes"].get<size_t>(), 0u);
    EXPECT_LE(r["private_bytes"].get<size_t>(), r["projected_private_bytes"].get<size_t>());
    EXPECT_EQ(r["cached_tokens"].get<size_t>(), doc_tokens / 32 * 32);
  }
  // The HTTP side's view joins by engine id; user text is carried verbatim (escaping is the page's
  // job, and JSON round-trips it).
  const json& ra = j["requests"][0]["engine_id"] == *a ? j["requests"][0] : j["requests"][1];
  EXPECT_EQ(ra["id"], "chatcmpl-1");
  EXPECT_EQ(json::parse(j.dump())["requests"], j["requests"]);
  EXPECT_EQ(ra["preview"].get<std::string>(), nasty);
  EXPECT_DOUBLE_EQ(ra["tok_s"].get<double>(), 12.5);
  // The document: one context run of its full blocks, read by both agents, borrowed twice.
  ASSERT_GE(j["runs"].size(), 1u);
  const json& doc_run = j["runs"][0];
  EXPECT_EQ(doc_run["kind"], "context");
  EXPECT_EQ(doc_run["context"], "ctx-" + std::to_string(*ctx));
  EXPECT_EQ(doc_run["tokens"].get<size_t>(), doc_tokens / 32 * 32);
  EXPECT_EQ(doc_run["bytes"].get<size_t>(), e->ContextBytes(*ctx));
  EXPECT_EQ(doc_run["readers"].get<size_t>(), 2u);
  EXPECT_EQ(doc_run["hits"].get<size_t>(), 2u);
  EXPECT_EQ(j["counts"]["contexts"].get<size_t>(), 1u);
  // Default formats: the sink block f16, the rest kivi4 (K) / tq3 (V), on every layer.
  std::map<std::string, std::string> code;
  for (const json& f : j["formats"]) code[f["name"]] = f["code"];
  for (const json& line : doc_run["map"]["k"]) {
    const std::string s = line.get<std::string>();
    EXPECT_EQ(s[0], code["f16"][0]);
    for (size_t i = 1; i < s.size(); ++i) EXPECT_EQ(s[i], code["kivi4"][0]);
  }
  for (const json& line : doc_run["map"]["v"]) EXPECT_EQ(line.get<std::string>().back(), code["tq3"][0]);
  // fp16 copies of two agents' sequences exceed what chorus holds for them.
  EXPECT_EQ(j["fp16"]["agents"].get<size_t>(), 2u);
  EXPECT_EQ(j["fp16"]["bytes_per_token"].get<size_t>(), e->Fp16Bytes(1));
  // Both finish: no requests, the document still pinned, no readers.
  e->Cancel(*a);
  e->Cancel(*b);
  ASSERT_TRUE(e->Step().ok());
  e->Forget(*a);
  e->Forget(*b);
  const json k = State(*e);
  CheckInvariants(k, e->Stats());
  EXPECT_TRUE(k["requests"].empty());
  EXPECT_EQ(k["runs"][0]["readers"].get<size_t>(), 0u);
}

TEST(Dashboard, PrefixCacheRunsAndTheirReaders) {
  auto e = OpenTiny();
  ASSERT_NE(e, nullptr);
  // Two requests with the same 100-token prefix, then their own tails: the first computes the
  // prefix, the second (admitted once those blocks are cached) borrows its 3 full blocks.
  std::vector<int32_t> p1 = Prefix(100, 0), p2 = Prefix(100, 0);
  for (int i = 0; i < 40; ++i) p1.push_back(5 + i), p2.push_back(200 + i);
  auto r1 = e->Submit(p1, {.max_tokens = 30, .ignore_eog = true});
  ASSERT_TRUE(r1.ok());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(e->Step().ok());
  auto r2 = e->Submit(p2, {.max_tokens = 30, .ignore_eog = true});
  ASSERT_TRUE(r2.ok());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(e->Step().ok());
  ASSERT_EQ(e->running(), 2u);
  const json j = State(*e);
  CheckInvariants(j, e->Stats());
  // The shared prefix: 3 blocks from token 0, read by both; each one's own prompt block after it.
  const json& shared = j["runs"][0];
  EXPECT_EQ(shared["kind"], "prefix");
  EXPECT_EQ(shared["first_token"].get<size_t>(), 0u);
  EXPECT_EQ(shared["tokens"].get<size_t>(), 96u);
  EXPECT_EQ(shared["readers"].get<size_t>(), 2u);
  EXPECT_EQ(shared["hits"].get<size_t>(), 1u);  // borrowed once (by the second request)
  EXPECT_EQ(shared["hit_tokens"].get<size_t>(), 96u);
  EXPECT_FALSE(shared["preview"].get<std::string>().empty());
  size_t tails = 0;
  for (const json& r : j["runs"])
    if (r["first_token"].get<size_t>() == 96) {
      ++tails;
      EXPECT_EQ(r["readers"].get<size_t>(), 1u);
    }
  EXPECT_EQ(tails, 2u);
}

TEST(Dashboard, CocktailContextShowsTheEnginesChunkMap) {
  auto e = OpenTiny({.policy = KvPolicy::Parse("cocktail-paper").value(), .encoder_path = kHiddenStateEncoder});
  ASSERT_NE(e, nullptr);
  std::string doc;
  for (int i = 0; i < 14; ++i) doc += "fact" + std::to_string(i) + " is here. ";
  auto ctx = e->ShareFor(doc, {"where is fact 7?"});
  ASSERT_TRUE(ctx.ok()) << ctx.status().message();
  auto a = e->Spawn(*ctx, " answer:", {.max_tokens = 4, .ignore_eog = true});
  ASSERT_TRUE(a.ok());
  const json j = State(*e);
  CheckInvariants(j, e->Stats());
  ASSERT_EQ(j["runs"].size(), 1u);
  const json& r = j["runs"][0];
  EXPECT_EQ(r["kind"], "cocktail");
  EXPECT_EQ(r["readers"].get<size_t>(), 1u);
  EXPECT_EQ(r["map"]["kind"], "cocktail");
  EXPECT_EQ(r["map"]["chunks"].get<std::string>(), e->chunk_map(*ctx)->blocks);
}

TEST(Dashboard, ComixMapsUseLegendCodes) {
  auto e = OpenTiny({.policy = KvPolicy::Parse("comix").value(), .kv_budget_bytes = 8 << 20});
  ASSERT_NE(e, nullptr);
  std::string doc;
  for (int i = 0; i < 60; ++i) doc += "w" + std::to_string(i) + " ";
  auto ctx = e->Share(doc, ShareOptions{.readers = 2, .reader_tokens = 40});
  ASSERT_TRUE(ctx.ok()) << ctx.status().message();
  auto a = e->Spawn(*ctx, " q", {.max_tokens = 8, .ignore_eog = true});
  ASSERT_TRUE(a.ok()) << a.status().message();
  const json j = State(*e);
  CheckInvariants(j, e->Stats());  // every code in the maps is in the legend, shapes n_layer x blocks
  EXPECT_EQ(j["server"]["policy"], "comix");
  EXPECT_EQ(j["runs"][0]["kind"], "context");
  EXPECT_EQ(j["runs"][0]["map"]["k"].size(), 2u);
}

TEST(DashboardSeries, RatesPerIntervalAndTtftOfItsFirstTokens) {
  StateSeries s(/*keep=*/3, /*interval_s=*/1.0);
  EXPECT_FALSE(s.MaybeSample(10.0, {.generated = 100, .prefilled = 1000}));  // the origin
  EXPECT_FALSE(s.MaybeSample(10.5, {.generated = 105}));                      // too soon
  s.AddTtft(0.2);
  s.AddTtft(0.6);
  ASSERT_TRUE(s.MaybeSample(12.0, {.generated = 120, .prefilled = 1500, .running = 3, .waiting = 1}));
  json j = s.Json(12.0);
  ASSERT_EQ(j["t"].size(), 1u);
  EXPECT_DOUBLE_EQ(j["t"][0].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(j["decode_tok_s"][0].get<double>(), 10.0);   // 20 tokens over 2 s
  EXPECT_DOUBLE_EQ(j["prefill_tok_s"][0].get<double>(), 250.0); // 500 over 2 s
  EXPECT_DOUBLE_EQ(j["ttft_mean_s"][0].get<double>(), 0.4);
  EXPECT_DOUBLE_EQ(j["ttft_max_s"][0].get<double>(), 0.6);
  EXPECT_EQ(j["running"][0].get<size_t>(), 3u);
  // No first token in the next interval: null, not a stale value; only `keep` points stay.
  for (double t : {13.0, 14.0, 15.0}) ASSERT_TRUE(s.MaybeSample(t, {.generated = 120, .prefilled = 1500}));
  j = s.Json(15.0);
  ASSERT_EQ(j["t"].size(), 3u);
  EXPECT_DOUBLE_EQ(j["t"][0].get<double>(), -2.0);
  EXPECT_TRUE(j["ttft_mean_s"][2].is_null());
  EXPECT_DOUBLE_EQ(j["decode_tok_s"][2].get<double>(), 0.0);
}

}  // namespace
}  // namespace chorus::server
