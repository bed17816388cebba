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
  const testing::SyntheticSpec s{.name = name,
                                 .n_layer = 2,
                                 .n_embd = 64,
                                 .n_head = 2,
                                 .n_head_kv = 1,
                                 .head_dim = 32,
                                 .n_ff = 128,
                                 .n_vocab = 300,
                                 .chat_template = chat_template};
  EXPECT_TRUE(testing::SyntheticModel(s).WriteFile(dir + "/tiny.gguf").ok()) << dir;
  return dir;
}

}  // namespace chorus::eval
