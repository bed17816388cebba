#include "engine/output_constraints.h"

#include "model/model.h"

namespace chorus {

Result<Grammar> OutputConstraints::Compile(const OutputConstraint& c) {
  GrammarCompiler* compiler = nullptr;
  {
    std::lock_guard lock(mu_);
    if (!compiler_) {
      CHORUS_ASSIGN_OR_RETURN(TokenVocab vocab, TokenVocab::FromTokenizer(
                                                    model_.tokenizer(), static_cast<int32_t>(model_.config().n_vocab)));
      CHORUS_ASSIGN_OR_RETURN(GrammarCompiler made, GrammarCompiler::Create(vocab));
      compiler_.emplace(std::move(made));
    }
    compiler = &*compiler_;
  }
  using K = OutputConstraint::Kind;
  GrammarSpec spec{.text = c.text};
  switch (c.kind) {
    case K::kNone: return Status::Error("no constraint to compile");
    case K::kJsonObject: spec.kind = GrammarKind::kJsonObject; break;
    case K::kJsonSchema: spec.kind = GrammarKind::kJsonSchema; break;
    case K::kEbnf: spec.kind = GrammarKind::kEbnf; break;
    case K::kStructuralTag: spec.kind = GrammarKind::kStructuralTag; break;
  }
  return compiler->Compile(spec);
}

Result<std::unique_ptr<GrammarMatcher>> OutputConstraints::Start(const OutputConstraint& c) {
  CHORUS_ASSIGN_OR_RETURN(Grammar g, Compile(c));
  CHORUS_ASSIGN_OR_RETURN(GrammarMatcher m, GrammarMatcher::Create(g));
  return std::make_unique<GrammarMatcher>(std::move(m));
}

}  // namespace chorus
