#include "grammar/grammar_compiler.h"

#include <exception>
#include <nlohmann/json.hpp>

#include "grammar/grammar_impl.h"
#include "grammar/schema_support.h"
#include "grammar/xgrammar_error.h"

namespace chorus {

struct GrammarCompiler::Impl {
  xgrammar::GrammarCompiler compiler;
};

Result<GrammarCompiler> GrammarCompiler::Create(const TokenVocab& vocab, const GrammarCompilerOptions& options) {
  if (options.threads < 1) return Status::Error("grammar compile threads must be at least 1, not {}", options.threads);
  try {
    auto impl = std::make_shared<Impl>(Impl{xgrammar::GrammarCompiler(vocab.impl().info, options.threads,
                                                                      /*cache_enabled=*/true, options.cache_bytes)});
    return GrammarCompiler(vocab, std::move(impl));
  } catch (const std::exception& e) {
    return Status::Error("creating the grammar compiler: {}", XgrammarMessage(e));
  }
}

Result<Grammar> GrammarCompiler::Compile(const GrammarSpec& spec) {
  constexpr bool kAnyWhitespace = false;
  try {
    xgrammar::CompiledGrammar compiled(xgrammar::NullObj{});
    switch (spec.kind) {
      case GrammarKind::kJsonObject:
        // Any object: a schema of type object, not strict, takes any properties of any type.
        compiled = impl_->compiler.CompileJSONSchema(R"({"type": "object"})", kAnyWhitespace, std::nullopt,
                                                     std::nullopt, /*strict_mode=*/false);
        break;
      case GrammarKind::kJsonSchema: {
        nlohmann::json schema = nlohmann::json::parse(spec.text, nullptr, /*allow_exceptions=*/false);
        if (schema.is_discarded()) return Status::Error("JSON Schema is not valid JSON: {:.80}", spec.text);
        if (!schema.is_object() && !schema.is_boolean()) {
          return Status::Error("JSON Schema must be an object or a boolean, not {:.80}", spec.text);
        }
        CHORUS_RETURN_IF_ERROR(CheckSchemaSupport(schema));
        compiled = impl_->compiler.CompileJSONSchema(spec.text, kAnyWhitespace, std::nullopt, std::nullopt,
                                                     /*strict_mode=*/true);
        break;
      }
      case GrammarKind::kEbnf: compiled = impl_->compiler.CompileGrammar(spec.text, "root"); break;
    }
    return Grammar(std::make_shared<const Grammar::Impl>(Grammar::Impl{std::move(compiled), vocab_}));
  } catch (const std::exception& e) {
    const char* what = spec.kind == GrammarKind::kEbnf ? "EBNF grammar" : "JSON Schema";
    return Status::Error("{} rejected by the grammar engine: {}", what, XgrammarMessage(e));
  }
}

}  // namespace chorus
