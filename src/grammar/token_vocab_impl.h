// TokenVocab::Impl: the xgrammar side of TokenVocab, for src/grammar/*.cc only (keeps xgrammar's
// headers out of the library's interface).
#pragma once
#include <xgrammar/xgrammar.h>

#include <vector>

#include "grammar/token_vocab.h"

namespace chorus {

struct TokenVocab::Impl {
  xgrammar::TokenizerInfo info;
  std::vector<uint8_t> never_allowed;  // (Size()) 1 = never text and not a stop id
  std::vector<int32_t> stop_ids;
};

}  // namespace chorus
