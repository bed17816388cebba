// Scalar reference twins of the KV block kernels (decode the head tile, then dot in double) and
// the per-block convenience entry points.
#include "kv/kv_kernels.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "kv/kv_format.h"         // DecodeKvHeadRef, KvHeadTileOffset
#include "kv/kv_format_layout.h"  // Codebook, UnpackCode, KeyColumnsOffset
#include "util/fp16.h"            // F16ToF32

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

namespace {

float MaxCentroid(uint32_t bits) {
  const float* c = kv_layout::Codebook(bits).centroid;
  float m = 0;
  for (size_t k = 0; k < (size_t{1} << bits); ++k) m = std::max(m, std::fabs(c[k]));
  return m;
}

}  // namespace

namespace {

// The int8 grid of `bits`-bit centroids: c8 = round(centroid · s) for the s in (64, 127] / max |centroid|
// with the least squared error of the centroids, each weighted by its cell's probability under
// N(0, 1) (the distribution TQ's codes follow). s = 127 / max would put the smallest 3-bit centroid
// 3 % off (0.2451 → 0.2372), a bias every such code would carry; the best s is ~6x closer in rms.
struct CentroidGrid {
  std::array<int8_t, 16> c8{};
  float scale = 0;  // 1 / s
};

CentroidGrid MakeCentroidGrid(uint32_t bits) {
  const kv_layout::LloydMaxCodebook& cb = kv_layout::Codebook(bits);
  const size_t n = size_t{1} << bits;
  auto phi = [](double x) { return 0.5 * (1 + std::erf(x / std::sqrt(2.0))); };
  std::array<double, 16> mass{};
  for (size_t k = 0; k < n; ++k) {
    const double lo = k == 0 ? -INFINITY : cb.threshold[k - 1], hi = k + 1 == n ? INFINITY : cb.threshold[k];
    mass[k] = phi(hi) - phi(lo);
  }
  const double m = MaxCentroid(bits);
  double best_err = INFINITY, best_s = 127 / m;
  for (int step = 0; step <= 4096; ++step) {
    const double s = (64 + (127 - 64) * step / 4096.0) / m;
    double err = 0;
    for (size_t k = 0; k < n; ++k) {
      const double d = std::nearbyint(cb.centroid[k] * s) / s - cb.centroid[k];
      err += mass[k] * d * d;
    }
    if (err < best_err) best_err = err, best_s = s;
  }
  CentroidGrid g;
  const float s = static_cast<float>(best_s);
  for (size_t k = 0; k < n; ++k) g.c8[k] = static_cast<int8_t>(std::lrint(cb.centroid[k] * s));
  g.scale = 1.0f / s;
  return g;
}

const CentroidGrid& Grid(uint32_t bits) {
  static const std::array<CentroidGrid, 5> grids = [] {
    std::array<CentroidGrid, 5> r{};
    for (uint32_t b = 2; b <= 4; ++b) r[b] = MakeCentroidGrid(b);
    return r;
  }();
  if (bits < 2 || bits > 4) throw std::invalid_argument("TqCentroidsQ8: bits must be 2, 3 or 4");
  return grids[bits];
}

}  // namespace

const int8_t* TqCentroidsQ8(uint32_t bits) { return Grid(bits).c8.data(); }

float TqCentroidsQ8Scale(uint32_t bits) { return Grid(bits).scale; }

