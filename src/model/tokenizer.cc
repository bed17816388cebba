// Tokenizer: byte-level BPE as llama.cpp does it for tokenizer.ggml.model "gpt2"; Decode(Encode(s)) == s minus bytes the vocab lacks.
#include "model/tokenizer.h"

#include <algorithm>
#include <utility>

namespace chorus {
namespace {

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves, the other 68
// bytes get code points 256, 257, ... in byte order.
struct ByteAlphabet {
  uint32_t byte_to_cp[256];
  int16_t cp_to_byte[324];  // -1 where the code point is not in the alphabet

  ByteAlphabet() {
    std::fill(std::begin(cp_to_byte), std::end(cp_to_byte), int16_t{-1});
    uint32_t n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      byte_to_cp[b] = printable ? b : 256 + n++;
      cp_to_byte[byte_to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteAlphabet& Alphabet() {
  static const ByteAlphabet a;
  return a;
}

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Decodes the UTF-8 sequence at s[i]; returns its length, or 0 if it is not valid UTF-8.
size_t NextUtf8(std::string_view s, size_t i, uint32_t& cp) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  size_t len;
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  } else if ((b0 & 0xE0) == 0xC0) {
    len = 2, cp = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, cp = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, cp = b0 & 0x07;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    const auto b = static_cast<uint8_t>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  return len;
}

// Vocab text → bytes: each alphabet character becomes its byte; anything else is kept as is.
std::string DecodeByteAlphabet(std::string_view text) {
  const ByteAlphabet& a = Alphabet();
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    const size_t len = NextUtf8(text, i, cp);
    if (len == 0) {
      out += text[i++];
      continue;
    }
    if (cp < 324 && a.cp_to_byte[cp] >= 0) {
      out += static_cast<char>(a.cp_to_byte[cp]);
    } else {
      out.append(text.substr(i, len));
    }
    i += len;
  }
  return out;
}

std::string EncodeByteAlphabet(std::string_view bytes) {
  const ByteAlphabet& a = Alphabet();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) AppendUtf8(a.byte_to_cp[static_cast<uint8_t>(c)], out);
  return out;
}

// Texts llama.cpp (llama-vocab.cpp, special_eog_ids and the FIM pad/repo/sep detection)
// treats as end of generation. The first group (its "control-looking" list) is also made a
// control token when the vocab says otherwise (Gemma 3's "</s>" is a normal token there).
constexpr const char* kControlEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xef\xbd\x9c" "end\xe2\x96\x81" "of\xe2\x96\x81" "sentence\xef\xbd\x9c>", "[e~[",
};
constexpr const char* kOtherEogTexts[] = {
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
    "<reponame>", "<|file_sep|>",
};

bool IsSpecialType(TokenType t) {
  return t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown;
}

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// One symbol of the word being merged: a doubly linked list over the word's bytes.
constexpr int32_t kMerged = -1;     // BpeSymbol::id of a symbol merged into its left neighbour
constexpr int32_t kNoByteToken = -2;  // BpeSymbol::id of a byte the vocab has no token for

struct BpeSymbol {
  int32_t id;    // token id, virtual id (>= n_vocab), kMerged or kNoByteToken
  int32_t prev;  // index of the previous live symbol, -1 at the start
  int32_t next;  // index of the next live symbol, -1 at the end
};

// A candidate merge of two adjacent symbols; the heap pops lowest rank, then leftmost.
struct BpeBigram {
  int32_t rank;
  int32_t left;  // symbol index
  int32_t right;
  int32_t left_id;  // the symbols' ids when queued: stale once either has changed
  int32_t right_id;
  int32_t result;
};

}  // namespace

struct Tokenizer::Scratch {
  std::vector<PieceSpan> spans;
  std::vector<BpeSymbol> symbols;
  std::vector<BpeBigram> heap;
};

Result<Tokenizer> Tokenizer::Create(const TokenizerData& d) {
  if (d.model != "gpt2" && d.model != "llama") {
    return Status::Error("unsupported tokenizer.ggml.model '{}' (chorus has 'gpt2' byte-level BPE and "
                         "'llama' SentencePiece)", d.model);
  }
  const bool spm = d.model == "llama";
  const size_t n = d.tokens.size();
  if (n == 0 || n >= (size_t{1} << 30)) {
    return Status::Error("tokenizer vocab has {} tokens (need 1 .. 2^30)", n);
  }
  if (!d.token_types.empty() && d.token_types.size() != n) {
    return Status::Error("tokenizer has {} token types for {} tokens", d.token_types.size(), n);
  }
  const std::pair<const char*, std::optional<int32_t>> ids[] = {
      {"bos", d.bos}, {"eos", d.eos}, {"unk", d.unk}, {"pad", d.pad}};
  for (const auto& [name, id] : ids) {
    if (id && (*id < 0 || static_cast<size_t>(*id) >= n)) {
      return Status::Error("tokenizer {} id {} is out of range [0, {})", name, *id, n);
    }
  }
  if (d.add_bos && !d.bos) return Status::Error("tokenizer add_bos is set but bos id is missing");

  // SentencePiece has no pre-split (llama.cpp ignores tokenizer.ggml.pre for it).
  CHORUS_ASSIGN_OR_RETURN(PreTokenizer pretok, PreTokenizer::Create(spm ? std::string_view("default") : d.pre));
  Tokenizer t(std::move(pretok));
  t.spm_ = spm;
  t.bos_ = d.bos;
  t.eos_ = d.eos;
  t.add_bos_ = d.add_bos;
  t.texts_ = d.tokens;
  t.types_.resize(n, TokenType::kNormal);
  t.pieces_.resize(n);
  t.text_to_id_.reserve(n);
  t.piece_to_id_.reserve(n);
  const auto n32 = static_cast<int32_t>(n);
  for (int32_t id = 0; id < n32; ++id) {
    if (!d.token_types.empty()) {
      const int32_t ty = d.token_types[id];
      t.types_[id] = (ty >= 0 && ty <= 6) ? static_cast<TokenType>(ty) : TokenType::kUndefined;
    }
    for (const char* e : kControlEogTexts)
      if (t.texts_[id] == e) t.types_[id] = TokenType::kControl;  // as llama.cpp overrides it
    t.text_to_id_[t.texts_[id]] = id;  // last wins, as llama.cpp's token_to_id
    const bool special = IsSpecialType(t.types_[id]);
    if (!spm) t.pieces_[id] = special ? t.texts_[id] : DecodeByteAlphabet(t.texts_[id]);
    if (special && !t.texts_[id].empty()) t.special_ids_.push_back(id);
  }
  if (spm) CHORUS_RETURN_IF_ERROR(t.InitSpm(d));
  for (int32_t id = 0; id < n32; ++id) {
    auto [it, inserted] = t.piece_to_id_.try_emplace(t.pieces_[id], id);
    if (!inserted && IsSpecialType(t.types_[id]) && !IsSpecialType(t.types_[it->second])) it->second = id;
  }
  std::stable_sort(t.special_ids_.begin(), t.special_ids_.end(), [&](int32_t a, int32_t b) {
    return t.texts_[a].size() > t.texts_[b].size();
  });

  if (spm) {  // no merges: SentencePiece merges by score (InitSpm)
    t.FindEndOfGeneration();
    return t;
  }
  // Real vocabs lack some bytes (SmolLM2: 0xC0, 0xC1, 0xF5..0xFF and five control bytes).
  const ByteAlphabet& alphabet = Alphabet();
  for (int b = 0; b < 256; ++b) {
    std::string text;
    AppendUtf8(alphabet.byte_to_cp[b], text);
    auto it = t.text_to_id_.find(text);
    t.byte_token_[b] = it == t.text_to_id_.end() ? kNoByteToken : it->second;
  }

  // Merges, by rank. A merge result missing from the vocab gets a virtual id >= n so that
  // merges built on it still fire exactly as in llama.cpp (which merges strings).
  std::vector<std::pair<std::string_view, std::string_view>> parts(d.merges.size());
  std::unordered_map<std::string, int32_t> virtual_ids;
  auto lookup = [&](const std::string& s) -> std::optional<int32_t> {
    if (auto it = t.text_to_id_.find(s); it != t.text_to_id_.end()) return it->second;
    if (auto it = virtual_ids.find(s); it != virtual_ids.end()) return it->second;
    return std::nullopt;
  };
  for (size_t i = 0; i < d.merges.size(); ++i) {
    const std::string& m = d.merges[i];
    const size_t pos = m.find(' ', 1);  // as llama.cpp: a merge may start with a space
    if (pos == std::string::npos) continue;
    parts[i] = {std::string_view(m).substr(0, pos), std::string_view(m).substr(pos + 1)};
    std::string merged = m.substr(0, pos) + m.substr(pos + 1);
    if (!lookup(merged)) {
      virtual_ids.emplace(std::move(merged), n32 + static_cast<int32_t>(virtual_ids.size()));
    }
  }
  t.virtual_parts_.resize(virtual_ids.size(), {-1, -1});
  t.merges_.reserve(d.merges.size());
  for (size_t i = 0; i < d.merges.size(); ++i) {
    if (parts[i].first.empty()) continue;
    const std::string left(parts[i].first), right(parts[i].second);
    const auto l = lookup(left), r = lookup(right), m = lookup(left + right);
    if (!l || !r || !m) continue;  // a part that can never be formed: the merge never fires
    if (*m >= n32 && t.virtual_parts_[*m - n32].first < 0) t.virtual_parts_[*m - n32] = {*l, *r};
    t.merges_.try_emplace(PairKey(*l, *r), Merge{static_cast<int32_t>(i), *m});
  }

  t.FindEndOfGeneration();
  return t;
}

void Tokenizer::FindEndOfGeneration() {
  for (int32_t id = 0; id < n_vocab(); ++id) {
    for (const char* e : kControlEogTexts)
      if (texts_[id] == e) eog_ids_.push_back(id);
    for (const char* e : kOtherEogTexts)
      if (texts_[id] == e) eog_ids_.push_back(id);
  }
  if (eos_) eog_ids_.push_back(*eos_);
  std::sort(eog_ids_.begin(), eog_ids_.end());
  eog_ids_.erase(std::unique(eog_ids_.begin(), eog_ids_.end()), eog_ids_.end());
}

void Tokenizer::EmitSymbol(int32_t id, std::vector<int32_t>& out) const {
  if (id == kNoByteToken) return;  // dropped, as llama.cpp does
  if (id < n_vocab()) {
    out.push_back(id);
    return;
  }
  const auto [l, r] = virtual_parts_[id - n_vocab()];
  EmitSymbol(l, out);
  EmitSymbol(r, out);
}

void Tokenizer::EncodeWord(std::string_view word, Scratch& s, std::vector<int32_t>& out) const {
  if (word.size() == 1) {
    EmitSymbol(byte_token_[static_cast<uint8_t>(word[0])], out);
    return;
  }
  if (pretok_.ignore_merges()) {
    if (auto it = text_to_id_.find(EncodeByteAlphabet(word)); it != text_to_id_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const auto n = static_cast<int32_t>(word.size());
  s.symbols.resize(n);
  for (int32_t i = 0; i < n; ++i) {
    s.symbols[i] = {byte_token_[static_cast<uint8_t>(word[i])], i - 1, i + 1 < n ? i + 1 : -1};
  }
  auto later = [](const BpeBigram& a, const BpeBigram& b) {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  };
  s.heap.clear();
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    auto it = merges_.find(PairKey(s.symbols[left].id, s.symbols[right].id));
    if (it == merges_.end()) return;
    s.heap.push_back({it->second.rank, left, right, s.symbols[left].id, s.symbols[right].id,
                      it->second.result});
    std::push_heap(s.heap.begin(), s.heap.end(), later);
  };
  for (int32_t i = 0; i + 1 < n; ++i) try_add(i, i + 1);
  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), later);
    const BpeBigram bg = s.heap.back();
    s.heap.pop_back();
    BpeSymbol& left = s.symbols[bg.left];
    BpeSymbol& right = s.symbols[bg.right];
    // Stale if either side has changed since it was queued (merged away, or grown: ids
    // are a function of the symbol's bytes, which only grow).
    if (left.id != bg.left_id || right.id != bg.right_id) continue;
    left.id = bg.result;
    right.id = kMerged;
    left.next = right.next;
    if (right.next >= 0) s.symbols[right.next].prev = bg.left;
    try_add(left.prev, bg.left);
    try_add(bg.left, left.next);
  }
  for (int32_t i = 0; i >= 0; i = s.symbols[i].next) EmitSymbol(s.symbols[i].id, out);
}

