// PrecisionPolicy: the hook that picks a block's K and V formats when it is sealed (every 32 tokens).
// Invariant: called only at sealing time (never on the attention hot path); a block's formats never
// change afterwards. Implementations live in src/policy/ (uniform, polykv, cocktail, comix).
#pragma once
#include <cstddef>
#include <cstdint>

#include "kv/kv_format.h"  // KvFormat, KvEncodeParams

namespace chorus {

struct BlockFormats {
  KvFormat k = KvFormat::kF16;
  KvFormat v = KvFormat::kF16;
  KvEncodeParams k_params;  // e.g. polykv-paper's layer absmax
  KvEncodeParams v_params;
};

// What a policy may look at when choosing: where the block is and its native K/V.
struct BlockInfo {
  uint64_t seq_id = 0;      // the sequence (agent or shared context) the block belongs to
  size_t layer = 0;
  size_t block_index = 0;   // index of the block within the sequence's own blocks of this layer
  size_t first_pos = 0;     // absolute position of the block's first token
  const float* k = nullptr;  // (32, kv_dim) native keys (after RoPE)
  const float* v = nullptr;  // (32, kv_dim) native values
  size_t kv_dim = 0;
};

// What a policy may observe of one layer of one forward call of a sequence (CoMix's online
// sensitivity): the n new tokens' queries (already scaled by 1/sqrt(head_dim)), keys and values.
struct Observation {
  uint64_t seq_id = 0;
  size_t layer = 0;
  size_t n = 0;
  const float* q = nullptr;  // (n, q_dim)
  const float* k = nullptr;  // (n, kv_dim), after RoPE
  const float* v = nullptr;  // (n, kv_dim)
  size_t q_dim = 0, kv_dim = 0;
};

class PrecisionPolicy {
 public:
  virtual ~PrecisionPolicy() = default;
  virtual BlockFormats FormatFor(const BlockInfo& info) = 0;
  // Called once per layer per forward call before the new tokens are stored; default: nothing.
  // Must stay cheap (a few passes over the rows): it runs on the decode path.
  virtual void Observe(const Observation& /*obs*/) {}
  // A block FormatFor chose was not kept after all (its allocation failed, or the batch that
  // sealed it was rolled back): a policy that counts sealed blocks takes it back. info carries the
  // block's place (no rows); f the formats FormatFor returned. Default: nothing.
  virtual void Unseal(const BlockInfo& /*info*/, const BlockFormats& /*f*/) {}
};

}  // namespace chorus
