// Shared by the engine tests on the real model: its path and a ~300-token document (several
// sealed blocks and a tail).
#pragma once
#include <string>

namespace chorus::testing_doc {

inline constexpr const char* kModel = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

inline std::string Document() {
  const std::string d =
      "The Roman Empire was the post-Republican state of ancient Rome. It included large territorial holdings "
      "around the Mediterranean Sea in Europe, North Africa, and Western Asia, and was ruled by emperors. ";
  std::string out;
  for (int i = 0; i < 6; ++i) out += d;
  return out;
}

}  // namespace chorus::testing_doc
