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

// Integer key scores (tq4 and q8 keys on a CPU with 8-bit dot products, AVX-512 VNNI + VBMI;
// kivi4 keys there too; elsewhere the float Score):
//   q8_ic = round(q_ic · 127 / max_c |q_ic|)                                  (QuantizeQueriesQ8)
//   tq4: scores[i * ld + j] = (float(Σ_c q8_ic · c8[code_jc]) · scale_i) · (norm_j · (1/sqrt(d)))
//   q8:  scores[i * ld + j] = (float(Σ_c q8_ic · k8_jc) · scale_i) · scale_j  (the key's own codes)
// with c8 the 16 centroids as int8 (round(centroid · s), Tq4CentroidsQ8) and scale_i = (max|q_i| /
// 127) · (1 / s) (q8 keys: 1 / s = 1). The sum is exact integer arithmetic, so the
// SIMD kernel and ScoreKvBlockQ8Ref agree bit for bit; against the float Score it adds the int8
// rounding of the query and of the centroids (docs/results/speed-table.md measures what it does
// to perplexity).
// kivi4 keys (x̂_jc = min_c + s_c · code_jc, codes 0..15) scale the query by the block's channel
// scales, so the kernel quantizes it per block and query from the float queries (QueryQ8::f):
//   qs_c = q_ic · s_c,  A = max_c |qs_c|,  qs8_c = round(qs_c · (127 / A))  (all 0 and qscale 0 where
//   127 / A is not finite),  qscale = A / 127,  e_c = fma(−qscale, qs8_c, qs_c) (the int8 rounding),
//   base = Σ_c (q_ic · min_c + 7.5 · e_c)  (16 partial sums, lane c % 16: fma(e_c, 7.5, fma(q_ic,
//          min_c, lane)) in order of c, then halves added: lane l + l+8, then l + l+4, l + l+2, l + l+1),
//   scores[i * ld + j] = fma(float(Σ_c qs8_c · code_jc), qscale, base)
// (u8 codes × s8 query: vpdpbusd, exact). The base carries the rounding's
// share at the middle code 7.5, so against the float score it adds at most
// Σ_c |e_c| · |code_jc − 7.5| ≤ 7.5 · d · qscale / 2 (not 15 ·), plus float rounding.
inline constexpr float kKiviCodeMid = 7.5f;  // kivi4's middle code: where the base folds the rounding in
struct QueryQ8 {
  const int8_t* q;      // (n_q, head_dim) codes
  const float* scale;   // (n_q)
  const int32_t* bias;  // (n_q) -128 · Σ_c q8_ic (the kernel's unsigned centroids are c8 + 128)
  // q itself where 16 zero rows follow its n_q (a tile reads 16 rows; BlockAttention pads its codes
  // where AmxInt8Enabled and n_q >= 16): the AMX tile kernels' operand, or null
  const int8_t* qp = nullptr;
  // (n_q, head_dim) the float queries, for kernels that quantize per block (kivi4 keys; q, scale
  // and bias are then unused), or null
  const float* f = nullptr;
};
using KvScoreQ8Fn = void (*)(const KvGeometry& geometry, const uint8_t* k_block, uint32_t kv_head,
                             const QueryQ8& q, size_t n_q, float* scores, size_t ld);

// Integer value accumulation (tq3 / tq4 values, head_dim a multiple of 64, on the same CPUs), with
// the float accumulate's arguments: per query i, the block's weights w_ij = p_ij · (norm_j / sqrt(d))
// become u8 against their maximum W_i, w8_ij = round(w_ij · 255 / W_i), and
//   acc[i * d + c] = fma(float(Σ_j w8_ij · c8[code_jc]), (W_i / 255) · c8_scale, acc[i * d + c])
// (a query whose weights are all 0 leaves acc as it is). c8: the centroids as int8 (TqCentroidsQ8).
// Exact integers again: the SIMD kernel matches AccumulateKvBlockQ8Ref bit for bit.

