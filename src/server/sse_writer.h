// SseWriter: server-sent events over a byte sink, as the OpenAI streaming API frames them — one
// "data: <json>\n\n" per event (error events are {"error": ...} objects), the terminator
// "data: [DONE]\n\n", and ": keep-alive\n\n" comments that also find clients that went away.
// Invariant: once a write fails (the client went away) nothing more is written and every call
// returns false.
#pragma once
#include <nlohmann/json.hpp>

#include <functional>
#include <string_view>

#include "protocol.h"  // ApiError

namespace chorus::server {

class SseWriter {
 public:
  // Writes bytes to the client; false when it went away.
  using Sink = std::function<bool(std::string_view)>;
  explicit SseWriter(Sink sink) : sink_(std::move(sink)) {}

  bool Data(const nlohmann::json& event);  // "data: <json>\n\n" (invalid UTF-8 replaced)
  bool Error(const ApiError& e);           // Data(ErrorJson(e))
  // "event: <type>\ndata: <json>\n\n" (the Responses API names every event; json["type"] is it).
  bool Event(const nlohmann::json& event);
  bool Done();                             // "data: [DONE]\n\n"
  bool KeepAlive();                        // ": keep-alive\n\n"
  bool failed() const { return failed_; }

 private:
  bool Write(std::string_view bytes);
  Sink sink_;
  bool failed_ = false;
};

}  // namespace chorus::server
