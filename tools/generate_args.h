// The arguments of `chorus generate` (tools/cmd_generate.cc) and its --policy path
// (tools/generate_policy.cc).
#pragma once
#include <cstdint>
#include <string>

#include "model/sampler.h"       // SamplingOptions
#include "tools/common.h"        // KvFlags, DefaultThreads
#include "tools/policy_flags.h"  // PolicyFlags

namespace chorus::cli {

struct GenerateArgs {
  std::string model, prompt, prompt_file, system;
  KvFlags kv;
  PolicyFlags pol;   // --policy comix|cocktail|cocktail-paper: through the Engine (tools/generate_policy.cc)
  std::string doc;   // --doc FILE: the context document (cocktail, cocktail-paper: required)
  int n_predict = 64;
  int threads = DefaultThreads();
  int ctx = 0;
  bool chat = false, json = false;
  SamplingOptions sampling{.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .seed = 0};
  int64_t seed = -1;
};

// `chorus generate --policy comix|cocktail|cocktail-paper`: one agent of the Engine. comix: the agent
// (and --doc's context, if given) are units under --kv-budget / --kv-avg-bits. cocktail: the same
// allocator and bytes; --doc (required) is shared with Engine::ShareFor and the question (-p/-f,
// required) as its query, each block's error weighted by its chunk's relevance. cocktail-paper:
// --doc's chunk map chosen by the question (sealed, reordered by precision), the question and answer
// at --kv-k/--kv-v. Streams the answer; prints the chunk map or the allocation and the measured KV
// bytes.
int RunGenerateWithPolicy(const GenerateArgs& a);

}  // namespace chorus::cli
