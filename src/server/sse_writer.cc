// SseWriter: OpenAI-style server-sent event framing (see sse_writer.h).
#include "sse_writer.h"

namespace chorus::server {

bool SseWriter::Write(std::string_view bytes) {
  if (failed_) return false;
  if (!sink_(bytes)) failed_ = true;
  return !failed_;
}

bool SseWriter::Data(const nlohmann::json& event) { return Write(SseData(event)); }

bool SseWriter::Error(const ApiError& e) { return Data(ErrorJson(e)); }

bool SseWriter::Event(const nlohmann::json& event) {
  return Write("event: " + event.value("type", std::string("message")) + "\n") && Data(event);
}

bool SseWriter::Done() { return Write(kSseDone); }

bool SseWriter::KeepAlive() { return Write(": keep-alive\n\n"); }

}  // namespace chorus::server
