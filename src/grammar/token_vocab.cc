#include "grammar/token_vocab.h"

#include <exception>

#include "grammar/token_vocab_impl.h"
#include "grammar/xgrammar_error.h"
#include "model/tokenizer.h"

namespace chorus {

Result<TokenVocab> TokenVocab::FromPieces(const std::vector<std::string>& pieces, std::span<const int32_t> stop_ids,
                                          int32_t n_logits) {
  const int32_t n = static_cast<int32_t>(pieces.size());
  if (n == 0) return Status::Error("token vocab is empty: the grammar engine needs the model's tokens");
  if (n_logits == 0) n_logits = n;
  if (n_logits < n) {
    return Status::Error("the model's logits have {} entries, fewer than its {} tokens: the vocab cannot be masked",
                         n_logits, n);
  }
  if (stop_ids.empty()) {
    return Status::Error("token vocab has no stop token: a constrained answer could never end");
  }
  std::vector<int32_t> stops(stop_ids.begin(), stop_ids.end());
  for (int32_t id : stops) {
    if (id < 0 || id >= n) return Status::Error("stop token id {} is outside the vocab [0, {})", id, n);
  }
  std::vector<uint8_t> never(n_logits, 0);
  for (int32_t i = 0; i < n_logits; ++i) never[i] = i >= n || pieces[i].empty();
  for (int32_t id : stops) never[id] = 0;
  try {
    xgrammar::TokenizerInfo info(pieces, xgrammar::VocabType::RAW, n_logits, stops, /*add_prefix_space=*/false);
    return TokenVocab(std::make_shared<const Impl>(Impl{std::move(info), std::move(never), std::move(stops)}));
  } catch (const std::exception& e) {
    return Status::Error("building the grammar engine's token vocab: {}", XgrammarMessage(e));
  }
}

Result<TokenVocab> TokenVocab::FromTokenizer(const Tokenizer& tokenizer, int32_t n_logits) {
  const int32_t n = tokenizer.n_vocab();
  std::vector<std::string> pieces(n);
  std::vector<int32_t> stops;
  for (int32_t id = 0; id < n; ++id) {
    if (tokenizer.IsEndOfGeneration(id)) {
      stops.push_back(id);
      continue;  // its piece stays empty: a stop is never text
    }
    switch (tokenizer.GetTokenType(id)) {
      case TokenType::kControl:
      case TokenType::kUnknown:
      case TokenType::kUnused: break;  // never text
      default: pieces[id] = tokenizer.TokenToPiece(id);
    }
  }
  return FromPieces(pieces, stops, n_logits);
}

int32_t TokenVocab::Size() const { return static_cast<int32_t>(impl_->never_allowed.size()); }
const std::vector<int32_t>& TokenVocab::StopIds() const { return impl_->stop_ids; }
bool TokenVocab::IsNeverAllowed(int32_t id) const { return id < 0 || id >= Size() || impl_->never_allowed[id] != 0; }

}  // namespace chorus
