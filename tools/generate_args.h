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
  PolicyFlags pol;   // --policy cocktail|comix: through the Engine (tools/generate_policy.cc)
  std::string doc;   // --doc FILE: the context document (cocktail: required)
  int n_predict = 64;
  int threads = DefaultThreads();
  int ctx = 0;
  bool chat = false, json = false;
  SamplingOptions sampling{.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .seed = 0};
  int64_t seed = -1;
};

// `chorus generate --policy cocktail|comix`: one agent of the Engine. Cocktail: --doc is shared with
// its chunk map chosen by the question's relevance (Engine::ShareFor: sealed, reordered by
// precision), the question is the agent's prompt. Comix: the agent (and --doc's context, if given)
// are units under --kv-budget / --kv-avg-bits. Streams the answer; prints the chunk map or the
// allocation and the measured KV bytes.
int RunGenerateWithPolicy(const GenerateArgs& a);

}  // namespace chorus::cli
