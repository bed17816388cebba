// The KV formats of a uniform policy, checked against a model: for harnesses that run the model's
// forward pass themselves (`chorus eval logits`, the uniform generation bench).
#pragma once
#include <string>
#include <string_view>

#include "chorus/kv_policy.h"  // KvPolicy
#include "engine/kv_config.h"  // KvConfig
#include "model/model.h"       // ModelConfig

namespace chorus::eval {

// A uniform policy's formats with the sink (the spec's :sN wins) and window, validated against the
// model (errors list valid formats); another kind of policy is an error naming `what`.
Result<KvConfig> UniformKvConfig(const KvPolicy& policy, size_t sink_blocks, const std::string& window,
                                 const ModelConfig& model, std::string_view what = "this command");

}  // namespace chorus::eval
