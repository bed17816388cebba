// TextStream: UTF-8-safe, stop-string-aware streaming of generated text (see text_stream.h).
#include "text_stream.h"

#include <algorithm>

namespace chorus::server {

size_t IncompleteUtf8Tail(std::string_view s) {
  // Walk back over at most 3 continuation bytes to the lead byte; incomplete if it wants more.
  const size_t n = s.size();
  for (size_t back = 1; back <= std::min<size_t>(4, n); ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    size_t want = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return want > back ? back : 0;
  }
  return 0;  // only continuation bytes: not ours to repair
}

TextStream::Delta TextStream::Feed(std::string_view full, bool final) {
  Delta d;
  if (stopped_) {
    d.stopped = true;
    return d;
  }
  // Earliest stop string in the whole text (a stop may straddle what was already emitted only by
  // the part that was held back, so searching from the emitted length minus the longest stop is
  // enough; the text is short, so search all of it).
  size_t cut = std::string_view::npos;
  for (const std::string& s : stops_) {
    const size_t at = full.find(s);
    if (at != std::string_view::npos) cut = std::min(cut, at);
  }
  size_t end = full.size();
  if (cut != std::string_view::npos) {
    end = cut;
    stopped_ = d.stopped = true;
  } else if (!final) {
    // Hold back the longest suffix that is a proper prefix of some stop string.
    size_t hold = 0;
    for (const std::string& s : stops_)
      for (size_t k = std::min(s.size() - 1, full.size()); k > hold; --k)
        if (full.substr(full.size() - k) == std::string_view(s).substr(0, k)) {
          hold = k;
          break;
        }
    end = full.size() - hold;
    end -= IncompleteUtf8Tail(full.substr(0, end));
  }
  if (end > emitted_.size()) {
    d.text = std::string(full.substr(emitted_.size(), end - emitted_.size()));
    emitted_ += d.text;
  }
  return d;
}

}  // namespace chorus::server
