// TinyModelDir("name"): a fresh directory in the test's temp dir holding tiny.gguf, the 2-layer
// random-weight model (300-token vocabulary) every eval harness test runs on; `chat_template`: its
// tokenizer.chat_template (none by default).
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "../model/synthetic_model.h"

namespace chorus::eval {

inline std::string TinyModelDir(const std::string& name, const std::string& chat_template = "") {
  const std::string dir = std::string(::testing::TempDir()) + "/" + name + "." + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  EXPECT_TRUE(testing::SyntheticModel(testing::TinySpec(name, chat_template)).WriteFile(dir + "/tiny.gguf").ok())
      << dir;
  return dir;
}

}  // namespace chorus::eval
