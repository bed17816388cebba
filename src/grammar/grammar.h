// Grammar: a compiled constraint on a model's output — any JSON object, a JSON Schema or an EBNF
// grammar — over one TokenVocab. GrammarCompiler makes them; GrammarMatcher follows one sequence.
//
// Invariants: immutable once compiled; copies share one compiled form (xgrammar's per-token mask
// cache), so a Grammar is shared by every request that asks for the same text, from any thread.
// A Grammar is only valid with the TokenVocab it was compiled for.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "grammar/token_vocab.h"

namespace chorus {

// What the text of a GrammarSpec is.
enum class GrammarKind {
  kJsonObject,  // any JSON object (response_format json_object); the text is ignored
  kJsonSchema,  // a JSON Schema, enforced strictly: no properties beyond those listed
  kEbnf,        // xgrammar's EBNF (GBNF-like), the start rule named root
  // xgrammar's structural tag ({"type": "structural_tag", "format": {...}} or the format alone):
  // free text with triggered, schema-constrained regions — tool calls. Its json_schema parts are
  // checked as kJsonSchema is.
  kStructuralTag,
};

struct GrammarSpec {
  GrammarKind kind = GrammarKind::kJsonObject;
  std::string text;  // the schema or the grammar
};

class Grammar {
 public:
  struct Impl;  // the xgrammar::CompiledGrammar (grammar_impl.h)

  const TokenVocab& vocab() const;
  // Whether both are one compiled form (the compiler's cache gave the same grammar).
  bool SameCompiled(const Grammar& other) const;
  // Bytes the compiled form holds (the mask cache), as xgrammar counts them.
  size_t MemoryBytes() const;
  // The grammar in EBNF, as compiled (for logs and tests).
  std::string ToEbnf() const;

  const Impl& impl() const { return *impl_; }
  explicit Grammar(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

 private:
  std::shared_ptr<const Impl> impl_;
};

}  // namespace chorus
