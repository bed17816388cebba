// GrammarCompiler: compiles a GrammarSpec into a Grammar over one TokenVocab, once per text —
// compiled grammars are cached by their text (xgrammar's cache, bounded by cache_bytes, least
// recently used dropped first), so a schema that every request sends compiles once.
//
// Invariants: errors are Status, never exceptions (xgrammar throws; Compile catches). A JSON
// Schema is refused when it is not JSON, when the grammar engine cannot enforce one of its
// features (CheckSchemaSupport: the error names it) or when xgrammar rejects it; a refused spec
// never becomes an unconstrained grammar.
// Threads: Compile may be called from several threads at once (xgrammar keeps its compiled grammars
// in a locked LRU cache); a compile runs on the calling thread plus up to `threads - 1` of xgrammar's.
#pragma once
#include <cstdint>
#include <memory>

#include "grammar/grammar.h"
#include "grammar/token_vocab.h"
#include "util/status.h"

namespace chorus {

struct GrammarCompilerOptions {
  int threads = 1;                  // xgrammar's compile threads
  int64_t cache_bytes = 256 << 20;  // compiled grammars kept; -1: unbounded
};

class GrammarCompiler {
 public:
  static Result<GrammarCompiler> Create(const TokenVocab& vocab, const GrammarCompilerOptions& options = {});

  // The spec's Grammar, from the cache when this text was compiled before. JSON is generated
  // compact (no whitespace beyond xgrammar's ", " and ": " separators), which keeps a model from
  // padding an answer with endless whitespace.
  Result<Grammar> Compile(const GrammarSpec& spec);

  const TokenVocab& vocab() const { return vocab_; }

 private:
  struct Impl;
  GrammarCompiler(TokenVocab vocab, std::shared_ptr<Impl> impl) : vocab_(std::move(vocab)), impl_(std::move(impl)) {}
  TokenVocab vocab_;
  std::shared_ptr<Impl> impl_;
};

}  // namespace chorus
