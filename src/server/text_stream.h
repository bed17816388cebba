// TextStream: turns the text a request has generated so far into the deltas a client may see —
// whole UTF-8 characters only, stop strings cut out, and text that might be the start of a stop
// string held back until it is known not to be. Pure; one per request.
// Invariant: the concatenation of every delta equals the final text up to (not including) the
// first stop string, or the whole text when none occurs.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace chorus::server {

class TextStream {
 public:
  explicit TextStream(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  struct Delta {
    std::string text;      // new visible text (may be empty)
    bool stopped = false;  // a stop string was found: nothing more will be emitted
  };
  // `full` is everything generated so far (it only grows). `final`: generation ended, so held-back
  // text is released (an incomplete UTF-8 tail too — the client gets what the model made).
  Delta Feed(std::string_view full, bool final);
  bool stopped() const { return stopped_; }
  // Everything emitted so far.
  const std::string& emitted() const { return emitted_; }

 private:
  std::vector<std::string> stops_;
  std::string emitted_;
  bool stopped_ = false;
};

// Bytes at the end of s that start a UTF-8 sequence not yet complete (0..3).
size_t IncompleteUtf8Tail(std::string_view s);

}  // namespace chorus::server
