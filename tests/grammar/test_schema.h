// The JSON Schema the grammar tests constrain to (required properties, an enum, bounded integers,
// nested arrays), a validator for it written by hand, and random decoding from the mask.
#pragma once
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "grammar/grammar_matcher.h"

namespace chorus::grammar_test {

inline const char* kSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 12},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "role": {"enum": ["admin", "user", "guest"]},
    "scores": {"type": "array", "maxItems": 3,
               "items": {"type": "array", "maxItems": 3, "items": {"type": "integer", "minimum": -5, "maximum": 5}}},
    "active": {"type": "boolean"}
  },
  "required": ["name", "age", "role", "scores"],
  "additionalProperties": false
})";

inline size_t CodePoints(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

inline bool IntIn(const nlohmann::json& v, int64_t lo, int64_t hi) {
  return v.is_number_integer() && v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
}

// "" when `v` is valid against kSchema, else what breaks it.
inline std::string Violation(const nlohmann::json& v) {
  if (!v.is_object()) return "not an object";
  for (const char* k : {"name", "age", "role", "scores"}) {
    if (!v.contains(k)) return std::string("missing required ") + k;
  }
  for (const auto& [k, x] : v.items()) {
    if (k == "name") {
      if (!x.is_string() || CodePoints(x.get<std::string>()) > 12) return "bad name";
    } else if (k == "age") {
      if (!IntIn(x, 0, 150)) return "bad age";
    } else if (k == "role") {
      if (x != "admin" && x != "user" && x != "guest") return "bad role";
    } else if (k == "scores") {
      if (!x.is_array() || x.size() > 3) return "bad scores";
      for (const auto& row : x) {
        if (!row.is_array() || row.size() > 3) return "bad scores row";
        for (const auto& s : row) {
          if (!IntIn(s, -5, 5)) return "bad score";
        }
      }
    } else if (k == "active") {
      if (!x.is_boolean()) return "bad active";
    } else {
      return "extra property " + k;
    }
  }
  return "";
}

struct Decoded {
  std::string text;
  std::vector<int32_t> tokens;  // accepted, the stop token included
  int steps = 0;
  bool terminated = false;
  bool every_pick_accepted = true;
};

// Picks tokens uniformly among those the mask allows until the matcher terminates (or max_steps);
// piece(id) gives a token's bytes (the stop token's are not appended).
inline Decoded DecodeRandomly(GrammarMatcher& m, uint64_t seed, int max_steps,
                              const std::function<std::string(int32_t)>& piece) {
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> mask(MaskWords(m.vocab().Size()));
  std::vector<int32_t> allowed;
  Decoded d;
  const auto& stops = m.vocab().StopIds();
  while (!m.IsTerminated() && d.steps < max_steps) {
    if (!m.FillMask(mask).ok()) break;
    allowed.clear();
    for (int32_t t = 0; t < m.vocab().Size(); ++t) {
      if (MaskAllows(mask, t)) allowed.push_back(t);
    }
    if (allowed.empty()) break;
    const int32_t t = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
    if (!m.Accept(t)) {
      d.every_pick_accepted = false;
      break;
    }
    d.tokens.push_back(t);
    if (std::find(stops.begin(), stops.end(), t) == stops.end()) d.text += piece(t);
    ++d.steps;
  }
  d.terminated = m.IsTerminated();
  return d;
}

}  // namespace chorus::grammar_test
