// UniformPolicy: every block gets the same K and V formats (what --kv-k / --kv-v select).
// PolyKvPaperPolicy is uniform too, but feeds polykv-paper keys a per-layer absmax scale.
#pragma once
#include <vector>

#include "kv/precision_policy.h"  // PrecisionPolicy, BlockFormats

namespace chorus {

class UniformPolicy : public PrecisionPolicy {
 public:
  UniformPolicy(KvFormat k, KvFormat v) : k_(k), v_(v) {}
  BlockFormats FormatFor(const BlockInfo& info) override;

 private:
  KvFormat k_, v_;
  // polykv-paper: the running max |K| per layer (the paper's one scale per layer; when the whole
  // context is sealed at once, as a shared document is, this is the max over every token).
  std::vector<float> layer_absmax_k_, layer_absmax_v_;
};

}  // namespace chorus
