// Shared by the engine tests on the real model: its path and a ~300-token document (several
// sealed blocks and a tail).
#pragma once
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "chorus/engine.h"

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

// The real model with 2 threads and `o`'s other options; nullptr (and a test failure) if it does not open.
inline std::unique_ptr<Engine> OpenEngine(EngineOptions o = {}) {
  o.model_path = kModel;
  o.threads = 2;
  auto e = Engine::Open(o);
  EXPECT_TRUE(e.ok()) << e.status().message();
  return e.ok() ? std::move(e).value() : nullptr;
}

}  // namespace chorus::testing_doc
