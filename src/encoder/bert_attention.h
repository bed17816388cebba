// Bidirectional multi-head self-attention of one sequence (BERT: no mask, no padding):
// ctx[i, h] = Σ_j softmax_j(q[i,h]·k[j,h] · scale) v[j,h] for every token i and head h.
// q, k, v, ctx: n rows of heads*head_dim floats (row stride ld). BertAttention is Highway-vectorized
// (one dispatch per call); BertAttentionRef is the scalar reference (double accumulation).
// Invariant: they agree to f32 rounding (tested).
#pragma once
#include <cstddef>

namespace chorus {

void BertAttention(const float* q, const float* k, const float* v, size_t ld, size_t n, size_t heads,
                   size_t head_dim, float scale, float* ctx);
void BertAttentionRef(const float* q, const float* k, const float* v, size_t ld, size_t n, size_t heads,
                      size_t head_dim, float scale, float* ctx);

}  // namespace chorus
