// GrammarMatcher: where one sequence stands in its Grammar — which tokens may come next (FillMask),
// the token that came (Accept), and whether the grammar has ended (IsTerminated).
//
// Invariants: a token outside the last mask is refused by Accept and leaves the state unchanged;
// a stop id is allowed only where the grammar may end, and accepting it terminates the matcher;
// after that FillMask is an error and Accept refuses everything. No rollback.
// Threads: one matcher belongs to one sequence and is used by one thread at a time; matchers of
// one Grammar run in parallel on different threads.
#pragma once
#include <cstdint>
#include <memory>
#include <span>

#include "grammar/grammar.h"
#include "util/status.h"

namespace chorus {

class GrammarMatcher {
 public:
  static Result<GrammarMatcher> Create(const Grammar& grammar);

  GrammarMatcher(GrammarMatcher&&) noexcept;
  GrammarMatcher& operator=(GrammarMatcher&&) noexcept;
  ~GrammarMatcher();

  // Writes the allowed next tokens into `mask`: MaskWords(vocab().Size()) words, bit t % 32 of word
  // t / 32 set when token t is allowed. An error if the size is wrong or the matcher terminated.
  Status FillMask(std::span<uint32_t> mask);
  // Advances by `token` if the grammar allows it here; false (state unchanged) if not.
  bool Accept(int32_t token);
  // A stop token was accepted: the answer is complete.
  bool IsTerminated() const;

  const TokenVocab& vocab() const;

 private:
  struct Impl;
  explicit GrammarMatcher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace chorus
