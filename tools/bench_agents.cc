// `chorus bench --agents 1,4,8,15`: N agents over one shared document, tg new tokens each, decoded in
// one batch per step; aggregate tokens/s beside llama.cpp (one prefill, the sequence copied to the
// others, batched decode: scripts/ref/llama_agents_bench.py) with f16 / q8_0 / q4_0 KV, in one run.
#include <cstdio>
#include <sstream>

#include "chorus/engine.h"
#include "tools/bench_agents.h"
#include "util/timer.h"

namespace chorus::cli {
namespace {

Result<nlohmann::json> Peer(const AgentsBenchArgs& a, const std::string& kv_type) {
  std::ostringstream cmd;
  cmd << a.python << " scripts/ref/llama_agents_bench.py -m '" << a.model << "' --doc-tokens " << a.doc_tokens
      << " --tg " << a.tg << " --threads " << a.threads << " --kv-type " << kv_type << " --agents ";
  for (size_t i = 0; i < a.agents.size(); ++i) cmd << (i ? "," : "") << a.agents[i];
  cmd << " --json 2>/dev/null";
  FILE* p = popen(cmd.str().c_str(), "r");
  if (!p) return Status::Error("cannot start: {}", cmd.str());
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  if (pclose(p) != 0) return Status::Error("llama.cpp peer failed: {}", cmd.str());
  try {
    return nlohmann::json::parse(out.substr(out.find('{')));
  } catch (const std::exception& e) {
    return Status::Error("cannot parse the peer's output: {}", e.what());
  }
}

}  // namespace

int RunAgentsBench(const std::string& doc_text, const AgentsBenchArgs& a) {
  nlohmann::json report = {{"doc_tokens", a.doc_tokens}, {"tg", a.tg}, {"threads", a.threads}};
  std::printf("aggregate decode tokens/s, N agents x %d new tokens over one %zu-token shared document, %d threads\n",
              a.tg, a.doc_tokens, a.threads);
  std::printf("%-8s", "agents");
  for (const auto& kv : a.kv) std::printf(" %18s", ("chorus " + kv).c_str());
  for (const auto& t : a.peer_kv) std::printf(" %16s", ("llama.cpp " + t).c_str());
  std::printf("\n");
  std::map<std::string, nlohmann::json> peers;
  for (const auto& t : a.peer_kv) {
    auto p = Peer(a, t);
    if (p.ok()) peers[t] = p.value();
    else report["llama_cpp_error"][t] = p.status().message();
  }
  for (size_t n : a.agents) {
    std::printf("%-8zu", n);
    for (const auto& kv : a.kv) {
      const size_t slash = kv.find('/');
      if (slash == std::string::npos) return Fail(Status::Error("--kv entry '{}' must be K/V", kv));
      EngineOptions eo{.model_path = a.model, .threads = a.threads, .n_ctx = a.doc_tokens + a.tg + 64,
                       .shared_k = kv.substr(0, slash), .shared_v = kv.substr(slash + 1),
                       .private_k = kv.substr(0, slash), .private_v = kv.substr(slash + 1)};
      auto e = Engine::Open(eo);
      if (!e.ok()) return Fail(e.status());
      Timer t_prefill;
      auto ctx = e.value()->Share(doc_text);
      if (!ctx.ok()) return Fail(ctx.status());
      const double prefill_s = t_prefill.Seconds();
      for (size_t i = 0; i < n; ++i) {
        auto id = e.value()->Spawn(*ctx, "\nQ" + std::to_string(i) + ":",
                                   {.max_tokens = a.tg, .ignore_eog = true});
        if (!id.ok()) return Fail(id.status());
      }
      Timer t;
      size_t steps = 0;
      while (e.value()->running()) {
        if (Status s = e.value()->Step(); !s.ok()) return Fail(s);
        ++steps;
      }
      // The first token of each agent comes from its prompt's prefill; steps produce the rest.
      const double tps = double(n) * steps / t.Seconds();
      report["rows"][std::to_string(n)]["chorus"][kv] = {{"decode_tokens_per_s", tps}, {"prefill_seconds", prefill_s},
                                                         {"shared_bytes", e.value()->KvReport().shared_bytes}};
      std::printf(" %18.1f", tps);
      std::fflush(stdout);
    }
    for (const auto& t : a.peer_kv) {
      double v = 0;
      if (peers.count(t) && peers[t]["agents"].contains(std::to_string(n)))
        v = peers[t]["agents"][std::to_string(n)].value("decode_tokens_per_s", 0.0);
      report["rows"][std::to_string(n)]["llama_cpp"][t] = v;
      if (v > 0) std::printf(" %16.1f", v);
      else std::printf(" %16s", "n/a");
    }
    std::printf("\n");
  }
  for (auto& [t, p] : peers) report["llama_cpp_raw"][t] = p;
  if (a.json) PrintJson(report);
  return 0;
}

}  // namespace chorus::cli
