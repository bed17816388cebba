#include "grammar/grammar_matcher.h"

#include <exception>

#include "grammar/grammar_impl.h"
#include "grammar/xgrammar_error.h"

namespace chorus {

struct GrammarMatcher::Impl {
  xgrammar::GrammarMatcher matcher;
  TokenVocab vocab;
};

GrammarMatcher::GrammarMatcher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GrammarMatcher::GrammarMatcher(GrammarMatcher&&) noexcept = default;
GrammarMatcher& GrammarMatcher::operator=(GrammarMatcher&&) noexcept = default;
GrammarMatcher::~GrammarMatcher() = default;

Result<GrammarMatcher> GrammarMatcher::Create(const Grammar& grammar) {
  try {
    return GrammarMatcher(
        std::make_unique<Impl>(Impl{xgrammar::GrammarMatcher(grammar.impl().compiled), grammar.vocab()}));
  } catch (const std::exception& e) {
    return Status::Error("starting a grammar matcher: {}", XgrammarMessage(e));
  }
}

Status GrammarMatcher::FillMask(std::span<uint32_t> mask) {
  const size_t want = MaskWords(impl_->vocab.Size());
  if (mask.size() != want) {
    return Status::Error("token mask has {} words, the vocab of {} tokens needs {}", mask.size(), impl_->vocab.Size(),
                         want);
  }
  if (impl_->matcher.IsTerminated()) return Status::Error("the grammar has ended: no token may follow the stop token");
  int64_t shape[1] = {static_cast<int64_t>(want)};
  DLTensor t{};
  t.data = mask.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = DLDataType{kDLInt, 32, 1};
  t.shape = shape;
  try {
    impl_->matcher.FillNextTokenBitmask(&t);
  } catch (const std::exception& e) {
    return Status::Error("filling the token mask: {}", XgrammarMessage(e));
  }
  return Status::Ok();
}

bool GrammarMatcher::Accept(int32_t token) {
  // Refused here before xgrammar sees them: it would log a warning for each.
  if (impl_->matcher.IsTerminated() || impl_->vocab.IsNeverAllowed(token)) return false;
  try {
    return impl_->matcher.AcceptToken(token);
  } catch (const std::exception&) {
    return false;
  }
}

bool GrammarMatcher::IsTerminated() const { return impl_->matcher.IsTerminated(); }
const TokenVocab& GrammarMatcher::vocab() const { return impl_->vocab; }

}  // namespace chorus
