// The arguments of `chorus generate` (tools/cmd_generate.cc registers them) and the configs of its
// two runners that they describe: eval::RunUniformGenerate (uniform formats) and
// eval::RunPolicyGenerate (any other policy: one agent of the Engine).
#pragma once
#include <cstdint>
#include <string>

#include "chorus/status.h"
#include "eval/policy_generate.h"   // PolicyGenerateConfig
#include "eval/uniform_generate.h"  // UniformGenerateConfig, SamplingOptions (model/sampler.h)
#include "tools/common.h"           // KvFlags, DefaultThreads
#include "tools/policy_flags.h"     // PolicyFlags

namespace chorus::cli {

struct GenerateArgs {
  std::string model, prompt, prompt_file, system;
  KvFlags kv;
  PolicyFlags pol;  // --policy comix|cocktail|cocktail-paper: through the Engine (eval/policy_generate.h)
  std::string doc;  // --doc FILE: the context document (cocktail, cocktail-paper: required)
  int n_predict = 64;
  int threads = DefaultThreads();
  int ctx = 0;
  bool chat = false, json = false;
  SamplingOptions sampling{.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .seed = 0};
  int64_t seed = -1;
};

// What the arguments name, read: the prompt (-p, or -f's file), --doc's text (ReadDocument) and the
// sampling with its seed (--seed, else a random one).
struct GenerateInputs {
  std::string prompt, doc;
  SamplingOptions sampling;
};
Result<GenerateInputs> ReadGenerateInputs(const GenerateArgs& a);

// The runners' configs, without their callbacks (on_text, on_chunk_map).
eval::UniformGenerateConfig UniformConfigOf(const GenerateArgs& a, const GenerateInputs& in);
eval::PolicyGenerateConfig PolicyConfigOf(const GenerateArgs& a, const GenerateInputs& in);

}  // namespace chorus::cli
