// KvConfig: the user's KV choice (formats, budget) turned into a policy + KvStore for a model,
// and the measured-usage report (bytes, bits per element) every command prints.
#pragma once
#include <memory>
#include <string>
#include <string_view>

#include "kv/kv_store.h"           // KvStore, KvUsage
#include "kv/precision_policy.h"   // PrecisionPolicy
#include "model/model_config.h"    // ModelConfig
#include "util/status.h"

namespace chorus {

struct KvConfig {
  KvFormat k = KvFormat::kF16;
  KvFormat v = KvFormat::kF16;
  size_t budget_bytes = 0;  // 0 = unlimited
  size_t sink_blocks = 1;   // leading blocks of a context kept f16 (ignored when K and V are f16)
  WindowFormat window = WindowFormat::kF16;  // rows of the newest < 32 tokens
};

// Parses format names and checks they fit the model's head dimension; errors list valid choices.
Result<KvConfig> MakeKvConfig(std::string_view k, std::string_view v, const ModelConfig& model);

struct KvRuntime {
  std::unique_ptr<PrecisionPolicy> policy;
  std::unique_ptr<KvStore> store;
};

KvRuntime MakeKvRuntime(const ModelConfig& model, const KvConfig& config);

// Bits per stored K/V element, metadata included: 8·bytes / (tokens · layers · kv_dim · 2).
double KvBitsPerElement(size_t bytes, size_t tokens, const ModelConfig& model);
// Bytes an fp16 KV of `tokens` tokens would take (the comparison baseline).
size_t Fp16KvBytes(size_t tokens, const ModelConfig& model);
// "K q8 / V tq3: 12.34 MiB held for 2048 tokens = 4.81 bits/element (fp16: 45.0 MiB)"
std::string DescribeKvUsage(const KvConfig& config, const KvUsage& usage, size_t tokens, const ModelConfig& model);

}  // namespace chorus
