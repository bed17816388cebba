// TokenVocab: the model's tokens as the grammar engine sees them — one byte string per token id,
// which ids end generation, and which ids are never text (control, unknown, unused, padding).
//
// Invariants: built once per model and immutable, so it is shared freely across threads (copies
// share one table). Size() is the width of every token mask built over it, which may exceed the
// tokenizer's vocab when the output layer is padded: the padding ids are never allowed. A stop id
// is allowed only where the grammar may end; a never-text id is never allowed.
// The byte strings are the decoded pieces (Tokenizer::TokenToPiece: GPT-2's byte alphabet undone,
// SentencePiece's ▁ as a space, <0xXX> as its byte), so xgrammar reads them as raw bytes (RAW).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "util/status.h"  // Result

namespace chorus {

class Tokenizer;

// 32-bit words of a token mask over `n_tokens` ids: bit (t % 32) of word t / 32 is token t.
constexpr size_t MaskWords(int32_t n_tokens) { return (static_cast<size_t>(n_tokens) + 31) / 32; }
// Whether token t is allowed by `mask` (t outside the mask: no).
inline bool MaskAllows(std::span<const uint32_t> mask, int32_t t) {
  return t >= 0 && static_cast<size_t>(t) / 32 < mask.size() && ((mask[t / 32] >> (t % 32)) & 1u);
}

class TokenVocab {
 public:
  struct Impl;  // the xgrammar::TokenizerInfo and the never-text ids (token_vocab_impl.h)

  // From the model's tokenizer: normal, byte and user-defined tokens are text; control, unknown
  // and unused ones are never text; stop ids are the tokens that end generation
  // (Tokenizer::IsEndOfGeneration). n_logits: the width of the model's logits (0: the vocab's size);
  // it may not be smaller than the vocab.
  static Result<TokenVocab> FromTokenizer(const Tokenizer& tokenizer, int32_t n_logits = 0);
  // From pieces directly (tests, other tokenizers): an empty piece is never text; every stop id
  // must be < pieces.size(); at least one stop id.
  static Result<TokenVocab> FromPieces(const std::vector<std::string>& pieces, std::span<const int32_t> stop_ids,
                                       int32_t n_logits = 0);

  int32_t Size() const;
  const std::vector<int32_t>& StopIds() const;
  // Whether `id` can never be accepted: never text and not a stop id, or out of range.
  bool IsNeverAllowed(int32_t id) const;

  const Impl& impl() const { return *impl_; }

 private:
  explicit TokenVocab(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace chorus
