// EngineLoop: the one thread that drives the Engine. HTTP threads hand requests over through a
// bounded inbox and read each request's progress back from its Channel (channel.h); the loop
// submits, cancels, steps, publishes each request's new text after every step, and keeps the
// metrics.
// Threading rules:
//  - Only the loop thread touches the Engine's mutable state; other threads run code on it through
//    RunOnLoop / TakeState (between two steps). Tokenize, RenderChat, EstimateBytes and the model's
//    const getters may be called from any thread (include/chorus/engine.h).
//  - What crosses to an HTTP thread is a delta of text, token totals and a StopReason, through the
//    request's Channel (its own mutex); nothing else is shared per request but Channel::cancel.
//  - live_ and the loop's bookkeeping are the loop thread's; inbox_, jobs_, stop_ are under mu_.
// Invariants: a Channel is finished exactly once (with a StopReason, an error when kError); after
// Stop every channel is finished and the engine holds no request.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "channel.h"  // Channel
#include "chorus/engine.h"
#include "dashboard.h"  // StateSeries, RequestInfo
#include "metrics.h"    // ServerMetrics

namespace chorus::server {

struct ContextInfo {
  ContextId id = 0;
  size_t tokens = 0, bytes = 0;
  std::string formats;
};

class EngineLoop {
 public:
  // max_queue: requests waiting for admission (inbox + engine queue) beyond which Enqueue refuses.
  EngineLoop(Engine& engine, ServerMetrics& metrics, size_t max_queue);
  ~EngineLoop();  // Stop()
  void Start();
  // Finishes every request with `reason` as an error, waits for the thread. Idempotent.
  void Stop(const std::string& reason = "the server is shutting down");

  // Hands a request to the loop; false when the queue is full (the caller answers 503).
  bool Enqueue(std::shared_ptr<Channel> ch);
  size_t queued() const { return queued_.load(); }

  // Runs `job` on the loop thread between steps and waits for it (contexts: the engine's Share,
  // Release and the listing run there, so the engine stays single-threaded).
  void RunOnLoop(const std::function<void(Engine&)>& job);

  // The dashboard: an Engine::Snapshot and the server's view of each request, taken on the loop
  // between steps (false once the loop stopped). Callers rate-limit it (HttpServer: once a second).
  bool TakeState(EngineSnapshot* snap, std::map<AgentId, RequestInfo>* infos);
  // One-second samples of throughput, TTFT and queue lengths, kept by the loop (thread-safe).
  const StateSeries& series() const { return series_; }
  // Seconds since the loop was made (the series' clock).
  double Seconds() const { return std::chrono::duration<double>(Clock::now() - started_).count(); }

 private:
  void Run();
  // The engine's counters and bytes into /metrics and the dashboard's series (loop thread).
  void PublishMetrics();

  Engine& engine_;
  ServerMetrics& metrics_;
  const size_t max_queue_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Channel>> inbox_;
  std::deque<std::function<void(Engine&)>> jobs_;
  bool stop_ = false;
  std::atomic<size_t> queued_{0};
  std::string stop_reason_;
  // Loop thread only.
  struct Live {
    std::shared_ptr<Channel> ch;
    size_t seen_tokens = 0;
    size_t sent_bytes = 0;  // of the engine's text, published to ch already
    size_t sent_tokens = 0;    // of the engine's token ids, published already
    size_t sent_logprobs = 0;  // of the engine's logprobs, published already
    Clock::time_point last_token;
    Clock::time_point first_token;  // when seen_tokens became > 0
  };
  std::map<AgentId, Live> live_;
  StateSeries series_;
  const Clock::time_point started_ = Clock::now();
};

}  // namespace chorus::server
