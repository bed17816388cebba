// Prometheus exposition: HELP/TYPE per metric, cumulative buckets ending at +Inf = _count, escaped
// labels; the quantile estimate from buckets.
#include "server/metrics.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <sstream>

namespace chorus::server {
namespace {

TEST(Metrics, HistogramBucketsAreCumulative) {
  PromText t;
  Histogram h({0.1, 1});
  for (double v : {0.05, 0.1, 0.5, 2.0}) h.Observe(v);
  t.Histo("x_seconds", "help", h);
  const std::string s = t.str();
  EXPECT_NE(s.find("# TYPE x_seconds histogram\n"), std::string::npos);
  EXPECT_NE(s.find("x_seconds_bucket{le=\"0.1\"} 2\n"), std::string::npos) << s;  // 0.05 and 0.1 (le is inclusive)
  EXPECT_NE(s.find("x_seconds_bucket{le=\"1\"} 3\n"), std::string::npos) << s;
  EXPECT_NE(s.find("x_seconds_bucket{le=\"+Inf\"} 4\n"), std::string::npos) << s;
  EXPECT_NE(s.find("x_seconds_count 4\n"), std::string::npos) << s;
  EXPECT_NE(s.find("x_seconds_sum 2.65\n"), std::string::npos) << s;
}

TEST(Metrics, Quantile) {
  Histogram h({1, 2, 3, 4});
  for (int i = 0; i < 100; ++i) h.Observe(i < 50 ? 0.5 : 3.5);
  EXPECT_LE(h.Quantile(0.5), 1.0);
  EXPECT_GT(h.Quantile(0.99), 3.0);
  EXPECT_LE(h.Quantile(0.99), 4.0);
  EXPECT_EQ(Histogram({1}).Quantile(0.5), 0.0);
}

TEST(Metrics, LabelsAreEscaped) {
  EXPECT_EQ(PromText::Label("k", "a\"b\\c\nd"), "k=\"a\\\"b\\\\c\\nd\"");
}

TEST(Metrics, EveryServerMetricHasHelpAndType) {
  ServerMetrics m;
  m.CountRequest("/v1/chat/completions", 200);
  m.CountRequest("/v1/chat/completions", 400);
  m.ObserveTtft(0.2);
  m.Publish({.running = 3, .waiting = 1, .kv_pinned = 10, .kv_budget = 100, .prefix_hit_tokens = 7});
  const std::string s = m.Render();
  EXPECT_NE(s.find("chorus_requests_running 3\n"), std::string::npos);
  EXPECT_NE(s.find("chorus_kv_bytes{kind=\"pinned\"} 10\n"), std::string::npos);
  EXPECT_NE(s.find("chorus_http_requests_total{endpoint=\"/v1/chat/completions\",code=\"400\"} 1\n"), std::string::npos);
  EXPECT_NE(s.find("chorus_prefix_cache_hits_tokens_total 7\n"), std::string::npos);
  // every sample line's metric has a TYPE line before it
  std::istringstream lines(s);
  std::set<std::string> typed;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("# TYPE ", 0) == 0) {
      typed.insert(line.substr(7, line.find(' ', 7) - 7));
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    std::string name = line.substr(0, line.find_first_of("{ "));
    for (const char* suffix : {"_bucket", "_sum", "_count"})
      if (name.size() > strlen(suffix) && name.compare(name.size() - strlen(suffix), std::string::npos, suffix) == 0 &&
          typed.count(name.substr(0, name.size() - strlen(suffix))))
        name = name.substr(0, name.size() - strlen(suffix));
    EXPECT_TRUE(typed.count(name)) << line;
  }
}

// The remote store's family appears only with --kv-store, each metric once with HELP/TYPE; its
// histogram (kept by the engine as per-bucket counts) is rendered cumulative with +Inf = _count.
TEST(Metrics, RemoteStoreMetrics) {
  ServerMetrics off;
  off.Publish({});
  EXPECT_EQ(off.Render().find("chorus_kv_remote"), std::string::npos);
  EngineStats::Remote r{.enabled = true, .up = true, .hits = 126, .misses = 3, .fetched_bytes = 22389696,
                        .published_bytes = 5, .published_blocks = 1, .publish_dropped = 2,
                        .errors = {{"checksum", 1}, {"deadline", 4}},
                        .fetch_bounds = {0.01, 0.1}, .fetch_counts = {1, 2, 1}, .fetch_seconds_sum = 0.7, .fetches = 4};
  ServerMetrics m;
  m.Publish({.remote = r});
  const std::string s = m.Render();
  for (const char* want : {"chorus_kv_remote_up 1\n", "chorus_kv_remote_hits_total 126\n",
                           "chorus_kv_remote_misses_total 3\n", "chorus_kv_remote_fetched_bytes_total 22389696\n",
                           "chorus_kv_remote_publish_dropped_total 2\n",
                           "chorus_kv_remote_errors_total{kind=\"checksum\"} 1\n",
                           "chorus_kv_remote_errors_total{kind=\"deadline\"} 4\n",
                           "chorus_kv_remote_errors_total{kind=\"connect\"} 0\n",
                           "chorus_kv_remote_fetch_seconds_bucket{le=\"0.1\"} 3\n",
                           "chorus_kv_remote_fetch_seconds_bucket{le=\"+Inf\"} 4\n",
                           "chorus_kv_remote_fetch_seconds_count 4\n", "# TYPE chorus_kv_remote_fetch_seconds histogram\n"})
    EXPECT_NE(s.find(want), std::string::npos) << want;
  size_t types = 0;
  for (size_t at = 0; (at = s.find("# TYPE chorus_kv_remote_errors_total ", at)) != std::string::npos; ++at) ++types;
  EXPECT_EQ(types, 1u);
}

}  // namespace
}  // namespace chorus::server
