// Channel: the reader gets exactly the text the loop appended, in order, however its takes fall
// between publishes; a channel finishes once; the end crosses as a StopReason and maps onto
// OpenAI's finish_reason as the server has always answered.
#include "server/channel.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>

namespace chorus::server {
namespace {

using std::chrono::milliseconds;

TEST(Channel, TakeMovesOutOnlyWhatIsNewSinceTheLastTake) {
  Channel ch;
  ChannelUpdate u;
  EXPECT_FALSE(ch.TakeFor(&u, milliseconds(1)));  // nothing published yet
  ch.Publish("Hel", 1, 32, 0);
  ch.Publish("lo", 2, 32, 0);
  ch.Take(&u);
  EXPECT_EQ(u.delta, "Hello");  // two publishes, one take: appended in order
  EXPECT_EQ(u.completion_tokens, 2u);
  EXPECT_EQ(u.cached_tokens, 32u);
  EXPECT_FALSE(u.done);
  EXPECT_FALSE(ch.TakeFor(&u, milliseconds(1)));
  ch.Publish("", 3, 32, 0);  // a token that made no whole text yet still wakes the reader
  ch.Take(&u);
  EXPECT_EQ(u.delta, "");
  EXPECT_EQ(u.completion_tokens, 3u);
  ch.Publish(" world", 4, 32, 0, StopReason::kEndOfGeneration);
  ch.Take(&u);
  EXPECT_EQ(u.delta, " world");
  EXPECT_TRUE(u.done);
  EXPECT_EQ(u.stop, StopReason::kEndOfGeneration);
  EXPECT_EQ(ch.bytes_published(), 11u);
}

TEST(Channel, FinishesExactlyOnce) {
  Channel ch;
  ch.Finish(StopReason::kError, "the queue closed", 503);
  ch.Finish(StopReason::kCancelled, "", 499);           // ignored
  ch.Publish("late", 1, 0, 0, StopReason::kMaxTokens);  // ignored
  ChannelUpdate u;
  ch.Take(&u);
  EXPECT_TRUE(u.done);
  EXPECT_EQ(u.stop, StopReason::kError);
  EXPECT_EQ(u.error, "the queue closed");
  EXPECT_EQ(u.error_status, 503);
  EXPECT_EQ(u.delta, "");
  EXPECT_EQ(ch.bytes_published(), 0u);
  EXPECT_FALSE(ch.TakeFor(&u, milliseconds(1)));  // nothing new after the end
}

// A writer and a reader on two threads (TSan: label tsan): the deltas concatenate to the text.
TEST(Channel, ConcurrentReaderGetsTheWholeTextOnce) {
  Channel ch;
  std::string want;
  std::thread writer([&] {
    std::string text;
    for (int i = 0; i < 2000; ++i) {
      const std::string piece = std::to_string(i) + " ";
      text += piece;
      ch.Publish(piece, i + 1, 0, 0, i == 1999 ? StopReason::kMaxTokens : StopReason::kNone);
    }
    want = text;
  });
  std::string got;
  ChannelUpdate u;
  while (!u.done) {
    ch.Take(&u);
    got += u.delta;
  }
  writer.join();
  EXPECT_EQ(got, want);
  EXPECT_EQ(ch.bytes_published(), want.size());
  EXPECT_EQ(u.completion_tokens, 2000u);
}

TEST(Channel, OneDoorbellWakesTheReaderOfEveryChoice) {
  // A streamed n > 1 request: one reader waits for any of its choices' channels. Every publish and
  // finish rings after the news is in the channel, so a ring never comes before what it announces,
  // and no news is lost between a reader's takes and its next wait.
  auto bell = std::make_shared<Doorbell>();
  Channel a, b;
  a.doorbell = b.doorbell = bell;
  uint64_t seen = 0;
  EXPECT_FALSE(bell->WaitFor(&seen, milliseconds(1)));
  constexpr int kRounds = 2000;
  std::thread writer([&] {
    for (int i = 0; i < kRounds; ++i) (i % 2 ? b : a).Publish("x", size_t(i / 2 + 1), 0, 0);
    a.Finish(StopReason::kMaxTokens, "", 500);
    b.Publish("", kRounds / 2, 0, 0, StopReason::kEndOfGeneration);
  });
  std::string got[2];
  bool done[2] = {false, false};
  while (!(done[0] && done[1])) {
    bool any = false;
    for (int k = 0; k < 2; ++k) {
      ChannelUpdate u;
      if (!done[k] && (k ? b : a).TakeFor(&u, milliseconds(0))) {
        got[k] += u.delta;
        done[k] = u.done;
        any = true;
      }
    }
    if (!any) ASSERT_TRUE(bell->WaitFor(&seen, std::chrono::seconds(10))) << "a ring was lost";
  }
  writer.join();
  EXPECT_EQ(got[0], std::string(kRounds / 2, 'x'));
  EXPECT_EQ(got[1], std::string(kRounds / 2, 'x'));
}

TEST(Channel, StopReasonsMapToOpenAiFinishReasons) {
  auto reason = [](StopReason r, bool stop_string) {
    const char* s = OpenAiFinishReason(r, stop_string);
    return std::string(s ? s : "(error)");
  };
  EXPECT_EQ(reason(StopReason::kEndOfGeneration, false), "stop");
  EXPECT_EQ(reason(StopReason::kMaxTokens, false), "length");
  EXPECT_EQ(reason(StopReason::kContextFull, false), "length");
  EXPECT_EQ(reason(StopReason::kCancelled, false), "length");
  EXPECT_EQ(reason(StopReason::kError, false), "(error)");
  EXPECT_EQ(reason(StopReason::kForcedTokens, false), "(error)");  // never asked for by the server
  // A stop string ends the answer as "stop" whatever the engine did meanwhile.
  for (StopReason r : {StopReason::kNone, StopReason::kEndOfGeneration, StopReason::kMaxTokens,
                       StopReason::kContextFull, StopReason::kCancelled, StopReason::kError})
    EXPECT_EQ(reason(r, true), "stop") << ToString(r);
}

TEST(Channel, StopReasonsPrintAsTheyAlwaysHave) {
  EXPECT_STREQ(ToString(StopReason::kNone), "");
  EXPECT_STREQ(ToString(StopReason::kEndOfGeneration), "end of generation");
  EXPECT_STREQ(ToString(StopReason::kMaxTokens), "max tokens");
  EXPECT_STREQ(ToString(StopReason::kContextFull), "context full");
  EXPECT_STREQ(ToString(StopReason::kForcedTokens), "forced tokens");
  EXPECT_STREQ(ToString(StopReason::kCancelled), "cancelled");
  EXPECT_STREQ(ToString(StopReason::kError), "error");
}

}  // namespace
}  // namespace chorus::server
