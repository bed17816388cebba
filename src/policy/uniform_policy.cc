// UniformPolicy: fixed formats; per-layer running absmax for polykv-paper sides.
#include "policy/uniform_policy.h"

#include <algorithm>
#include <cmath>

namespace chorus {
namespace {

float AbsMax(const float* x, size_t n) {
  float m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

}  // namespace

BlockFormats UniformPolicy::FormatFor(const BlockInfo& info) {
  if (info.first_pos < sink_blocks_ * kBlockTokens) return BlockFormats{};  // f16/f16
  BlockFormats f{.k = k_, .v = v_};
  const size_t n = static_cast<size_t>(kBlockTokens) * info.kv_dim;
  if (k_ == KvFormat::kPolyKvPaper) {
    if (layer_absmax_k_.size() <= info.layer) layer_absmax_k_.resize(info.layer + 1, 0.0f);
    layer_absmax_k_[info.layer] = std::max(layer_absmax_k_[info.layer], AbsMax(info.k, n));
    f.k_params.layer_absmax = layer_absmax_k_[info.layer];
  }
  if (v_ == KvFormat::kPolyKvPaper) {
    if (layer_absmax_v_.size() <= info.layer) layer_absmax_v_.resize(info.layer + 1, 0.0f);
    layer_absmax_v_[info.layer] = std::max(layer_absmax_v_[info.layer], AbsMax(info.v, n));
    f.v_params.layer_absmax = layer_absmax_v_[info.layer];
  }
  return f;
}

}  // namespace chorus
