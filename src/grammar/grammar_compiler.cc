#include "grammar/grammar_compiler.h"

#include <exception>
#include <nlohmann/json.hpp>

#include "grammar/grammar_impl.h"
#include "grammar/schema_support.h"
#include "grammar/xgrammar_error.h"

namespace chorus {

namespace {
// Every json_schema inside a structural tag, checked as a kJsonSchema spec is.
Status CheckTagSchemas(const nlohmann::json& j) {
  if (j.is_object()) {
    if (j.value("type", "") == "json_schema" && j.contains("json_schema"))
      CHORUS_RETURN_IF_ERROR(CheckSchemaSupport(j["json_schema"]));
    for (const auto& [k, v] : j.items())
      if (k != "json_schema") CHORUS_RETURN_IF_ERROR(CheckTagSchemas(v));  // a schema is not a tag
  } else if (j.is_array()) {
    for (const auto& v : j) CHORUS_RETURN_IF_ERROR(CheckTagSchemas(v));
  }
  return Status::Ok();
}
}  // namespace

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
      case GrammarKind::kStructuralTag: {
        nlohmann::json tag = nlohmann::json::parse(spec.text, nullptr, /*allow_exceptions=*/false);
        if (tag.is_discarded() || !tag.is_object())
          return Status::Error("structural tag is not a JSON object: {:.80}", spec.text);
        if (!tag.contains("format")) tag = nlohmann::json{{"type", "structural_tag"}, {"format", tag}};
        CHORUS_RETURN_IF_ERROR(CheckTagSchemas(tag));
        compiled = impl_->compiler.CompileStructuralTag(tag.dump());
        break;
      }
    }
    return Grammar(std::make_shared<const Grammar::Impl>(Grammar::Impl{std::move(compiled), vocab_}));
  } catch (const std::exception& e) {
    const char* what = spec.kind == GrammarKind::kEbnf            ? "EBNF grammar"
                       : spec.kind == GrammarKind::kStructuralTag ? "structural tag"
                                                                  : "JSON Schema";
    return Status::Error("{} rejected by the grammar engine: {}", what, XgrammarMessage(e));
  }
}

}  // namespace chorus
