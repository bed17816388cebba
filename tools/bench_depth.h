// Decode-at-depth benchmark across KV formats, beside llama.cpp's KV types.
#pragma once
#include <string>
#include <vector>

#include "tools/common.h"

namespace chorus::cli {

struct DepthBenchArgs {
  std::string model, python = "python3";
  std::vector<size_t> depths;
  std::vector<std::string> kv{"f16/f16"};
  std::vector<std::string> peer_kv{"f16", "q8_0", "q4_0"};
  int threads = 2, tg = 32, reps = 3;
  bool json = false;
};

int RunDepthBench(const Model& model, const DepthBenchArgs& a);

}  // namespace chorus::cli
