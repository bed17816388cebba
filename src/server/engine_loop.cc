// EngineLoop: submit, cancel, step, publish — on one thread (see engine_loop.h).
#include "engine_loop.h"

#include <future>

namespace chorus::server {
EngineLoop::EngineLoop(Engine& engine, ServerMetrics& metrics, size_t max_queue)
    : engine_(engine), metrics_(metrics), max_queue_(max_queue) {}

EngineLoop::~EngineLoop() { Stop(); }

void EngineLoop::Start() { thread_ = std::thread([this] { Run(); }); }

void EngineLoop::Stop(const std::string& reason) {
  {
    std::lock_guard lock(mu_);
    if (!stop_) stop_reason_ = reason;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool EngineLoop::Enqueue(std::shared_ptr<Channel> ch) {
  {
    std::lock_guard lock(mu_);
    if (stop_ || queued_.load() >= max_queue_) return false;
    inbox_.push_back(std::move(ch));
    queued_++;
  }
  cv_.notify_all();
  return true;
}

void EngineLoop::RunOnLoop(const std::function<void(Engine&)>& job) {
  if (std::this_thread::get_id() == thread_.get_id()) return job(engine_);
  std::promise<void> done;
  auto fut = done.get_future();
  {
    std::lock_guard lock(mu_);
    if (stop_ || !thread_.joinable()) return;  // nothing runs after Stop
    jobs_.push_back([&](Engine& e) {
      job(e);
      done.set_value();
    });
  }
  cv_.notify_all();
  fut.wait();
}

bool EngineLoop::TakeState(EngineSnapshot* snap, std::map<AgentId, RequestInfo>* infos) {
  bool ran = false;
  RunOnLoop([&](Engine& e) {
    *snap = e.Snapshot();
    const auto now = Clock::now();
    infos->clear();
    for (const auto& [id, l] : live_) {
      RequestInfo ri{.id = l.ch->request_id,
                     .tenant = l.ch->tenant,
                     .preview = l.ch->preview,
                     .age_s = std::chrono::duration<double>(now - l.ch->arrival).count()};
      if (l.seen_tokens >= 2) {
        const double dt = std::chrono::duration<double>(l.last_token - l.first_token).count();
        if (dt > 0) ri.tok_s = double(l.seen_tokens - 1) / dt;
      }
      infos->emplace(id, std::move(ri));
    }
    ran = true;
  });
  return ran;
}

void EngineLoop::PublishMetrics() {
  EngineStats s = engine_.Stats();
  queued_ = s.waiting;
  metrics_.Publish({.running = s.prefilling + s.decoding,
                    .waiting = s.waiting,
                    .kv_pinned = s.pinned_bytes,
                    .kv_in_use = s.in_use_bytes,
                    .kv_cached = s.cached_bytes,
                    .kv_free = s.free_bytes,
                    .kv_budget = s.budget_bytes,
                    .kv_total = s.total_bytes,
                    .kv_high_water = s.high_water_bytes,
                    .kv_overhead = s.overhead_bytes,
                    .contexts = engine_.live_contexts(),
                    .cached_blocks = s.cached_blocks,
                    .prefix_queried_tokens = s.prefix_queried_tokens,
                    .prefix_hit_tokens = s.prefix_hit_tokens,
                    .segment_runs = s.segment_runs,
                    .segment_reused_tokens = s.segment_reused_tokens,
                    .segment_repaired_tokens = s.segment_repaired_tokens,
                    .evicted_blocks = s.evicted_blocks,
                    .prompt_tokens = s.prompt_tokens,
                    .prefilled_tokens = s.prefilled_tokens,
                    .generated_tokens = s.generated_tokens,
                    .steps = s.steps,
                    .remote = s.remote,
                    .shared = s.shared_bytes});
  series_.MaybeSample(std::chrono::duration<double>(Clock::now() - started_).count(),
                      {.generated = s.generated_tokens,
                       .prefilled = s.prefilled_tokens,
                       .running = s.prefilling + s.decoding,
                       .waiting = s.waiting});
}

void EngineLoop::Run() {
  std::vector<std::shared_ptr<Channel>> incoming;
  std::vector<std::function<void(Engine&)>> jobs;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      // Idle: wake now and then all the same, so /metrics follows what changes without requests
      // (the remote store's thread keeps publishing after the last step).
      if (!stop_ && inbox_.empty() && jobs_.empty() && live_.empty())
        // (and the dashboard's time series samples once a second).
        cv_.wait_for(lock, std::chrono::milliseconds(500), [&] { return stop_ || !inbox_.empty() || !jobs_.empty(); });
      if (stop_) break;
      incoming.assign(inbox_.begin(), inbox_.end());
      inbox_.clear();
      jobs.assign(jobs_.begin(), jobs_.end());
      jobs_.clear();
    }
    for (auto& job : jobs) job(engine_);
    for (auto& ch : incoming) {
      if (ch->cancel) {
        ch->Finish(StopReason::kCancelled, "", 499);
        metrics_.CountCancelled();
        continue;
      }
      auto id = engine_.Submit(ch->prompt, ch->options);
      if (!id.ok()) {
        ch->Finish(StopReason::kError, id.status().message(), 400);
        continue;
      }
      live_[*id] = Live{.ch = ch, .last_token = ch->arrival, .first_token = ch->arrival};
    }
    for (auto& [id, l] : live_)
      if (l.ch->cancel) engine_.Cancel(id);
    const bool work = engine_.running() + engine_.waiting() > 0;
    if (work) {
      if (Status s = engine_.Step(); !s.ok()) std::fprintf(stderr, "chorus serve: step failed: %s\n", s.message().c_str());
      const EngineStats st = engine_.Stats();
      metrics_.ObserveBatch(st.last_step_rows, st.last_step_prefill_tokens);
    }
    // Before any request's finish reaches its client: a client that reads /metrics after its answer
    // sees the step that produced it (its blocks cached, its tokens counted).
    PublishMetrics();
    const auto now = Clock::now();
    for (auto it = live_.begin(); it != live_.end();) {
      const AgentState* st = engine_.agent(it->first);
      Live& l = it->second;
      if (!st) {  // cannot happen: only the loop forgets
        l.ch->Finish(StopReason::kError, "the request vanished from the engine", 500);
        it = live_.erase(it);
        continue;
      }
      if (st->tokens.size() > l.seen_tokens) {
        const double dt = std::chrono::duration<double>(now - l.last_token).count();
        if (l.seen_tokens == 0) {
          metrics_.ObserveTtft(dt);
          series_.AddTtft(dt);
          l.first_token = now;
        } else {
          for (size_t t = l.seen_tokens; t < st->tokens.size(); ++t) metrics_.ObserveInterToken(dt);
        }
        l.seen_tokens = st->tokens.size();
        l.last_token = now;
      }
      // Only the text since the last publish crosses; a finish the server never asks for (forced
      // tokens) reads as an error, as the reader maps it (OpenAiFinishReason).
      l.ch->Publish(std::string_view(st->text).substr(l.sent_bytes), st->tokens.size(), st->cached_tokens,
                    st->reused_tokens, st->done ? st->stop : StopReason::kNone, st->error,
                    st->quota_exceeded ? 429 : 500,
                    std::span(st->logprobs).subspan(std::min(l.sent_logprobs, st->logprobs.size())),
                    std::span(st->tokens).subspan(std::min(l.sent_tokens, st->tokens.size())));
      l.sent_tokens = st->tokens.size();
      l.sent_bytes = st->text.size();
      l.sent_logprobs = st->logprobs.size();
      if (st->done) {
        if (st->stop == StopReason::kCancelled) metrics_.CountCancelled();
        engine_.Forget(it->first);
        it = live_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // Stopping: every request in flight or queued gets the reason as its final event.
  std::string reason;
  {
    std::lock_guard lock(mu_);
    reason = stop_reason_;
    for (auto& ch : inbox_) ch->Finish(StopReason::kError, reason, 503);
    inbox_.clear();
    for (auto& job : jobs_) job(engine_);  // waiters must not hang
    jobs_.clear();
  }
  for (auto& [id, l] : live_) {
    engine_.Cancel(id);
    l.ch->Finish(StopReason::kError, reason, 503);
  }
  if (!live_.empty()) (void)engine_.Step();  // cancelled requests give their blocks back
  for (auto& [id, l] : live_) engine_.Forget(id);
  live_.clear();
  queued_ = 0;
}

}  // namespace chorus::server
