// The small model geometry the CoMix policy tests share (3 layers, 6 query heads over 2 KV heads of
// 64): fast to fill with synthetic activations on a real KvStore.
#pragma once
#include <cstddef>

#include "kv/kv_store.h"          // AttentionShape
#include "policy/comix_policy.h"  // ComixOptions

namespace chorus::test {

inline constexpr AttentionShape kComixShape{.n_head = 6, .n_head_kv = 2, .head_dim = 64};
inline constexpr size_t kComixLayers = 3;

// CoMix options for that geometry: TQ family, a fixed budget (bytes) or, with budget 0, avg_bits.
inline ComixOptions ComixTestOptions(size_t budget, double avg_bits = 3, size_t prefill_tokens = 40) {
  return ComixOptions{.n_layer = kComixLayers, .n_head = kComixShape.n_head, .n_head_kv = kComixShape.n_head_kv,
                      .head_dim = kComixShape.head_dim, .family = ComixFamily::kTq, .budget_bytes = budget,
                      .avg_bits = avg_bits, .realloc_every = 8, .prefill_tokens = prefill_tokens};
}

}  // namespace chorus::test
