// Tokenizer: what the GGUF says, as llama.cpp does it — tokenizer.ggml.model "gpt2" (byte-level BPE)
// or "llama" (SentencePiece: score-ranked merges over UTF-8 characters, ▁ for spaces, <0xXX> byte
// fallback). Decode(Encode(s)) == s minus bytes the vocab lacks (and, for SentencePiece with
// add_space_prefix, the leading space it adds).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "model/tokenizer_pretok.h"  // PreTokenizer
#include "util/status.h"             // Result

namespace chorus {

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// The tokenizer as plain data, filled from the GGUF keys tokenizer.ggml.* by the loader
// (see model/tokenizer_gguf.h), so the tokenizer does not depend on the GGUF reader.
struct TokenizerData {
  std::string model;                 // tokenizer.ggml.model: "gpt2" or "llama"
  std::string pre;                   // tokenizer.ggml.pre, e.g. "smollm" (gpt2 only)
  std::vector<std::string> tokens;   // (n_vocab) token texts: GPT-2 byte alphabet / SentencePiece ▁ pieces
  std::vector<int32_t> token_types;  // (n_vocab) TokenType values, or empty = all normal
  std::vector<std::string> merges;   // (n_merges) "left right", rank = index (gpt2)
  std::vector<float> scores;         // (n_vocab) merge priority, higher first (llama), or empty = 0
  std::optional<int32_t> bos, eos, unk, pad;
  bool add_bos = false;  // Encode(add_special = true) prepends bos
  bool add_space_prefix = true;  // llama: a raw fragment after BOS / a special token gets a leading space
};

class Tokenizer {
 public:
  // Validates `d` (model, pre, sizes, ids, the 256 byte tokens) and builds the lookup tables.
  static Result<Tokenizer> Create(const TokenizerData& d);

  Tokenizer(Tokenizer&&) noexcept = default;
  Tokenizer& operator=(Tokenizer&&) noexcept = default;
  Tokenizer(const Tokenizer&) = delete;  // tables of ~100K strings: move, don't copy
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Text → token ids, as llama.cpp's llama_tokenize(text, add_special, parse_special).
  // add_special: prepend bos when add_bos. parse_special: control/unknown token texts in
  // `text` become their ids (user-defined token texts always do, as in llama.cpp).
  // Any bytes are accepted; invalid UTF-8 is tokenized byte by byte. A byte the vocab has
  // no token for (CanEncodeByte false) is dropped, as llama.cpp drops it; every other byte
  // comes back from Decode.
  std::vector<int32_t> Encode(std::string_view text, bool add_special, bool parse_special) const;

  // The bytes of one token: normal tokens through the inverse GPT-2 byte map (gpt2) or with ▁ as
  // a space (llama), byte tokens <0xXX> as their byte, others (control, user-defined ...) as
  // their text; unused tokens are empty. Empty for an id out of range.
  std::string TokenToPiece(int32_t id) const;
  // Concatenated pieces; ids out of range are skipped.
  std::string Decode(std::span<const int32_t> ids) const;

  // The id whose piece (TokenToPiece) is exactly `piece`; special tokens win ties.
  std::optional<int32_t> Find(std::string_view piece) const;
  // The raw vocab text (GPT-2 byte alphabet for normal tokens). Empty if out of range.
  const std::string& TokenText(int32_t id) const;
  TokenType GetTokenType(int32_t id) const;
  // Whether the vocab has a token for this raw byte (else Encode drops it).
  bool CanEncodeByte(uint8_t b) const { return byte_token_[b] >= 0; }

  int32_t n_vocab() const { return static_cast<int32_t>(pieces_.size()); }
  std::optional<int32_t> bos() const { return bos_; }
  std::optional<int32_t> eos() const { return eos_; }
  bool add_bos() const { return add_bos_; }
  // eos, plus the tokens llama.cpp treats as end of generation by their text
  // (<|im_end|>, <|endoftext|>, <|eot_id|>, <|end|>, FIM pad/repo/sep ...).
  bool IsEndOfGeneration(int32_t id) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t result;  // token id, or a virtual id >= n_vocab for results not in the vocab
  };
  struct Scratch;  // per-call BPE work buffers

  explicit Tokenizer(PreTokenizer pretok) : pretok_(std::move(pretok)) {}
  // BPE on the bytes of one pre-token; appends ids.
  void EncodeWord(std::string_view word, Scratch& s, std::vector<int32_t>& out) const;
  // Pre-split + BPE on text with no special tokens in it.
  void EncodeRaw(std::string_view text, Scratch& s, std::vector<int32_t>& out) const;
  // SentencePiece (llama.cpp's llm_tokenizer_spm_session) on text with no special tokens in it,
  // spaces already escaped to ▁ (tokenizer_spm.cc).
  void EncodeSpm(std::string_view text, std::vector<int32_t>& out) const;
  // Builds the SentencePiece side of Create: pieces, byte tokens, scores.
  Status InitSpm(const TokenizerData& d);
  // eog_ids_ from eos and the texts llama.cpp treats as end of generation.
  void FindEndOfGeneration();
  // Appends the real token ids that make up id (expands virtual merge results).
  void EmitSymbol(int32_t id, std::vector<int32_t>& out) const;

  bool spm_ = false;              // tokenizer.ggml.model "llama"
  bool add_space_prefix_ = false;  // spm_ only
  std::vector<float> scores_;      // (n_vocab) spm_ only
  PreTokenizer pretok_;
  std::vector<std::string> texts_;   // (n_vocab) vocab texts
  std::vector<std::string> pieces_;  // (n_vocab) decoded bytes
  std::vector<TokenType> types_;     // (n_vocab)
  // Heterogeneous lookup: SentencePiece looks up substrings of the text without copying them.
  struct TextHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, int32_t, TextHash, std::equal_to<>> text_to_id_;  // vocab text → id (last wins, as llama.cpp)
  std::unordered_map<std::string, int32_t> piece_to_id_;  // decoded bytes → id
  std::unordered_map<uint64_t, Merge> merges_;            // (left id << 32 | right id) → merge
  std::vector<std::pair<int32_t, int32_t>> virtual_parts_;  // virtual id - n_vocab → (left, right)
  int32_t byte_token_[256] = {};  // raw byte → its token id, or < 0 if the vocab lacks it
  std::vector<int32_t> special_ids_;  // control/user-defined/unknown, longest text first
  std::vector<int32_t> eog_ids_;      // sorted
  std::optional<int32_t> bos_, eos_;
  bool add_bos_ = false;
};

}  // namespace chorus
