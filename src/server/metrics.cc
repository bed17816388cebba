// Prometheus text exposition and ServerMetrics (see metrics.h).
#include "metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace chorus::server {

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)) {
  std::sort(bounds_.begin(), bounds_.end());
  counts_.assign(bounds_.size() + 1, 0);
}

void Histogram::Observe(double v) {
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();  // first bound >= v
  counts_[i]++;
  sum_ += v;
  count_++;
}

double Histogram::Quantile(double q) const {
  if (count_ == 0) return 0;
  const double rank = q * count_;
  uint64_t cum = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    if (cum + counts_[i] >= rank && counts_[i] > 0) {
      const double lo = i == 0 ? 0 : bounds_[i - 1];
      const double hi = i < bounds_.size() ? bounds_[i] : (bounds_.empty() ? 0 : bounds_.back());
      return lo + (hi - lo) * ((rank - cum) / counts_[i]);
    }
    cum += counts_[i];
  }
  return bounds_.empty() ? 0 : bounds_.back();
}

std::string PromText::Label(const std::string& key, const std::string& value) {
  std::string v;
  for (char c : value) {
    if (c == '\\' || c == '"') v += '\\', v += c;
    else if (c == '\n') v += "\\n";
    else v += c;
  }
  return key + "=\"" + v + "\"";
}

void PromText::Header(const std::string& name, const std::string& help, const char* type) {
  out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

static std::string Num(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{:.9g}", v);
}

void PromText::Sample(const std::string& name, const std::string& labels, double value) {
  out_ += labels.empty() ? fmt::format("{} {}\n", name, Num(value)) : fmt::format("{}{{{}}} {}\n", name, labels, Num(value));
}

Histogram Histogram::FromCounts(std::vector<double> upper_bounds, const std::vector<uint64_t>& counts, double sum) {
  Histogram h(std::move(upper_bounds));
  if (counts.size() != h.counts_.size()) return h;
  h.counts_ = counts;
  h.sum_ = sum;
  for (uint64_t c : counts) h.count_ += c;
  return h;
}

void PromText::Histo(const std::string& name, const std::string& help, const Histogram& h) {
  Header(name, help, "histogram");
  uint64_t cum = 0;
  for (size_t i = 0; i < h.counts().size(); ++i) {
    cum += h.counts()[i];
    const std::string le = i < h.bounds().size() ? Num(h.bounds()[i]) : "+Inf";
    Sample(name + "_bucket", Label("le", le), double(cum));
  }
  Sample(name + "_sum", "", h.sum());
  Sample(name + "_count", "", double(h.count()));
}

ServerMetrics::ServerMetrics()
    : ttft_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}),
      itl_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}),
      batch_rows_({1, 2, 4, 8, 16, 32, 64, 128, 256, 512}),
      prefill_chunk_({32, 64, 128, 256, 512, 1024}) {}

void ServerMetrics::CountRequest(const std::string& endpoint, int status) {
  std::lock_guard lock(mu_);
  requests_[{endpoint, status}]++;
}
void ServerMetrics::CountCancelled() {
  std::lock_guard lock(mu_);
  cancelled_++;
}
void ServerMetrics::ObserveTtft(double s) {
  std::lock_guard lock(mu_);
  ttft_.Observe(s);
}
void ServerMetrics::ObserveInterToken(double s) {
  std::lock_guard lock(mu_);
  itl_.Observe(s);
}
void ServerMetrics::ObserveBatch(size_t rows, size_t prefill_tokens) {
  std::lock_guard lock(mu_);
  batch_rows_.Observe(double(rows));
  if (prefill_tokens) prefill_chunk_.Observe(double(prefill_tokens));
}
void ServerMetrics::Publish(const EngineGauges& g) {
  std::lock_guard lock(mu_);
  g_ = g;
}
EngineGauges ServerMetrics::gauges() const {
  std::lock_guard lock(mu_);
  return g_;
}

