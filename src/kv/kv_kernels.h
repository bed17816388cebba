// Attention kernels on one compressed KV block and one KV head: scores of stacked queries against
// its keys, and probability-weighted accumulation of its values, computed from the compressed bytes.
// Invariant: the SIMD kernels and their *Ref twins agree within float accumulation error; for
// rotated formats (KvFormatIsRotated) both work in the rotated domain: q is R·q, acc is R·out.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kv/kv_format.h"  // KvFormat, KvGeometry, kBlockTokens

namespace chorus {

// Geometry must pass CheckKvFormat for the block's side (checked once by the caller, not here).
// k_block / v_block: one whole block side (KvBlockBytes); kv_head < n_head_kv; ld ≥ 32 (the row
// stride of scores / p, e.g. the context length when a whole score row is laid out at once).
// Pure functions of their inputs: safe to call from many threads at once.
//
// Score:  scores[i * ld + j] = q_i · k̂_j   for i < n_q, j < 32
//   q: (n_q, head_dim) stacked queries of this KV head (a GQA group, several agents), already
//   scaled by 1/sqrt(head_dim); for rotated formats the *rotated* query R·q (HadamardRotate).
// Accumulate:  acc[i * head_dim + c] += Σ_j p[i * ld + j] · v̂_j[c]
//   p: (n_q, ld) weights of the 32 tokens; for rotated formats acc is in the rotated domain and
//   the caller rotates it back once per head (HadamardRotateInverse) after the last block.
using KvScoreFn = void (*)(const KvGeometry& geometry, const uint8_t* k_block, uint32_t kv_head,
                           const float* q, size_t n_q, float* scores, size_t ld);
using KvAccumulateFn = void (*)(const KvGeometry& geometry, const uint8_t* v_block,
                                uint32_t kv_head, const float* p, size_t n_q, float* acc,
                                size_t ld);

struct KvBlockKernels {
  KvScoreFn score;            // SIMD (best target of this CPU)
  KvAccumulateFn accumulate;  // SIMD (best target of this CPU)
};
// Fetch once per format group, outside the loop over blocks (the dispatch on the runtime type).
KvBlockKernels GetKvBlockKernels(KvFormat format);

// Convenience: GetKvBlockKernels(format).score / .accumulate for one block.
void ScoreKvBlock(KvFormat format, const KvGeometry& geometry, const uint8_t* k_block,
                  uint32_t kv_head, const float* q, size_t n_q, float* scores,
                  size_t ld = kBlockTokens);
void AccumulateKvBlock(KvFormat format, const KvGeometry& geometry, const uint8_t* v_block,
                       uint32_t kv_head, const float* p, size_t n_q, float* acc,
                       size_t ld = kBlockTokens);

// Scalar twins: decode the head tile (DecodeKvHeadRef) into a scratch, dot / accumulate in double.
void ScoreKvBlockRef(KvFormat format, const KvGeometry& geometry, const uint8_t* k_block,
                     uint32_t kv_head, const float* q, size_t n_q, float* scores,
                     size_t ld = kBlockTokens);
void AccumulateKvBlockRef(KvFormat format, const KvGeometry& geometry, const uint8_t* v_block,
                          uint32_t kv_head, const float* p, size_t n_q, float* acc,
                          size_t ld = kBlockTokens);

}  // namespace chorus
