// Channel: one request's pipe from the engine loop (the writer) to its HTTP thread (the reader).
// Only what is new crosses the thread boundary: after each step the loop appends the text
// generated since its last publish, sets the token totals and, at the end, a StopReason (an enum,
// never a string). The reader moves out what accumulated since its last Take and appends it to a
// text of its own, so an answer of n bytes moves O(n) bytes between the threads, not O(n²).
// Invariants: a channel is finished exactly once (the first Finish or final Publish wins; later
// ones are ignored); the concatenation of every delta taken is the text the engine generated;
// bytes_published() is its length.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chorus/engine.h"  // AgentOptions, StopReason

namespace chorus::server {

using Clock = std::chrono::steady_clock;

// What the reader gets from one Take: the text since its previous Take, the totals so far, and
// how the request ended once done.
struct ChannelUpdate {
  std::string delta;
  size_t completion_tokens = 0;
  size_t cached_tokens = 0;  // prompt tokens borrowed from the prefix cache
  size_t reused_tokens = 0;  // prompt tokens reused from segments at another offset
  bool done = false;
  StopReason stop = StopReason::kNone;  // with done
  std::string error;                    // with stop == kError
  int error_status = 500;               // HTTP status for errors before the first token
  std::vector<TokenLogprob> logprobs;   // the new tokens' (AgentOptions::top_logprobs >= 0), like delta
  std::vector<int32_t> tokens;          // the new tokens' ids, like delta
};

// Rung after every publish and finish of the channels that share it, so one reader can wait for
// any of them (the choices of a streamed n > 1 request). Lock order: a channel's mutex, then the
// doorbell's; a reader never holds the doorbell's while it takes from a channel.
class Doorbell {
 public:
  void Ring();
  // Waits until it was rung after the ring *seen counts (true, *seen brought up to date) or for
  // `timeout` (false).
  bool WaitFor(uint64_t* seen, std::chrono::milliseconds timeout);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t rings_ = 0;
};

class Channel {
 public:
  // Set before EngineLoop::Enqueue, read-only afterwards.
  std::vector<int32_t> prompt;
  AgentOptions options;
  Clock::time_point arrival = Clock::now();
  std::string request_id;           // the response id (dashboard)
  std::string preview;              // the start of the client's text (dashboard; user text)
  std::string tenant;               // who sent it (its API key's tenant): who may see it
  std::atomic<bool> cancel{false};  // the client went away or a stop string ended it
  std::shared_ptr<Doorbell> doorbell;  // none, or rung after each Publish / Finish

  // ---- the loop's side ----
  // Appends `delta`, sets the totals; with `stop` != kNone also finishes the channel in the same
  // critical section (the reader sees the last text and the end together). Ignored once finished.
  void Publish(std::string_view delta, size_t completion_tokens, size_t cached_tokens, size_t reused_tokens,
               StopReason stop = StopReason::kNone, std::string_view error = {}, int error_status = 500,
               std::span<const TokenLogprob> logprobs = {}, std::span<const int32_t> tokens = {});
  // Finishes without new text (refused, cancelled while queued, shutdown). First call wins.
  void Finish(StopReason stop, std::string_view error, int error_status);

  // ---- the reader's side ----
  // Waits until something was published since the last take, then moves the pending text into
  // u->delta and copies the rest. TakeFor waits at most `timeout`: false then (u untouched).
  void Take(ChannelUpdate* u);
  bool TakeFor(ChannelUpdate* u, std::chrono::milliseconds timeout);

  // Total bytes of text the loop moved in (test hook: the O(n) claim above).
  size_t bytes_published() const;

 private:
  void MoveOut(ChannelUpdate* u);  // under mu_

  mutable std::mutex mu_;
  std::condition_variable cv_;
  ChannelUpdate pending_;             // delta: published, not yet taken
  uint64_t version_ = 0, taken_ = 0;  // bumped per publish; what the reader last took
  size_t bytes_published_ = 0;
};

// OpenAI's finish_reason for a finished request: "stop" when a stop string ended it or the model
// ended its answer, "length" for max tokens, a full context or a cancellation the client still
// reads; nullptr when it is answered with an error instead (kError, and stops the server never
// asks for: kForcedTokens, kNone).
const char* OpenAiFinishReason(StopReason stop, bool stop_string);

}  // namespace chorus::server
