// Vectorized pieces of streaming attention: fold a tile of scores into softmax states (vector exp),
// and score / accumulate native fp16 rows (the window). Highway, with scalar reference twins.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace chorus {

// For each query i < n_q: scores s[i*ld + j], j < n_rows (ld >= n_rows, ld % 16 == 0 not required):
// m_new = max(m[i], max_j s), o_i *= exp(m[i] - m_new), l_i *= same, s_j ← exp(s_j - m_new)
// (and 0 for n_rows <= j < ld), l_i += Σ s_j, m[i] = m_new. o: (n_q, hd). A query whose scores so far
// are all -inf (masked) is left as it is, its row zeroed.
void SoftmaxFold(float* s, size_t n_q, size_t ld, size_t n_rows, float* m, float* l, float* o, size_t hd);
void SoftmaxFoldRef(float* s, size_t n_q, size_t ld, size_t n_rows, float* m, float* l, float* o, size_t hd);
// SoftmaxFold one query at a time. On AVX-512 SoftmaxFold folds full tiles (n_rows 32) 16 queries at a
// time, reducing their maxima and sums together; it must equal this bit for bit (a test).
void SoftmaxFoldEach(float* s, size_t n_q, size_t ld, size_t n_rows, float* m, float* l, float* o, size_t hd);

// s[i*ld + j] = q_i · k_j for fp16 rows k_j = k + j*stride (hd elements), j < n_rows.
void ScoreF16Rows(const float* q, size_t n_q, size_t hd, const uint16_t* k, size_t stride, size_t n_rows,
                  float* s, size_t ld);
// o_i += Σ_j p[i*ld + j] · v_j for fp16 rows v_j = v + j*stride, j < n_rows.
void AccumulateF16Rows(const float* p, size_t n_q, size_t ld, const uint16_t* v, size_t stride, size_t n_rows,
                       float* o, size_t hd);

// s[i*ld + j] = q_i · k_j for the kAttendRows keys of one tile stored transposed, fp16:
// kt[c * kAttendRows + j] = k_j[c] (c < hd). ld >= kAttendRows; scratch: hd * kAttendRows floats (the
// tile converted to f32 once for all queries).
inline constexpr size_t kAttendRows = 32;
void ScoreF16Tile(const float* q, size_t n_q, size_t hd, const uint16_t* kt, float* s, size_t ld, float* scratch);

// Streaming attention of n_q queries (rows of q, (n_q, hd), already scaled) over one KV head's fp16 keys
// in transposed tiles (tile t, rows [32t, 32t + 32), at kt + t*kt_stride, see ScoreF16Tile) and value
// rows (row j at v + j*v_stride): query i sees rows [first[i], end[i]) (non-empty); its output goes to
// out + i*out_stride. Every tile any query sees is scored for all queries at once; rows a query does
// not see are masked. scratch: reused across calls.
struct AttendScratch {
  std::vector<float> s, m, l, o, kt;
};
void AttendF16Ranges(const float* q, size_t n_q, const uint32_t* first, const uint32_t* end, const uint16_t* kt,
                     size_t kt_stride, const uint16_t* v, size_t v_stride, size_t hd, AttendScratch& scratch,
                     float* out, size_t out_stride);

}  // namespace chorus
