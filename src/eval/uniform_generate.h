// `chorus generate` under uniform KV formats: one prompt (optionally a chat user turn) through the
// forward pass on a KV store of the policy's formats, then sampled token by token until the token
// budget, an end-of-generation token or a full context. Reports the answer, the prefill and decode
// speeds and the measured KV bytes. (Other policies run one agent of the Engine: policy_generate.h.)
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "chorus/kv_policy.h"  // KvPolicy
#include "model/sampler.h"     // SamplingOptions
#include "util/status.h"

namespace chorus::eval {

struct UniformGenerateConfig {
  std::string model;
  KvPolicy policy;                           // uniform formats (another kind is an error)
  size_t sink_blocks = 1;                    // leading blocks kept f16 (the spec's :sN wins)
  std::string window = "f16";                // rows of the newest <32 tokens before sealing
  std::string prompt, system;                // system: with chat, the system turn
  bool chat = false;                         // the prompt as a chat user turn (the model's template)
  int n_predict = 64, threads = 2, ctx = 0;  // ctx 0: min(training context, 4096)
  SamplingOptions sampling;                  // its seed as given (the caller draws a random one)
  // Called with each new piece of the answer as it is decoded (may be empty).
  std::function<void(std::string_view)> on_text;
};

struct UniformGenerateReport {
  std::string text, stop;            // stop: "length", "end of generation" or "context full"
  std::string kv_k, kv_v, kv_usage;  // kv_usage: DescribeKvUsage of the store at the end
  size_t prompt_tokens = 0, generated_tokens = 0, kv_bytes = 0, kv_tokens = 0, rss_bytes = 0;
  double prefill_tokens_per_s = 0, decode_tokens_per_s = 0, kv_bits_per_element = 0;
  int threads = 0;
  uint64_t seed = 0;
};

Result<UniformGenerateReport> RunUniformGenerate(const UniformGenerateConfig& config);
nlohmann::json ToJson(const UniformGenerateReport& report);  // kind "generate_uniform"
// The one-line summary of tokens, speeds, stop, seed and RSS, then the KV held.
void PrintSummary(const UniformGenerateReport& report, std::FILE* out);

}  // namespace chorus::eval
