#include "grammar/grammar.h"

#include "grammar/grammar_impl.h"

namespace chorus {

const TokenVocab& Grammar::vocab() const { return impl_->vocab; }
bool Grammar::SameCompiled(const Grammar& other) const {
  return impl_->compiled.ImplPtr() == other.impl_->compiled.ImplPtr();
}
size_t Grammar::MemoryBytes() const { return impl_->compiled.MemorySizeBytes(); }
std::string Grammar::ToEbnf() const { return impl_->compiled.GetGrammar().ToString(); }

}  // namespace chorus
