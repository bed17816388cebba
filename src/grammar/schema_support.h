// CheckSchemaSupport: whether the grammar engine can enforce every constraint of a JSON Schema.
//
// xgrammar (0.2.9) silently drops some constraints — it ignores keywords it does not know (not,
// if/then/else, dependentRequired, uniqueItems, contains ...), turns allOf of several schemas into
// any JSON, keeps only the first of $ref > const > enum > anyOf > oneOf > allOf > type when a schema
// has several, ignores multipleOf on numbers, unknown formats, and length limits beside a pattern or
// a format. An answer constrained by such a grammar could break the schema, so those schemas are
// refused here, before compiling, with the feature and where it is (a JSON pointer); the server
// answers 400. Known and accepted: oneOf is enforced as anyOf (an answer may match two branches).
#pragma once
#include <nlohmann/json_fwd.hpp>

#include "util/status.h"  // Status

namespace chorus {

// Ok, or an error naming the first unsupported feature: "JSON Schema feature 'not' at
// /properties/a is not supported by the grammar engine ...". Does not check that the schema is
// otherwise valid: the compiler does.
Status CheckSchemaSupport(const nlohmann::json& schema);

}  // namespace chorus
