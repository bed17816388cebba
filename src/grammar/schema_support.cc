#include "grammar/schema_support.h"

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_set>

namespace chorus {
namespace {

using Json = nlohmann::json;

// Keywords that constrain and that xgrammar enforces (with the exceptions checked below).
// clang-format off
const std::unordered_set<std::string_view> kEnforced = {
    "type", "enum", "const",
    "properties", "required", "additionalProperties", "patternProperties", "propertyNames", "minProperties",
    "maxProperties", "unevaluatedProperties",
    "items", "prefixItems", "unevaluatedItems", "minItems", "maxItems",
    "minLength", "maxLength", "pattern", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions"};
// clang-format on
// Keywords that do not constrain an instance.
const std::unordered_set<std::string_view> kAnnotations = {
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated", "readOnly", "writeOnly"};
// The formats xgrammar turns into a regex (JSONSchemaConverter::JSONFormatToRegexPattern).
const std::unordered_set<std::string_view> kFormats = {
    "email",    "date", "time", "date-time",     "duration",     "ipv4",         "ipv6",
    "hostname", "uuid", "uri",  "uri-reference", "uri-template", "json-pointer", "relative-json-pointer"};
// xgrammar reads one of these per schema, the first present in this order, and drops the others.
constexpr std::string_view kExclusive[] = {"$ref", "anyOf", "oneOf", "allOf"};

std::string Escape(std::string_view key) {  // JSON pointer token (RFC 6901)
  std::string out;
  for (char c : key) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

Status Unsupported(std::string_view feature, const std::string& at, std::string_view why) {
  return Status::Error("JSON Schema feature '{}' at {} is not supported by the grammar engine: {}", feature,
                       at.empty() ? "/" : at, why);
}

Status Check(const Json& s, const std::string& at);

Status CheckEach(const Json& v, const std::string& at, bool named) {
  if (named && v.is_object()) {
    for (const auto& [k, sub] : v.items()) CHORUS_RETURN_IF_ERROR(Check(sub, at + "/" + Escape(k)));
  } else if (!named && v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i) CHORUS_RETURN_IF_ERROR(Check(v[i], at + "/" + std::to_string(i)));
  } else if (!named) {
    CHORUS_RETURN_IF_ERROR(Check(v, at));
  }
  return Status::Ok();  // a wrong shape is the compiler's error to report
}

Status Check(const Json& s, const std::string& at) {
  if (!s.is_object()) return Status::Ok();  // true / false / malformed: the compiler decides
  for (const auto& [key, value] : s.items()) {
    if (kEnforced.count(key) || kAnnotations.count(key)) continue;
    if (key == "uniqueItems" && value == Json(false)) continue;  // no constraint
    return Unsupported(key, at, "the keyword would be ignored and the answer could break it");
  }
  // A combinator or $ref beside another constraint: xgrammar keeps one and drops the rest.
  const std::string_view* first = nullptr;
  for (const auto& k : kExclusive) {
    if (!s.contains(k)) continue;
    if (first) return Unsupported(k, at, fmt::format("it would be dropped beside '{}' in the same schema", *first));
    first = &k;
  }
  if (first) {
    for (const auto& [key, value] : s.items()) {
      if (key == *first || kAnnotations.count(key) || key == "$defs" || key == "definitions") continue;
      return Unsupported(key, at,
                         fmt::format("it would be dropped beside '{}' in the same schema; move it "
                                     "into each branch",
                                     *first));
    }
  }
  if (s.contains("allOf") && s["allOf"].is_array() && s["allOf"].size() > 1) {
    return Unsupported("allOf", at, "allOf of more than one schema would accept any JSON value");
  }
  if (s.contains("$ref") && s["$ref"].is_string() && !s["$ref"].get<std::string>().starts_with("#")) {
    return Unsupported(
        "$ref", at,
        fmt::format("only references inside the schema ('#...') resolve, not '{}'", s["$ref"].get<std::string>()));
  }
  if (s.contains("multipleOf")) {
    if (!(s.contains("type") && s["type"] == Json("integer"))) {
      return Unsupported("multipleOf", at, "multipleOf is enforced only on {\"type\": \"integer\"}");
    }
    for (const char* bound : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
      if (s.contains(bound)) {
        return Unsupported("multipleOf", at, fmt::format("multipleOf together with '{}' is not enforced", bound));
      }
    }
  }
  if (s.contains("format")) {
    const Json& f = s["format"];
    if (!f.is_string() || !kFormats.count(f.get<std::string>())) {
      return Unsupported("format", at,
                         fmt::format("format {} is not enforced; enforced: email, date, time, date-time, duration, "
                                     "ipv4, ipv6, hostname, uuid, uri, uri-reference, uri-template, json-pointer, "
                                     "relative-json-pointer",
                                     f.dump()));
    }
  }
  if ((s.contains("pattern") || s.contains("format")) && (s.contains("minLength") || s.contains("maxLength"))) {
    return Unsupported(s.contains("minLength") ? "minLength" : "maxLength", at,
                       "length limits are not enforced together with a pattern or a format");
  }
  for (const char* k : {"properties", "patternProperties", "$defs", "definitions"}) {
    if (s.contains(k)) CHORUS_RETURN_IF_ERROR(CheckEach(s[k], at + "/" + k, /*named=*/true));
  }
  for (const char* k : {"additionalProperties", "unevaluatedProperties", "propertyNames", "items", "unevaluatedItems",
                        "prefixItems", "anyOf", "oneOf", "allOf"}) {
    if (s.contains(k)) CHORUS_RETURN_IF_ERROR(CheckEach(s[k], at + "/" + k, /*named=*/false));
  }
  return Status::Ok();
}

}  // namespace

Status CheckSchemaSupport(const nlohmann::json& schema) { return Check(schema, ""); }

}  // namespace chorus
