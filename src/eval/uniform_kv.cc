// UniformKvConfig (see uniform_kv.h).
#include "eval/uniform_kv.h"

#include <variant>

namespace chorus::eval {

Result<KvConfig> UniformKvConfig(const KvPolicy& policy, size_t sink_blocks, const std::string& window,
                                 const ModelConfig& model, std::string_view what) {
  const auto* u = std::get_if<KvPolicy::Uniform>(&policy.rule);
  if (u == nullptr)
    return Status::Error("{} takes uniform formats (K/V, e.g. q8/tq3), not policy {}", what, FormatSpec(policy));
  auto c = MakeKvConfig(u->k, u->v, model);
  if (!c.ok()) return c.status();
  c->sink_blocks = u->sink_blocks >= 0 ? size_t(u->sink_blocks) : sink_blocks;
  auto w = ParseWindowFormat(window);
  if (!w.ok()) return w.status().Context("--kv-window");
  c->window = *w;
  return c;
}

}  // namespace chorus::eval
