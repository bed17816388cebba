// ComixSensitivity lookups and the one-layer probe policy.
#include "policy/comix_sensitivity.h"

#include <cmath>

namespace chorus {

double ComixSensitivity::At(size_t layer, KvSide side, int b) const {
  for (size_t w = 0; w < bits.size(); ++w)
    if (bits[w] == b && layer < n_layer) return kld[Index(layer, side, w)];
  return -1;
}

Status ComixSensitivity::Check() const {
  if (n_layer == 0 || bits.empty()) return Status::Error("sensitivity table: no layers or no widths");
  for (size_t w = 0; w < bits.size(); ++w) {
    const int b = bits[w];
    if (b != 2 && b != 3 && b != 4 && b != 8)
      return Status::Error("sensitivity table: {} is not a width (valid: 2, 3, 4, 8)", b);
    if (w > 0 && b <= bits[w - 1]) return Status::Error("sensitivity table: widths must be ascending");
  }
  if (kld.size() != n_layer * 2 * bits.size())
    return Status::Error("sensitivity table: {} values for {} layers x 2 sides x {} widths", kld.size(), n_layer,
                         bits.size());
  for (double x : kld)
    if (!std::isfinite(x) || x < 0) return Status::Error("sensitivity table: a value is negative or not finite");
  return Status::Ok();
}

BlockFormats LayerProbePolicy::FormatFor(const BlockInfo& info) {
  BlockFormats f;  // f16 / f16
  if (info.layer != layer_ || info.first_pos < sink_blocks_ * kBlockTokens) return f;
  (side_ == KvSide::kKey ? f.k : f.v) = format_;
  return f;
}

}  // namespace chorus
