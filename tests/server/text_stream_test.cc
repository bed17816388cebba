// TextStream: deltas are whole UTF-8 characters, stop strings are cut out even when they arrive
// split over several tokens, and the concatenated deltas equal the final text before the stop.
#include "server/text_stream.h"

#include <gtest/gtest.h>

namespace chorus::server {
namespace {

// Feeds `full` one byte at a time (the worst split a tokenizer could produce).
std::string FeedBytes(TextStream& ts, const std::string& full, bool* stopped) {
  std::string out;
  for (size_t i = 1; i <= full.size(); ++i) {
    auto d = ts.Feed(std::string_view(full).substr(0, i), i == full.size());
    out += d.text;
    if (d.stopped) {
      *stopped = true;
      return out;
    }
  }
  return out;
}

TEST(TextStream, NoStopsPassesEverythingThrough) {
  TextStream ts({});
  bool stopped = false;
  EXPECT_EQ(FeedBytes(ts, "hello world", &stopped), "hello world");
  EXPECT_FALSE(stopped);
}

TEST(TextStream, CutsAStopSplitAcrossFeeds) {
  TextStream ts({"END"});
  bool stopped = false;
  EXPECT_EQ(FeedBytes(ts, "abc EN then END more", &stopped), "abc EN then ");
  EXPECT_TRUE(stopped);
  EXPECT_TRUE(ts.Feed("abc EN then END more and more", false).stopped);
  EXPECT_EQ(ts.emitted(), "abc EN then ");
}

TEST(TextStream, HoldsBackAPossibleStopPrefixUntilDecided) {
  TextStream ts({"\n\n"});
  auto d = ts.Feed("line\n", false);
  EXPECT_EQ(d.text, "line");  // "\n" might start the stop
  d = ts.Feed("line\nnext", false);
  EXPECT_EQ(d.text, "\nnext");
  d = ts.Feed("line\nnext\n", true);  // final: released
  EXPECT_EQ(d.text, "\n");
  EXPECT_FALSE(d.stopped);
}

TEST(TextStream, EarliestOfSeveralStops) {
  TextStream ts({"zz", "b"});
  bool stopped = false;
  EXPECT_EQ(FeedBytes(ts, "aaazzb", &stopped), "aaa");
  EXPECT_TRUE(stopped);
}

TEST(TextStream, NeverSplitsAUtf8Character) {
  const std::string text = "caf\xC3\xA9 \xE2\x82\xAC\xF0\x9F\x98\x80!";
  TextStream ts({});
  std::string out;
  for (size_t i = 1; i <= text.size(); ++i) {
    auto d = ts.Feed(std::string_view(text).substr(0, i), false);
    // every delta ends on a character boundary
    EXPECT_EQ(IncompleteUtf8Tail(out + d.text), 0u) << i;
    out += d.text;
  }
  out += ts.Feed(text, true).text;
  EXPECT_EQ(out, text);
}

TEST(TextStream, FinalReleasesAnIncompleteTail) {
  TextStream ts({});
  EXPECT_EQ(ts.Feed("a\xE2\x82", false).text, "a");
  EXPECT_EQ(ts.Feed("a\xE2\x82", true).text, "\xE2\x82");
}

TEST(TextStream, IncompleteTail) {
  EXPECT_EQ(IncompleteUtf8Tail(""), 0u);
  EXPECT_EQ(IncompleteUtf8Tail("a"), 0u);
  EXPECT_EQ(IncompleteUtf8Tail("\xC3"), 1u);
  EXPECT_EQ(IncompleteUtf8Tail("\xC3\xA9"), 0u);
  EXPECT_EQ(IncompleteUtf8Tail("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(IncompleteUtf8Tail("\xF0\x9F\x98\x80"), 0u);
}

}  // namespace
}  // namespace chorus::server