std::string ServerMetrics::Render() const {
  std::lock_guard lock(mu_);
  PromText t;
  auto gauge = [&](const char* name, const char* help, double v) {
    t.Header(name, help, "gauge");
    t.Sample(name, "", v);
  };
  auto counter = [&](const char* name, const char* help, double v) {
    t.Header(name, help, "counter");
    t.Sample(name, "", v);
  };
  gauge("chorus_requests_running", "Requests admitted and not finished (prefilling or decoding).", double(g_.running));
  gauge("chorus_requests_waiting", "Requests queued for admission (KV budget or a prefix being computed).", double(g_.waiting));
  t.Header("chorus_http_requests_total", "HTTP requests answered, by endpoint and status code.", "counter");
  for (const auto& [key, n] : requests_)
    t.Sample("chorus_http_requests_total", PromText::Label("endpoint", key.first) + "," + PromText::Label("code", std::to_string(key.second)), double(n));
  counter("chorus_requests_cancelled_total", "Requests cancelled because the client went away.", double(cancelled_));
  counter("chorus_prompt_tokens_total", "Prompt tokens of admitted requests.", double(g_.prompt_tokens));
  counter("chorus_prefill_tokens_total", "Prompt tokens computed (not found in the prefix cache).", double(g_.prefilled_tokens));
  counter("chorus_generation_tokens_total", "Tokens generated.", double(g_.generated_tokens));
  counter("chorus_prefix_cache_queries_tokens_total", "Prompt tokens looked up in the prefix cache.", double(g_.prefix_queried_tokens));
  counter("chorus_prefix_cache_hits_tokens_total", "Prompt tokens whose KV blocks came from the prefix cache.", double(g_.prefix_hit_tokens));
  counter("chorus_segment_runs_total",
          "Runs of cached blocks attached at another offset than they were computed at (segment reuse).",
          double(g_.segment_runs));
  counter("chorus_segment_reused_tokens_total",
          "Prompt tokens whose KV came from a segment at another offset (not prefix hits).",
          double(g_.segment_reused_tokens));
  counter("chorus_segment_repaired_tokens_total",
          "Prompt tokens recomputed at the heads of reused segments (the repair).", double(g_.segment_repaired_tokens));
  counter("chorus_prefix_cache_evictions_total", "Cached 32-token blocks (all layers) evicted, least recently used first.", double(g_.evicted_blocks));
  counter("chorus_engine_steps_total", "Engine steps (one batched forward each).", double(g_.steps));
  t.Header("chorus_kv_bytes", "Bytes the KV layer holds, measured: pinned contexts, blocks read by running requests, "
                              "cached prefixes no request reads, the store's own scratch and free pool slots (overhead), "
                              "free under the budget.", "gauge");
  t.Sample("chorus_kv_bytes", PromText::Label("kind", "pinned"), double(g_.kv_pinned));
  t.Sample("chorus_kv_bytes", PromText::Label("kind", "in_use"), double(g_.kv_in_use));
  t.Sample("chorus_kv_bytes", PromText::Label("kind", "cached"), double(g_.kv_cached));
  t.Sample("chorus_kv_bytes", PromText::Label("kind", "overhead"), double(g_.kv_overhead));
  t.Sample("chorus_kv_bytes", PromText::Label("kind", "free"), double(g_.kv_free));
  gauge("chorus_kv_budget_bytes", "The KV byte budget (--kv-budget).", double(g_.kv_budget));
  gauge("chorus_kv_held_bytes", "Everything the KV layer holds: blocks, windows, tables (measured).", double(g_.kv_total));
  gauge("chorus_kv_high_water_bytes", "The most the KV layer held at any instant since start, inside steps included.",
        double(g_.kv_high_water));
  gauge("chorus_kv_shared_bytes", "Bytes of blocks stored once for every reader: prefix-cache blocks (pinned, read by "
        "running requests or idle) and Cocktail contexts (overlaps chorus_kv_bytes kinds; the dashboard's shared runs).",
        double(g_.shared));
  gauge("chorus_contexts", "Pinned contexts (POST /v1/contexts).", double(g_.contexts));
  gauge("chorus_prefix_cache_blocks", "32-token blocks (all layers) in the prefix cache.", double(g_.cached_blocks));
  t.Histo("chorus_time_to_first_token_seconds", "Time from a request's arrival to its first token.", ttft_);
  t.Histo("chorus_inter_token_latency_seconds", "Time between consecutive tokens of a request.", itl_);
  t.Histo("chorus_batch_rows", "Rows (decode tokens + prefill tokens) per engine step.", batch_rows_);
  t.Histo("chorus_prefill_chunk_tokens", "Prompt tokens prefilled per engine step (steps that prefill).", prefill_chunk_);
  if (const EngineStats::Remote& r = g_.remote; r.enabled) {  // --kv-store
    gauge("chorus_kv_remote_up", "1 while the remote block store (--kv-store) is connected; 0: serving locally.",
          r.up ? 1 : 0);
    counter("chorus_kv_remote_hits_total", "Prompt blocks (32 tokens, all layers) fetched from the remote store, "
            "verified and installed instead of prefilled.", double(r.hits));
    counter("chorus_kv_remote_misses_total", "Prompt blocks asked of the remote store and not used (absent, rejected, "
            "late).", double(r.misses));
    counter("chorus_kv_remote_fetched_bytes_total", "Bytes of blocks fetched from the remote store and installed.",
            double(r.fetched_bytes));
    counter("chorus_kv_remote_published_bytes_total", "Bytes of blocks written to the remote store.",
            double(r.published_bytes));
    counter("chorus_kv_remote_published_blocks_total", "Blocks written to the remote store.", double(r.published_blocks));
    counter("chorus_kv_remote_publish_dropped_total", "Blocks not published: the queue was full or the connection "
            "was lost with them.", double(r.publish_dropped));
    t.Histo("chorus_kv_remote_fetch_seconds", "Time of one remote fetch (the pipelined MGET of a request's leading "
            "blocks), from the request's admission to the reply.",
            Histogram::FromCounts(r.fetch_bounds, r.fetch_counts, r.fetch_seconds_sum));
    t.Header("chorus_kv_remote_errors_total",
             "Remote store errors by kind: connect, tls, auth, io, timeout, reply "
             "(the connection); checksum, truncated, magic, version, model, settings, key, format (a block rejected); "
             "deadline (a fetch given up), budget (no room to install).",
             "counter");
    for (const char* k : {"connect", "auth", "io", "timeout", "checksum", "model", "format"})  // always present
      if (!r.errors.count(k)) t.Sample("chorus_kv_remote_errors_total", PromText::Label("kind", k), 0);
    for (const auto& [k, n] : r.errors) t.Sample("chorus_kv_remote_errors_total", PromText::Label("kind", k), double(n));
  }
  return t.str();
}

}  // namespace chorus::server
