// UniformPolicy: every block gets the same K and V formats (what --kv-k / --kv-v select).
// PolyKvPaperPolicy is uniform too, but feeds polykv-paper keys a per-layer absmax scale.
#pragma once
#include <vector>

#include "kv/precision_policy.h"  // PrecisionPolicy, BlockFormats

namespace chorus {

// sink_blocks: blocks at the very start of a context (positions < 32·sink_blocks) stay f16 —
// the attention-sink tokens take a large share of every query's attention, so their error is
// amplified (measured in docs/results/kv-fidelity.md); it costs one block per layer.
class UniformPolicy : public PrecisionPolicy {
 public:
  UniformPolicy(KvFormat k, KvFormat v, size_t sink_blocks = 0) : k_(k), v_(v), sink_blocks_(sink_blocks) {}
  BlockFormats FormatFor(const BlockInfo& info) override;

 private:
  KvFormat k_, v_;
  size_t sink_blocks_;
  // polykv-paper: the running max |K| per layer (the paper's one scale per layer; when the whole
  // context is sealed at once, as a shared document is, this is the max over every token).
  std::vector<float> layer_absmax_k_, layer_absmax_v_;
};

}  // namespace chorus
