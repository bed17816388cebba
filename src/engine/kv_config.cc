// KvConfig parsing/validation, runtime construction and usage reporting.
#include "engine/kv_config.h"

#include <fmt/format.h>

#include "policy/uniform_policy.h"  // UniformPolicy

namespace chorus {

Result<KvConfig> MakeKvConfig(std::string_view k, std::string_view v, const ModelConfig& model) {
  KvConfig c;
  auto kf = ParseKvFormat(k);
  if (!kf.ok()) return kf.status().Context("--kv-k");
  auto vf = ParseKvFormat(v);
  if (!vf.ok()) return vf.status().Context("--kv-v");
  c.k = *kf;
  c.v = *vf;
  const KvGeometry g{static_cast<uint32_t>(model.n_head_kv), static_cast<uint32_t>(model.head_dim)};
  CHORUS_RETURN_IF_ERROR(CheckKvFormat(c.k, KvSide::kKey, g).Context("--kv-k"));
  CHORUS_RETURN_IF_ERROR(CheckKvFormat(c.v, KvSide::kValue, g).Context("--kv-v"));
  return c;
}

KvRuntime MakeKvRuntime(const ModelConfig& model, const KvConfig& config) {
  KvRuntime r;
  r.policy = std::make_unique<UniformPolicy>(config.k, config.v, config.sink_blocks);
  KvStoreOptions o{.n_layer = model.n_layer,
                   .shape = {.n_head = model.n_head, .n_head_kv = model.n_head_kv, .head_dim = model.head_dim},
                   .budget_bytes = config.budget_bytes,
                   .window = config.window,
                   .layer_window = model.layer_window};
  r.store = std::make_unique<KvStore>(o, r.policy.get());
  return r;
}

double KvBitsPerElement(size_t bytes, size_t tokens, const ModelConfig& model) {
  const double elems = double(tokens) * model.n_layer * model.kv_dim() * 2;
  return elems > 0 ? 8.0 * bytes / elems : 0.0;
}

size_t Fp16KvBytes(size_t tokens, const ModelConfig& model) { return tokens * model.n_layer * model.kv_dim() * 2 * 2; }

std::string DescribeKvUsage(const KvConfig& config, const KvUsage& u, size_t tokens, const ModelConfig& model) {
  return fmt::format("K {} / V {} (sink blocks f16: {}): {:.2f} MiB held for {} tokens ({} blocks {:.2f} MiB + windows {:.2f} MiB + "
                     "tables {:.1f} KiB) = {:.2f} bits/element (fp16 KV: {:.2f} MiB)",
                     KvFormatName(config.k), KvFormatName(config.v), config.sink_blocks, u.total() / 1048576.0, tokens, u.blocks,
                     u.block_bytes / 1048576.0, u.window_bytes / 1048576.0, u.table_bytes / 1024.0,
                     KvBitsPerElement(u.total(), tokens, model), Fp16KvBytes(tokens, model) / 1048576.0);
}

}  // namespace chorus
