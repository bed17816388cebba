// OutputConstraints: the engine's grammar compiler for AgentOptions::constraint — built over the
// model's vocabulary on first use, then compiled grammars cached by their text.
// Invariants: thread-safe (Engine::CheckConstraint runs on server threads while the engine thread
// submits); a kNone constraint never reaches it; an error names why the constraint cannot be enforced.
#pragma once
#include <memory>
#include <mutex>
#include <optional>

#include "chorus/engine.h"             // OutputConstraint
#include "grammar/grammar_compiler.h"  // GrammarCompiler, Grammar
#include "grammar/grammar_matcher.h"   // GrammarMatcher

namespace chorus {

class Model;

class OutputConstraints {
 public:
  explicit OutputConstraints(const Model& model) : model_(model) {}
  // The constraint's compiled grammar (from the cache when this text was compiled before).
  Result<Grammar> Compile(const OutputConstraint& c);
  // A matcher at the start of the constraint's grammar, for one request.
  Result<std::unique_ptr<GrammarMatcher>> Start(const OutputConstraint& c);

 private:
  const Model& model_;
  std::mutex mu_;  // guards the compiler's creation; the compiler itself is thread-safe
  std::optional<GrammarCompiler> compiler_;
};

}  // namespace chorus
