// Channel: the per-request pipe of deltas from the engine loop to the HTTP thread (see channel.h).
#include "channel.h"

namespace chorus::server {

void Doorbell::Ring() {
  {
    std::lock_guard lock(mu_);
    rings_++;
  }
  cv_.notify_all();
}

bool Doorbell::WaitFor(uint64_t* seen, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return rings_ != *seen; })) return false;
  *seen = rings_;
  return true;
}

void Channel::Publish(std::string_view delta, size_t completion_tokens, size_t cached_tokens, size_t reused_tokens,
                      StopReason stop, std::string_view error, int error_status, std::span<const TokenLogprob> logprobs,
                      std::span<const int32_t> tokens) {
  std::lock_guard lock(mu_);
  if (pending_.done) return;
  pending_.delta.append(delta);
  pending_.logprobs.insert(pending_.logprobs.end(), logprobs.begin(), logprobs.end());
  pending_.tokens.insert(pending_.tokens.end(), tokens.begin(), tokens.end());
  bytes_published_ += delta.size();
  pending_.completion_tokens = completion_tokens;
  pending_.cached_tokens = cached_tokens;
  pending_.reused_tokens = reused_tokens;
  if (stop != StopReason::kNone) {
    pending_.done = true;
    pending_.stop = stop;
    pending_.error = error;
    pending_.error_status = error_status;
  }
  version_++;
  cv_.notify_all();
  if (doorbell) doorbell->Ring();  // under mu_: the reader sees the ring only after the news
}

void Channel::Finish(StopReason stop, std::string_view error, int error_status) {
  std::lock_guard lock(mu_);
  if (pending_.done) return;
  pending_.done = true;
  pending_.stop = stop;
  pending_.error = error;
  pending_.error_status = error_status;
  version_++;
  cv_.notify_all();
  if (doorbell) doorbell->Ring();  // under mu_: the reader sees the ring only after the news
}

void Channel::MoveOut(ChannelUpdate* u) {
  taken_ = version_;
  u->delta = std::move(pending_.delta);
  pending_.delta.clear();  // moved-from: make it empty for the next appends
  u->logprobs = std::move(pending_.logprobs);
  pending_.logprobs.clear();
  u->tokens = std::move(pending_.tokens);
  pending_.tokens.clear();
  u->completion_tokens = pending_.completion_tokens;
  u->cached_tokens = pending_.cached_tokens;
  u->reused_tokens = pending_.reused_tokens;
  u->done = pending_.done;
  u->stop = pending_.stop;
  u->error = pending_.error;
  u->error_status = pending_.error_status;
}

void Channel::Take(ChannelUpdate* u) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return version_ != taken_; });
  MoveOut(u);
}

bool Channel::TakeFor(ChannelUpdate* u, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return version_ != taken_; })) return false;
  MoveOut(u);
  return true;
}

size_t Channel::bytes_published() const {
  std::lock_guard lock(mu_);
  return bytes_published_;
}

const char* OpenAiFinishReason(StopReason stop, bool stop_string) {
  if (stop_string) return "stop";
  switch (stop) {
    case StopReason::kEndOfGeneration: return "stop";
    case StopReason::kMaxTokens:
    case StopReason::kContextFull:
    case StopReason::kCancelled: return "length";
    case StopReason::kForcedTokens:
    case StopReason::kError:
    case StopReason::kNone: return nullptr;
  }
  return nullptr;
}

}  // namespace chorus::server
