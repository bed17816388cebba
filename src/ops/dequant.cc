// DequantizeRow: straightforward per-block decoding, one function per GGML type (see quant_blocks.h).
#include "ops/dequant.h"

#include <cstring>

#include "ops/quant_blocks.h"  // Block*, KScaleMin
#include "util/check.h"        // CHORUS_CHECK
#include "util/fp16.h"         // F16ToF32, Bf16ToF32

namespace chorus {
namespace {

// Field reads through memcpy: rows may sit at any byte offset of a mapped file.
inline float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return F16ToF32(h);
}
inline uint32_t U32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void RowQ4_0(const uint8_t* src, float* y, size_t nb) {
  for (size_t i = 0; i < nb; ++i, src += sizeof(BlockQ4_0), y += kQk) {
    const float d = Half(src + offsetof(BlockQ4_0, d));
    const uint8_t* qs = src + offsetof(BlockQ4_0, qs);
    for (int j = 0; j < kQk / 2; ++j) {
      y[j] = ((qs[j] & 0xF) - 8) * d;
      y[j + kQk / 2] = ((qs[j] >> 4) - 8) * d;
    }
  }
}

void RowQ4_1(const uint8_t* src, float* y, size_t nb) {
  for (size_t i = 0; i < nb; ++i, src += sizeof(BlockQ4_1), y += kQk) {
    const float d = Half(src + offsetof(BlockQ4_1, d)), m = Half(src + offsetof(BlockQ4_1, m));
    const uint8_t* qs = src + offsetof(BlockQ4_1, qs);
    for (int j = 0; j < kQk / 2; ++j) {
      y[j] = (qs[j] & 0xF) * d + m;
      y[j + kQk / 2] = (qs[j] >> 4) * d + m;
    }
  }
}

void RowQ5_0(const uint8_t* src, float* y, size_t nb) {
  for (size_t i = 0; i < nb; ++i, src += sizeof(BlockQ5_0), y += kQk) {
    const float d = Half(src + offsetof(BlockQ5_0, d));
    const uint32_t qh = U32(src + offsetof(BlockQ5_0, qh));
    const uint8_t* qs = src + offsetof(BlockQ5_0, qs);
    for (int j = 0; j < kQk / 2; ++j) {
      const int x0 = ((qs[j] & 0xF) | (((qh >> j) & 1) << 4)) - 16;
      const int x1 = ((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
      y[j] = x0 * d;
      y[j + kQk / 2] = x1 * d;
    }
  }
}

void RowQ5_1(const uint8_t* src, float* y, size_t nb) {
  for (size_t i = 0; i < nb; ++i, src += sizeof(BlockQ5_1), y += kQk) {
    const float d = Half(src + offsetof(BlockQ5_1, d)), m = Half(src + offsetof(BlockQ5_1, m));
    const uint32_t qh = U32(src + offsetof(BlockQ5_1, qh));
    const uint8_t* qs = src + offsetof(BlockQ5_1, qs);
    for (int j = 0; j < kQk / 2; ++j) {
      const int x0 = (qs[j] & 0xF) | (((qh >> j) & 1) << 4);
      const int x1 = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      y[j] = x0 * d + m;
      y[j + kQk / 2] = x1 * d + m;
    }
  }
}

void RowQ8_0(const uint8_t* src, float* y, size_t nb) {
  for (size_t i = 0; i < nb; ++i, src += sizeof(BlockQ8_0), y += kQk) {
    const float d = Half(src + offsetof(BlockQ8_0, d));
    const int8_t* qs = reinterpret_cast<const int8_t*>(src + offsetof(BlockQ8_0, qs));
    for (int j = 0; j < kQk; ++j) y[j] = qs[j] * d;
  }
}

void RowQ4_K(const uint8_t* src, float* y, size_t nb) {
  for (size_t i = 0; i < nb; ++i, src += sizeof(BlockQ4_K)) {
    const float d = Half(src + offsetof(BlockQ4_K, d)), dmin = Half(src + offsetof(BlockQ4_K, dmin));
    const uint8_t* scales = src + offsetof(BlockQ4_K, scales);
    const uint8_t* q = src + offsetof(BlockQ4_K, qs);
    for (int c = 0; c < 4; ++c, q += 32) {
      int sc, mn;
      KScaleMin(scales, 2 * c, &sc, &mn);
      const float d1 = d * sc, m1 = dmin * mn;
      KScaleMin(scales, 2 * c + 1, &sc, &mn);
      const float d2 = d * sc, m2 = dmin * mn;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
    }
  }
}

void RowQ5_K(const uint8_t* src, float* y, size_t nb) {
  for (size_t i = 0; i < nb; ++i, src += sizeof(BlockQ5_K)) {
    const float d = Half(src + offsetof(BlockQ5_K, d)), dmin = Half(src + offsetof(BlockQ5_K, dmin));
    const uint8_t* scales = src + offsetof(BlockQ5_K, scales);
    const uint8_t* qh = src + offsetof(BlockQ5_K, qh);
    const uint8_t* ql = src + offsetof(BlockQ5_K, qs);
    uint8_t u1 = 1, u2 = 2;
    for (int c = 0; c < 4; ++c, ql += 32, u1 <<= 2, u2 <<= 2) {
      int sc, mn;
      KScaleMin(scales, 2 * c, &sc, &mn);
      const float d1 = d * sc, m1 = dmin * mn;
      KScaleMin(scales, 2 * c + 1, &sc, &mn);
      const float d2 = d * sc, m2 = dmin * mn;
      for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    }
  }
}

void RowQ6_K(const uint8_t* src, float* y, size_t nb) {
  for (size_t i = 0; i < nb; ++i, src += sizeof(BlockQ6_K)) {
    const float d = Half(src + offsetof(BlockQ6_K, d));
    const uint8_t* ql = src + offsetof(BlockQ6_K, ql);
    const uint8_t* qh = src + offsetof(BlockQ6_K, qh);
    const int8_t* sc = reinterpret_cast<const int8_t*>(src + offsetof(BlockQ6_K, scales));
    for (int h = 0; h < 2; ++h, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * sc[is] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
    }
  }
}

}  // namespace

bool IsMatMulType(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: case GgmlType::kF16: case GgmlType::kBF16:
    case GgmlType::kQ4_0: case GgmlType::kQ4_1: case GgmlType::kQ5_0: case GgmlType::kQ5_1:
    case GgmlType::kQ8_0: case GgmlType::kQ4_K: case GgmlType::kQ5_K: case GgmlType::kQ6_K:
      return true;
    default:
      return false;
  }
}

void DequantizeRow(GgmlType type, const uint8_t* src, float* dst, size_t n) {
  CHORUS_CHECK(IsMatMulType(type));
  const size_t block = GgmlTraitsOf(type).block_elems;
  CHORUS_CHECK(n % block == 0);
  const size_t nb = n / block;
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case GgmlType::kF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = F16ToF32(h);
      }
      return;
    case GgmlType::kBF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = Bf16ToF32(h);
      }
      return;
    case GgmlType::kQ4_0: return RowQ4_0(src, dst, nb);
    case GgmlType::kQ4_1: return RowQ4_1(src, dst, nb);
    case GgmlType::kQ5_0: return RowQ5_0(src, dst, nb);
    case GgmlType::kQ5_1: return RowQ5_1(src, dst, nb);
    case GgmlType::kQ8_0: return RowQ8_0(src, dst, nb);
    case GgmlType::kQ4_K: return RowQ4_K(src, dst, nb);
    case GgmlType::kQ5_K: return RowQ5_K(src, dst, nb);
    case GgmlType::kQ6_K: return RowQ6_K(src, dst, nb);
    default: CHORUS_CHECK(false);
  }
}

}  // namespace chorus
