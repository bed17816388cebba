// Prometheus text exposition (format 0.0.4) and the server's metrics: counters, gauges and
// histograms updated by the engine loop and the HTTP threads, rendered for GET /metrics.
// Invariant: every metric is rendered with its # HELP and # TYPE lines; histogram buckets are
// cumulative and end with le="+Inf" equal to _count.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "chorus/engine.h"  // EngineStats

namespace chorus::server {

// Cumulative-bucket histogram (Prometheus semantics). Not thread-safe on its own.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  // A histogram kept elsewhere (the engine's): per-bucket counts (last = +Inf) and the sum.
  static Histogram FromCounts(std::vector<double> upper_bounds, const std::vector<uint64_t>& counts, double sum);
  void Observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  const std::vector<uint64_t>& counts() const { return counts_; }  // per bucket, not cumulative; last = +Inf
  double sum() const { return sum_; }
  uint64_t count() const { return count_; }
  // The q-quantile estimated from the buckets (linear inside a bucket), 0 when empty.
  double Quantile(double q) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

// Writes exposition text: Header once per metric, then its samples.
class PromText {
 public:
  void Header(const std::string& name, const std::string& help, const char* type);
  // labels: already formatted `k="v",k2="v2"` (escaped by Label), or empty.
  void Sample(const std::string& name, const std::string& labels, double value);
  void Histo(const std::string& name, const std::string& help, const Histogram& h);
  static std::string Label(const std::string& key, const std::string& value);  // escapes \ " and newline
  std::string str() const { return out_; }

 private:
  std::string out_;
};

// What the engine loop publishes once per step (a snapshot; gauges).
struct EngineGauges {
  size_t running = 0, waiting = 0;
  size_t kv_pinned = 0, kv_in_use = 0, kv_cached = 0, kv_free = 0, kv_budget = 0, kv_total = 0, kv_high_water = 0, kv_overhead = 0;
  size_t contexts = 0, cached_blocks = 0;
  // Counters the engine keeps (monotonic; copied, not added).
  uint64_t prefix_queried_tokens = 0, prefix_hit_tokens = 0;
  uint64_t segment_runs = 0, segment_reused_tokens = 0, segment_repaired_tokens = 0;
  uint64_t evicted_blocks = 0;
  uint64_t prompt_tokens = 0, prefilled_tokens = 0, generated_tokens = 0, steps = 0;
  EngineStats::Remote remote;  // the remote block store (--kv-store), copied
  size_t shared = 0;  // EngineStats::shared_bytes
};

class ServerMetrics {
 public:
  ServerMetrics();
  // HTTP side: one finished request (status code, endpoint label), errors by type.
  void CountRequest(const std::string& endpoint, int status);
  void CountCancelled();
  // Engine loop: latencies and the per-step batch size.
  void ObserveTtft(double seconds);
  void ObserveInterToken(double seconds);
  void ObserveBatch(size_t rows, size_t prefill_tokens);
  void Publish(const EngineGauges& g);
  EngineGauges gauges() const;
  std::string Render() const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  uint64_t cancelled_ = 0;
  Histogram ttft_, itl_, batch_rows_, prefill_chunk_;
  EngineGauges g_;
};

}  // namespace chorus::server
