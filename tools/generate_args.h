// The arguments of `chorus generate` (tools/cmd_generate.cc; its --policy path runs
// eval::RunPolicyGenerate).
#pragma once
#include <cstdint>
#include <string>

#include "eval/uniform_generate.h"  // SamplingOptions (model/sampler.h)
#include "tools/common.h"        // KvFlags, DefaultThreads
#include "tools/policy_flags.h"  // PolicyFlags

namespace chorus::cli {

struct GenerateArgs {
  std::string model, prompt, prompt_file, system;
  KvFlags kv;
  PolicyFlags pol;   // --policy comix|cocktail|cocktail-paper: through the Engine (eval/policy_generate.h)
  std::string doc;   // --doc FILE: the context document (cocktail, cocktail-paper: required)
  int n_predict = 64;
  int threads = DefaultThreads();
  int ctx = 0;
  bool chat = false, json = false;
  SamplingOptions sampling{.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .seed = 0};
  int64_t seed = -1;
};

}  // namespace chorus::cli
