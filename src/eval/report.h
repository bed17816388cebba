// One versioned JSON schema for every evaluation's report. A harness's ToJson returns an object
// with "schema": kEvalSchema and "kind" (which harness: "needle", "perplexity", ...) beside its own
// fields; a reader checks both before reading the rest. Bump the version when a field changes
// meaning or goes; adding a field keeps it.
#pragma once
#include <nlohmann/json.hpp>
#include <string_view>

namespace chorus::eval {

inline constexpr const char* kEvalSchema = "chorus.eval/1";

// `body` (an object) with the schema and kind fields set.
inline nlohmann::json Versioned(std::string_view kind, nlohmann::json body) {
  body["schema"] = kEvalSchema;
  body["kind"] = std::string(kind);
  return body;
}

}  // namespace chorus::eval
