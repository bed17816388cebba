// SseWriter: the exact bytes of each event kind (what OpenAI clients parse), and that nothing is
// written once the client went away.
#include "server/sse_writer.h"

#include <gtest/gtest.h>

#include <string>

namespace chorus::server {
namespace {

TEST(SseWriter, FramesEventsTerminatorAndComments) {
  std::string out;
  SseWriter w([&](std::string_view b) {
    out.append(b);
    return true;
  });
  EXPECT_TRUE(w.Data({{"a", 1}}));
  EXPECT_TRUE(w.KeepAlive());
  EXPECT_TRUE(w.Error({.status = 500, .message = "boom", .type = "server_error"}));
  EXPECT_TRUE(w.Done());
  EXPECT_FALSE(w.failed());
  EXPECT_EQ(out,
            "data: {\"a\":1}\n\n"
            ": keep-alive\n\n"
            "data: {\"error\":{\"code\":null,\"message\":\"boom\",\"param\":null,\"type\":\"server_error\"}}\n\n"
            "data: [DONE]\n\n");
}

TEST(SseWriter, InvalidUtf8IsReplacedNotThrown) {
  std::string out;
  SseWriter w([&](std::string_view b) {
    out.append(b);
    return true;
  });
  EXPECT_TRUE(w.Data({{"t", std::string("a\xff")}}));
  EXPECT_EQ(out, "data: {\"t\":\"a\xEF\xBF\xBD\"}\n\n");
}

TEST(SseWriter, StopsAfterTheFirstFailedWrite) {
  int calls = 0;
  SseWriter w([&](std::string_view) {
    ++calls;
    return calls < 2;  // the client goes away on the second write
  });
  EXPECT_TRUE(w.KeepAlive());
  EXPECT_FALSE(w.Data({{"a", 1}}));
  EXPECT_TRUE(w.failed());
  EXPECT_FALSE(w.Done());
  EXPECT_FALSE(w.Error({.message = "x"}));
  EXPECT_EQ(calls, 2);  // nothing written after the failure
}

}  // namespace
}  // namespace chorus::server