void Tokenizer::EncodeRaw(std::string_view text, Scratch& s, std::vector<int32_t>& out) const {
  s.spans.clear();
  pretok_.Split(text, s.spans);
  for (const PieceSpan& p : s.spans) EncodeWord(text.substr(p.begin, p.size), s, out);
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_special && add_bos_ && bos_) out.push_back(*bos_);

  // Special-token partition, as llama.cpp's tokenizer_st_partition: longest texts first,
  // each splits the remaining raw fragments at its leftmost non-overlapping occurrences.
  struct Fragment {
    int32_t token;  // -1 for raw text
    size_t begin, size;
  };
  std::vector<Fragment> frags, next;
  if (!text.empty()) frags.push_back({-1, 0, text.size()});
  for (int32_t id : special_ids_) {
    if (!parse_special && types_[id] != TokenType::kUserDefined) continue;
    const std::string& st = texts_[id];
    next.clear();
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      const std::string_view raw = text.substr(f.begin, f.size);
      size_t pos = 0;
      for (size_t hit; (hit = raw.find(st, pos)) != std::string_view::npos; pos = hit + st.size()) {
        if (hit > pos) next.push_back({-1, f.begin + pos, hit - pos});
        next.push_back({id, 0, 0});
      }
      if (pos < raw.size()) next.push_back({-1, f.begin + pos, raw.size() - pos});
    }
    std::swap(frags, next);
  }

  Scratch s;
  bool prev_special = true;  // SentencePiece: the first fragment counts as following a special token
  for (const Fragment& f : frags) {
    if (f.token >= 0) {
      out.push_back(f.token);
      prev_special = true;
    } else if (spm_) {
      // As llama.cpp: an optional leading space, then every space as ▁ (U+2581).
      std::string escaped = add_space_prefix_ && prev_special ? "\xe2\x96\x81" : "";
      for (char c : text.substr(f.begin, f.size)) {
        if (c == ' ') escaped += "\xe2\x96\x81";
        else escaped += c;
      }
      EncodeSpm(escaped, out);
      prev_special = false;
    } else {
      EncodeRaw(text.substr(f.begin, f.size), s, out);
    }
  }
  return out;
}

std::string Tokenizer::TokenToPiece(int32_t id) const {
  if (id < 0 || id >= n_vocab()) return {};
  return pieces_[id];
}

std::string Tokenizer::Decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id >= 0 && id < n_vocab()) out += pieces_[id];
  }
  return out;
}

std::optional<int32_t> Tokenizer::Find(std::string_view piece) const {
  auto it = piece_to_id_.find(std::string(piece));
  if (it == piece_to_id_.end()) return std::nullopt;
  return it->second;
}

const std::string& Tokenizer::TokenText(int32_t id) const {
  static const std::string kEmpty;
  if (id < 0 || id >= n_vocab()) return kEmpty;
  return texts_[id];
}

TokenType Tokenizer::GetTokenType(int32_t id) const {
  if (id < 0 || id >= n_vocab()) return TokenType::kUndefined;
  return types_[id];
}

bool Tokenizer::IsEndOfGeneration(int32_t id) const {
  return std::binary_search(eog_ids_.begin(), eog_ids_.end(), id);
}

}  // namespace chorus