void QuantizeQueriesQ8(const float* q, size_t n_q, size_t d, int8_t* q8, float* scale, int32_t* bias, KvFormat keys) {
  if (keys != KvFormat::kTq4 && keys != KvFormat::kQ8)
    throw std::invalid_argument("QuantizeQueriesQ8: only tq4 and q8 keys have integer scores");
  const float cs = keys == KvFormat::kTq4 ? Tq4CentroidsQ8Scale() : 1.0f;
  for (size_t i = 0; i < n_q; ++i) {
    const float* qi = q + i * d;
    float amax = 0;
    for (size_t c = 0; c < d; ++c) amax = std::max(amax, std::fabs(qi[c]));
    const float inv = amax > 0 ? 127.0f / amax : 0.0f;
    int32_t sum = 0;
    for (size_t c = 0; c < d; ++c) {
      const long v = std::lrint(qi[c] * inv);  // |v| ≤ 127 (rounding of at most 127 · (1 + ε))
      q8[i * d + c] = static_cast<int8_t>(std::clamp(v, -127L, 127L));
      sum += q8[i * d + c];
    }
    scale[i] = (amax / 127.0f) * cs;
    bias[i] = -128 * sum;
  }
}

void QuantizeKiviQueryQ8Ref(const uint8_t* tile, uint32_t d, const float* q, int8_t* q8, float* qscale, float* base) {
  const auto f16 = [](const uint8_t* p) { return F16ToF32(static_cast<uint16_t>(p[0] | p[1] << 8)); };
  const uint8_t* mins = tile + kv_layout::KiviMinOffset(d);
  std::vector<float> qs(d);
  float amax = 0, lanes[16] = {};
  for (size_t c = 0; c < d; ++c) {
    qs[c] = q[c] * f16(tile + 2 * c);
    amax = std::max(amax, std::fabs(qs[c]));
  }
  const float inv = 127.0f / amax;
  const bool zero = !(inv < INFINITY);  // a zero (or subnormal-small) query: codes 0, the float sums only
  *qscale = zero ? 0.0f : amax / 127.0f;
  for (size_t c = 0; c < d; ++c) {
    q8[c] = zero ? int8_t{0} : static_cast<int8_t>(std::clamp(std::lrint(qs[c] * inv), -127L, 127L));
    const float e = std::fma(-*qscale, static_cast<float>(q8[c]), qs[c]);  // the int8 rounding of qs_c
    lanes[c % 16] = std::fma(e, kKiviCodeMid, std::fma(q[c], f16(mins + 2 * c), lanes[c % 16]));
  }
  for (size_t half = 8; half > 0; half /= 2)
    for (size_t l = 0; l < half; ++l) lanes[l] += lanes[l + half];
  *base = lanes[0];
}

void ScoreKvBlockQ8Ref(KvFormat format, const KvGeometry& geometry, const uint8_t* k_block, uint32_t kv_head,
                       const QueryQ8& q, size_t n_q, float* scores, size_t ld) {
  if (format != KvFormat::kTq4 && format != KvFormat::kQ8 && format != KvFormat::kKivi4)
    throw std::invalid_argument("ScoreKvBlockQ8Ref: only tq4, q8 and kivi4 keys have integer scores");
  const size_t d = geometry.head_dim;
  const uint8_t* tile = k_block + KvHeadTileOffset(format, KvSide::kKey, geometry, kv_head);
  if (format == KvFormat::kKivi4) {  // scores = fma(float(Σ qs8 · code), qscale, base), per block
    const uint8_t* codes = tile + kv_layout::KiviCodesOffset(static_cast<uint32_t>(d));
    std::vector<int8_t> q8(d);
    for (size_t i = 0; i < n_q; ++i) {
      float qscale, base;
      QuantizeKiviQueryQ8Ref(tile, static_cast<uint32_t>(d), q.f + i * d, q8.data(), &qscale, &base);
      for (size_t j = 0; j < kBlockTokens; ++j) {
        int32_t dot = 0;
        for (size_t c = 0; c < d; ++c)
          dot += int32_t{q8[c]} * kv_layout::UnpackCode(4, codes + c * kv_layout::PackedGroupBytes(4), j);
        scores[i * ld + j] = std::fma(static_cast<float>(dot), qscale, base);
      }
    }
    return;
  }
  const uint8_t* cols = tile + kv_layout::KeyColumnsOffset(format);
  if (format == KvFormat::kQ8) {  // scores = (float(Σ q8 · k8) · scale_i) · token scale_j
    for (size_t j = 0; j < kBlockTokens; ++j) {
      const float s = F16ToF32(static_cast<uint16_t>(tile[2 * j] | tile[2 * j + 1] << 8));
      for (size_t i = 0; i < n_q; ++i) {
        int32_t dot = 0;
        for (size_t c = 0; c < d; ++c) dot += int32_t{q.q[i * d + c]} * static_cast<int8_t>(cols[c * kBlockTokens + j]);
        scores[i * ld + j] = (static_cast<float>(dot) * q.scale[i]) * s;
      }
    }
    return;
  }
  const int8_t* c8 = Tq4CentroidsQ8();
  const float inv_sqrt_d = 1.0f / std::sqrt(static_cast<float>(d));
  for (size_t j = 0; j < kBlockTokens; ++j) {
    const float s = F16ToF32(static_cast<uint16_t>(tile[2 * j] | tile[2 * j + 1] << 8)) * inv_sqrt_d;
    for (size_t i = 0; i < n_q; ++i) {
      int32_t dot = 0;
      for (size_t c = 0; c < d; ++c)
        dot += int32_t{q.q[i * d + c]} * c8[kv_layout::UnpackCode(4, cols + c * kv_layout::PackedGroupBytes(4), j)];
      scores[i * ld + j] = (static_cast<float>(dot) * q.scale[i]) * s;
    }
  }
}