struct KvBlockKernels {
  KvScoreFn score;            // SIMD (best target of this CPU)
  KvAccumulateFn accumulate;  // SIMD (best target of this CPU)
  KvScoreQ8Fn score_q8 = nullptr;  // integer key scores where this target has them (tq4, q8, kivi4), else null
  KvAccumulateFn accumulate_q8 = nullptr;    // integer value sums where this target has them (tq3, tq4), else null
};
// Fetch once per format group, outside the loop over blocks (the dispatch on the runtime type).
KvBlockKernels GetKvBlockKernels(KvFormat format);
// Whether GetKvBlockKernels hands out score_q8 / accumulate_q8 where the target has them: on unless
// the environment variable CHORUS_KV_INT8 is 0 or off at the first call (another value than 0/1/off/on
// is reported on stderr and leaves them on); tests that hold the float path to a float
// error bound switch it off around themselves (process-wide, not per thread).
bool KvInt8ScoresEnabled();
void SetKvInt8Scores(bool on);
// SetKvInt8Scores(on) for a scope, then the previous setting (kernels are fetched when an attention
// object is made: open the scope before).
class ScopedKvInt8Scores {
 public:
  explicit ScopedKvInt8Scores(bool on) : prev_(KvInt8ScoresEnabled()) { SetKvInt8Scores(on); }
  ~ScopedKvInt8Scores() { SetKvInt8Scores(prev_); }
  ScopedKvInt8Scores(const ScopedKvInt8Scores&) = delete;
  ScopedKvInt8Scores& operator=(const ScopedKvInt8Scores&) = delete;

 private:
  bool prev_;
};

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

// The int8 centroids of `bits`-bit TQ codes (c8 above: round(centroid · s), 2^bits of them, with the
// s ≤ 127 / max |centroid| that keeps them closest to the float centroids, weighted by how often
// each code occurs) and their scale 1 / s. bits: 2, 3 or 4.
const int8_t* TqCentroidsQ8(uint32_t bits);
float TqCentroidsQ8Scale(uint32_t bits);
inline const int8_t* Tq4CentroidsQ8() { return TqCentroidsQ8(4); }
inline float Tq4CentroidsQ8Scale() { return TqCentroidsQ8Scale(4); }
// Quantizes n_q queries (n_q, d) for score_q8 of `keys` (tq4: the rotated queries; q8: the queries
// as they are): codes (n_q, d), scale and bias (n_q) as above (q8 keys: 1 / s = 1). A zero query
// gets zero codes and scale.
void QuantizeQueriesQ8(const float* q, size_t n_q, size_t d, int8_t* q8, float* scale, int32_t* bias,
                       KvFormat keys = KvFormat::kTq4);
// Scalar model of score_q8 (tq4, q8 or kivi4 keys; kivi4 reads q.f): the same integers and the same
// float operations in the same order, so the SIMD kernel matches it bit for bit.
void ScoreKvBlockQ8Ref(KvFormat format, const KvGeometry& geometry, const uint8_t* k_block, uint32_t kv_head,
                       const QueryQ8& q, size_t n_q, float* scores, size_t ld = kBlockTokens);
// kivi4 keys' per-block query of score_q8 (the formula above) for one query q (head_dim d) against one
// key head tile (`tile`: its scales, mins, codes): codes q8 (d), qscale, base.
void QuantizeKiviQueryQ8Ref(const uint8_t* tile, uint32_t d, const float* q, int8_t* q8, float* qscale, float* base);
// Scalar model of accumulate_q8 (tq3 / tq4 values), bit for bit.
void AccumulateKvBlockQ8Ref(KvFormat format, const KvGeometry& geometry, const uint8_t* v_block, uint32_t kv_head,
                            const float* p, size_t n_q, float* acc, size_t ld = kBlockTokens);

}  // namespace chorus
