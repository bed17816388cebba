// Scalar reference twins of the KV block kernels (decode the head tile, then dot in double) and
// the per-block convenience entry points.
#include "kv/kv_kernels.h"

#include <vector>

#include "kv/kv_format.h"  // DecodeKvHeadRef

namespace chorus {

void ScoreKvBlock(KvFormat format, const KvGeometry& geometry, const uint8_t* k_block,
                  uint32_t kv_head, const float* q, size_t n_q, float* scores, size_t ld) {
  GetKvBlockKernels(format).score(geometry, k_block, kv_head, q, n_q, scores, ld);
}

void AccumulateKvBlock(KvFormat format, const KvGeometry& geometry, const uint8_t* v_block,
                       uint32_t kv_head, const float* p, size_t n_q, float* acc, size_t ld) {
  GetKvBlockKernels(format).accumulate(geometry, v_block, kv_head, p, n_q, acc, ld);
}

void ScoreKvBlockRef(KvFormat format, const KvGeometry& geometry, const uint8_t* k_block,
                     uint32_t kv_head, const float* q, size_t n_q, float* scores, size_t ld) {
  const size_t d = geometry.head_dim;
  std::vector<float> k(kBlockTokens * d);  // (token, channel), kernel domain
  DecodeKvHeadRef(format, KvSide::kKey, geometry, k_block, kv_head, k.data());
  for (size_t i = 0; i < n_q; ++i) {
    for (size_t j = 0; j < kBlockTokens; ++j) {
      double s = 0;
      for (size_t c = 0; c < d; ++c) s += static_cast<double>(q[i * d + c]) * k[j * d + c];
      scores[i * ld + j] = static_cast<float>(s);
    }
  }
}

void AccumulateKvBlockRef(KvFormat format, const KvGeometry& geometry, const uint8_t* v_block,
                          uint32_t kv_head, const float* p, size_t n_q, float* acc, size_t ld) {
  const size_t d = geometry.head_dim;
  std::vector<float> v(kBlockTokens * d);  // (token, channel), kernel domain
  DecodeKvHeadRef(format, KvSide::kValue, geometry, v_block, kv_head, v.data());
  for (size_t i = 0; i < n_q; ++i) {
    for (size_t c = 0; c < d; ++c) {
      double s = acc[i * d + c];
      for (size_t j = 0; j < kBlockTokens; ++j) s += static_cast<double>(p[i * ld + j]) * v[j * d + c];
      acc[i * d + c] = static_cast<float>(s);
    }
  }
}

}  // namespace chorus
