// Vectorized pieces of streaming attention: fold a tile of scores into softmax states (vector exp),
// and score / accumulate native fp16 rows (the window). Highway, with scalar reference twins.
#pragma once
#include <cstddef>
#include <cstdint>

namespace chorus {

// For each query i < n_q: scores s[i*ld + j], j < n_rows (ld >= n_rows, ld % 16 == 0 not required):
// m_new = max(m[i], max_j s), o_i *= exp(m[i] - m_new), l_i *= same, s_j ← exp(s_j - m_new)
// (and 0 for n_rows <= j < ld), l_i += Σ s_j, m[i] = m_new. o: (n_q, hd).
void SoftmaxFold(float* s, size_t n_q, size_t ld, size_t n_rows, float* m, float* l, float* o, size_t hd);
void SoftmaxFoldRef(float* s, size_t n_q, size_t ld, size_t n_rows, float* m, float* l, float* o, size_t hd);

// s[i*ld + j] = q_i · k_j for fp16 rows k_j = k + j*stride (hd elements), j < n_rows.
void ScoreF16Rows(const float* q, size_t n_q, size_t hd, const uint16_t* k, size_t stride, size_t n_rows,
                  float* s, size_t ld);
// o_i += Σ_j p[i*ld + j] · v_j for fp16 rows v_j = v + j*stride, j < n_rows.
void AccumulateF16Rows(const float* p, size_t n_q, size_t ld, const uint16_t* v, size_t stride, size_t n_rows,
                       float* o, size_t hd);

}  // namespace chorus
