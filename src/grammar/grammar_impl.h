// Grammar::Impl: the xgrammar side of Grammar, for src/grammar/*.cc only.
#pragma once
#include <xgrammar/xgrammar.h>

#include "grammar/grammar.h"
#include "grammar/token_vocab_impl.h"

namespace chorus {

struct Grammar::Impl {
  xgrammar::CompiledGrammar compiled;
  TokenVocab vocab;
};

}  // namespace chorus
