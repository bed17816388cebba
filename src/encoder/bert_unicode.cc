// Unicode lookups for the BERT tokenizer (see bert_unicode.h); the tables are generated.
#include "encoder/bert_unicode.h"

#include <algorithm>
#include <cstdint>
#include <iterator>

namespace chorus::bert {
namespace {

struct CpRange {
  char32_t lo, hi;
};
struct MapEntry {
  char32_t cp;
  uint16_t off;
  uint8_t len;
};
#include "encoder/bert_unicode_tables.inc"

template <size_t N>
bool InRanges(const CpRange (&r)[N], char32_t c) {
  const CpRange* it = std::upper_bound(std::begin(r), std::end(r), c, [](char32_t v, const CpRange& x) { return v < x.lo; });
  return it != std::begin(r) && c <= std::prev(it)->hi;
}

// Hangul syllable decomposition constants (Unicode §3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount;

}  // namespace

std::u32string DecodeUtf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t b = static_cast<uint8_t>(s[i]);
    size_t n = 0;
    char32_t c = 0, min = 0;
    if (b < 0x80) { out.push_back(b); ++i; continue; }
    if ((b & 0xE0) == 0xC0) { n = 1; c = b & 0x1F; min = 0x80; }
    else if ((b & 0xF0) == 0xE0) { n = 2; c = b & 0x0F; min = 0x800; }
    else if ((b & 0xF8) == 0xF0) { n = 3; c = b & 0x07; min = 0x10000; }
    else { out.push_back(0xFFFD); ++i; continue; }
    bool ok = true;
    for (size_t k = 1; ok && k <= n; ++k) {
      if (i + k >= s.size() || (static_cast<uint8_t>(s[i + k]) & 0xC0) != 0x80) ok = false;
      else c = (c << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
    }
    if (!ok || c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) { out.push_back(0xFFFD); ++i; continue; }
    out.push_back(c);
    i += n + 1;
  }
  return out;
}

void AppendUtf8(char32_t c, std::string& out) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

bool IsControl(char32_t c) { return InRanges(kCleanDrop, c); }

bool IsWhitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool IsPunct(char32_t c) { return InRanges(kPunct, c); }

bool IsCjk(char32_t c) { return InRanges(kCjk, c); }

bool IsMn(char32_t c) { return InRanges(kStripDrop, c); }

void AppendStripLower(char32_t c, std::u32string& out) {
  if (c >= kSBase && c < kSBase + kLCount * kNCount) {  // Hangul syllable: algorithmic NFD, no marks
    const char32_t s = c - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (IsMn(c)) return;
  const MapEntry* it = std::lower_bound(std::begin(kMap), std::end(kMap), c,
                                        [](const MapEntry& e, char32_t v) { return e.cp < v; });
  if (it != std::end(kMap) && it->cp == c) {
    out.append(kMapData + it->off, it->len);
  } else {
    out.push_back(c);
  }
}

}  // namespace chorus::bert
