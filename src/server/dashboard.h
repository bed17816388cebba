// The dashboard's data: GET /v1/state (a JSON picture of the engine, documented in
// docs/SERVING.md "The dashboard") and the time series behind its charts.
// The engine loop samples the series at most once a second from counters it already keeps (no
// engine walk); an Engine::Snapshot is taken on the loop only when a client asks for the state,
// at most once a second (HttpServer caches the answer). StateJson is a pure function of what was
// sampled, so it is unit-tested on its own (tests/server/dashboard_test.cc).
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chorus/engine.h"

namespace chorus::server {

// The loop's view of a request beside the engine's (what only the server knows).
struct RequestInfo {
  std::string id;       // the response id the client sees (chatcmpl-7)
  std::string tenant;   // its API key's tenant ("": the engine API's)
  std::string preview;  // the start of the client's last message or prompt (user text: the page escapes it)
  double age_s = 0;     // since it arrived
  double tok_s = 0;     // decode rate since its first token (0 before its second token)
};

// One-second samples over the last minutes: decode and prefill tokens per second, running and
// waiting requests, time to first token (mean and max of the requests whose first token came in
// the interval).
class StateSeries {
 public:
  struct Counters {
    uint64_t generated = 0, prefilled = 0;
    size_t running = 0, waiting = 0;
  };
  explicit StateSeries(size_t keep = 300, double interval_s = 1.0) : keep_(keep), interval_s_(interval_s) {}
  // Loop thread: a first token's latency (seconds).
  void AddTtft(double s);
  // Loop thread: records a point if interval_s passed since the last one (true then).
  bool MaybeSample(double now_s, const Counters& c);
  // Any thread: the points as JSON, times as seconds before now_s (negative).
  nlohmann::json Json(double now_s) const;
  double interval_s() const { return interval_s_; }

 private:
  struct Point {
    double t = 0, decode_tok_s = 0, prefill_tok_s = 0;
    size_t running = 0, waiting = 0;
    double ttft_mean = -1, ttft_max = -1;  // -1: no first token in the interval
  };
  const size_t keep_;
  const double interval_s_;
  mutable std::mutex mu_;
  std::deque<Point> points_;
  bool started_ = false;
  double last_t_ = 0;
  Counters last_;
  double ttft_sum_ = 0, ttft_max_ = 0;  // since the last point (loop thread, under mu_)
  size_t ttft_n_ = 0;
};

struct StateInfo {
  std::string model_id, fingerprint;
  double uptime_s = 0;
  double sampled_at_unix = 0;  // when the snapshot was taken (seconds since the epoch)
  size_t max_running = 0;
};

// The /v1/state document: {"server", "budget", "fp16", "requests", "runs", "formats", "series"}.
// `requests` pairs each RequestSnapshot with the RequestInfo of the same engine id (absent: the
// request came through the engine API, not HTTP).
nlohmann::json StateJson(const EngineSnapshot& snap, const std::map<AgentId, RequestInfo>& requests,
                         const nlohmann::json& series, const StateInfo& info);

// What one tenant sees of a StateJson document: its own requests, the contexts in `contexts`
// ("ctx-N": its own and public ones), no prefix runs (their previews are other prompts' text);
// the server's totals, budget and series stay (they name no request).
nlohmann::json StateFor(const nlohmann::json& state, const std::string& tenant, const std::set<std::string>& contexts);

const char* PhaseName(AgentPhase p);

}  // namespace chorus::server
