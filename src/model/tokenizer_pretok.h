// PreTokenizer: llama.cpp's regex pre-split for byte-level BPE, on PCRE2 (UTF + UCP); pieces cover the input exactly.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"  // Result

namespace chorus {

// One pre-token: bytes [begin, begin + size) of the text given to Split.
struct PieceSpan {
  size_t begin = 0;
  size_t size = 0;
};

// The regex cascade named by tokenizer.ggml.pre, exactly as llama.cpp's llm_tokenizer_bpe
// applies it: each regex runs on every piece the previous one produced (the regex sees only
// that piece); matches become pieces and so does the unmatched text between them.
// `\s` means Unicode White_Space (llama.cpp's table), not PCRE2's narrower set.
// Invalid UTF-8 never matches (PCRE2_MATCH_INVALID_UTF): such bytes end up in gap pieces,
// so Split never loses a byte (llama.cpp instead replaces them by U+FFFD).
class PreTokenizer {
 public:
  // Names accepted for `pre` (comma-separated), for error messages.
  static std::string SupportedNames();
  static Result<PreTokenizer> Create(std::string_view pre);

  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;
  ~PreTokenizer();

  // Appends the pieces of `text` (in order, covering all of it, none empty) to `out`.
  void Split(std::string_view text, std::vector<PieceSpan>& out) const;

  // llama.cpp's tokenizer_ignore_merges: a piece that is a whole vocab token is emitted as is.
  bool ignore_merges() const { return ignore_merges_; }
  // llama.cpp's default tokenizer_add_bos for this pre (used when the GGUF has no add_bos key).
  bool default_add_bos() const { return default_add_bos_; }

 private:
  struct Regex;  // compiled PCRE2 code
  PreTokenizer() = default;
  std::vector<std::unique_ptr<Regex>> regexes_;  // applied in order
  bool ignore_merges_ = false;
  bool default_add_bos_ = false;
};

}  // namespace chorus