void AccumulateKvBlockQ8Ref(KvFormat format, const KvGeometry& geometry, const uint8_t* v_block, uint32_t kv_head,
                            const float* p, size_t n_q, float* acc, size_t ld) {
  const uint32_t bits = kv_layout::TqBits(format);
  if (bits != 3 && bits != 4) throw std::invalid_argument("AccumulateKvBlockQ8Ref: only tq3 / tq4 values");
  const size_t d = geometry.head_dim;
  const uint8_t* tile = v_block + KvHeadTileOffset(format, KvSide::kValue, geometry, kv_head);
  const size_t row_bytes = kv_layout::TqRowBytes(bits, static_cast<uint32_t>(d));
  const int8_t* c8 = TqCentroidsQ8(bits);
  const float cs = TqCentroidsQ8Scale(bits);
  const float inv_sqrt_d = 1.0f / std::sqrt(static_cast<float>(d));
  float s[kBlockTokens];
  for (size_t j = 0; j < kBlockTokens; ++j) {
    const uint8_t* row = tile + j * row_bytes;
    s[j] = F16ToF32(static_cast<uint16_t>(row[0] | row[1] << 8)) * inv_sqrt_d;
  }
  for (size_t i = 0; i < n_q; ++i) {
    float w[kBlockTokens], wmax = 0;
    for (size_t j = 0; j < kBlockTokens; ++j) wmax = std::max(wmax, w[j] = p[i * ld + j] * s[j]);
    if (!(wmax > 0)) continue;
    const float inv = 255.0f / wmax;
    uint8_t w8[kBlockTokens];
    for (size_t j = 0; j < kBlockTokens; ++j) w8[j] = static_cast<uint8_t>(std::clamp(std::lrint(w[j] * inv), 0L, 255L));
    const float scale = (wmax / 255.0f) * cs;
    for (size_t c = 0; c < d; ++c) {
      int32_t sum = 0;
      for (size_t j = 0; j < kBlockTokens; ++j) {
        const uint8_t* group = tile + j * row_bytes + 2 + (c / kv_layout::kGroupCodes) * kv_layout::PackedGroupBytes(bits);
        sum += int32_t{w8[j]} * c8[kv_layout::UnpackCode(bits, group, c % kv_layout::kGroupCodes)];
      }
      acc[i * d + c] = std::fma(static_cast<float>(sum), scale, acc[i * d + c]);
    }
  }
}

}  // namespace chorus
