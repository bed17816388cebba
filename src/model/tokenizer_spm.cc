// SentencePiece ("llama" tokenizer.ggml.model) as llama.cpp's llm_tokenizer_spm_session: start from
// UTF-8 characters, repeatedly merge the adjacent pair whose concatenation is the vocab token with
// the highest score (ties: leftmost), then emit each symbol's token, or its bytes as <0xXX> tokens.
#include <algorithm>
#include <cstdio>
#include <queue>

#include "model/tokenizer.h"

namespace chorus {
namespace {

// llama.cpp's unicode_len_utf8: the length a lead byte announces (1 for a stray continuation byte).
size_t Utf8Len(char c) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[static_cast<uint8_t>(c) >> 4];
}

struct SpmSymbol {
  size_t begin;  // byte offset in the text
  size_t n;      // bytes; 0 once merged into the left neighbour
  int prev, next;
};

struct SpmBigram {
  int left, right;
  float score;
  size_t size;  // bytes of the pair when queued: stale once either side has changed
};

struct LowerPriority {
  bool operator()(const SpmBigram& a, const SpmBigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

void ByteTokenText(std::string& out, uint8_t b) {
  static const char* kHex = "0123456789ABCDEF";
  out = "<0x";
  out += kHex[b >> 4];
  out += kHex[b & 15];
  out += '>';
}

}  // namespace

Status Tokenizer::InitSpm(const TokenizerData& d) {
  const size_t n = texts_.size();
  if (!d.scores.empty() && d.scores.size() != n)
    return Status::Error("tokenizer has {} scores for {} tokens", d.scores.size(), n);
  scores_ = d.scores.empty() ? std::vector<float>(n, 0.0f) : d.scores;
  add_space_prefix_ = d.add_space_prefix;
  for (size_t id = 0; id < n; ++id) {
    const std::string& text = texts_[id];
    switch (types_[id]) {
      case TokenType::kNormal:
      case TokenType::kUndefined: {
        std::string piece;  // ▁ (U+2581) → ' '
        for (size_t i = 0; i < text.size(); ++i) {
          if (text.compare(i, 3, "\xe2\x96\x81") == 0) {
            piece += ' ';
            i += 2;
          } else {
            piece += text[i];
          }
        }
        pieces_[id] = std::move(piece);
        break;
      }
      case TokenType::kByte: {
        unsigned b = 0;
        if (text.size() != 6 || text.compare(0, 3, "<0x") != 0 || text[5] != '>' ||
            std::sscanf(text.c_str() + 3, "%2X", &b) != 1)
          return Status::Error("byte token {} has text '{}', expected <0xXX>", id, text);
        pieces_[id] = std::string(1, static_cast<char>(b));
        break;
      }
      case TokenType::kUnused:
        pieces_[id].clear();  // llama.cpp's token_to_piece gives nothing for them
        break;
      default:
        pieces_[id] = text;  // control, user-defined, unknown: their text
    }
  }
  // Byte fallback as llama.cpp's byte_to_token: "<0xXX>", else the one-byte text itself.
  std::string name;
  for (int b = 0; b < 256; ++b) {
    ByteTokenText(name, static_cast<uint8_t>(b));
    auto it = text_to_id_.find(name);
    if (it == text_to_id_.end()) it = text_to_id_.find(std::string(1, static_cast<char>(b)));
    byte_token_[b] = it == text_to_id_.end() ? -2 : it->second;  // -2: dropped, as for BPE
  }
  return Status::Ok();
}

void Tokenizer::EncodeSpm(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<SpmSymbol> sym;
  for (size_t off = 0; off < text.size();) {
    const size_t len = std::min(Utf8Len(text[off]), text.size() - off);
    const int i = static_cast<int>(sym.size());
    sym.push_back({off, len, i - 1, off + len == text.size() ? -1 : i + 1});
    off += len;
  }
  std::priority_queue<SpmBigram, std::vector<SpmBigram>, LowerPriority> queue;
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const std::string_view pair = text.substr(sym[left].begin, sym[left].n + sym[right].n);
    auto it = text_to_id_.find(pair);
    if (it == text_to_id_.end()) return;
    queue.push({left, right, scores_[it->second], pair.size()});
  };
  for (int i = 1; i < static_cast<int>(sym.size()); ++i) try_add(i - 1, i);
  while (!queue.empty()) {
    const SpmBigram bg = queue.top();
    queue.pop();
    SpmSymbol& l = sym[bg.left];
    SpmSymbol& r = sym[bg.right];
    if (l.n == 0 || r.n == 0 || l.n + r.n != bg.size) continue;
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = bg.left;
    try_add(l.prev, bg.left);
    try_add(bg.left, l.next);
  }
  // Every merged symbol is a vocab token (only such pairs are queued); a single character the
  // vocab lacks becomes its bytes (llama.cpp's resegment falls back to byte_to_token then).
  for (int i = sym.empty() ? -1 : 0; i >= 0; i = sym[i].next) {
    const std::string_view piece = text.substr(sym[i].begin, sym[i].n);
    if (auto it = text_to_id_.find(piece); it != text_to_id_.end()) {
      out.push_back(it->second);
      continue;
    }
    for (char c : piece)
      if (const int32_t id = byte_token_[static_cast<uint8_t>(c)]; id >= 0) out.push_back(id);
  }
}

}  // namespace chorus
