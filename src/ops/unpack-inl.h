// Per-target scalar unpacking of GGML blocks into u8 codes + per-sub-block (dw, m): w = dw * q + m.
// Invariant: codes are in natural element order; Q8_0 codes are biased (q + 128, m = -128 dw).
// Included once per Highway target from matmul_kernels.cc (the compiler vectorizes the loops).
#if defined(CHORUS_OPS_UNPACK_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CHORUS_OPS_UNPACK_INL_H_
#undef CHORUS_OPS_UNPACK_INL_H_
#else
#define CHORUS_OPS_UNPACK_INL_H_
#endif

#include <cstring>

#include "hwy/highway.h"
#include "ops/quant_blocks.h"  // Block*, KScaleMin
#include "util/fp16.h"         // F16ToF32

HWY_BEFORE_NAMESPACE();
namespace chorus {
namespace HWY_NAMESPACE {
namespace mm {  // matmul internals (names private to these kernels)

inline float HalfAt(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return F16ToF32(h);
}

// One 32-block: 16 bytes of nibbles (+ optional 5th bits) → 32 codes.
inline void UnpackNibbles32(const uint8_t* qs, uint32_t qh, bool has_qh, uint8_t* q) {
  for (int j = 0; j < 16; ++j) {
    q[j] = qs[j] & 0xF;
    q[j + 16] = qs[j] >> 4;
  }
  if (has_qh) {
    for (int j = 0; j < 32; ++j) q[j] |= ((qh >> j) & 1) << 4;
  }
}

// The 8 (dw, m) of a Q4_K / Q5_K super-block: d · sc and −dmin · mn.
inline void KQuantScales(const uint8_t* blk, float* dw, float* m) {
  const float d = HalfAt(blk), dmin = HalfAt(blk + 2);
  for (int j = 0; j < 8; ++j) {
    int sc, mn;
    KScaleMin(blk + offsetof(BlockQ4_K, scales), j, &sc, &mn);
    dw[j] = d * sc;
    m[j] = -(dmin * mn);
  }
}

// The 16 (dw, m) of a Q6_K super-block: d · sc and −32 dw.
inline void Q6KScales(const uint8_t* blk, float* dw, float* m) {
  const float d = HalfAt(blk + offsetof(BlockQ6_K, d));
  const int8_t* sc = reinterpret_cast<const int8_t*>(blk + offsetof(BlockQ6_K, scales));
  for (int j = 0; j < 16; ++j) {
    dw[j] = d * sc[j];
    m[j] = -32.0f * dw[j];
  }
}

// Unpacks `nb` blocks of `type` starting at `src`; q gets nb * block_elems codes.
inline void UnpackBlocks(GgmlType type, const uint8_t* src, size_t nb, uint8_t* q, float* dw,
                         float* m) {
  switch (type) {
    case GgmlType::kQ4_0:
      for (size_t i = 0; i < nb; ++i, src += sizeof(BlockQ4_0), q += kQk) {
        dw[i] = HalfAt(src);
        m[i] = -8.0f * dw[i];
        UnpackNibbles32(src + offsetof(BlockQ4_0, qs), 0, false, q);
      }
      return;
    case GgmlType::kQ4_1:
      for (size_t i = 0; i < nb; ++i, src += sizeof(BlockQ4_1), q += kQk) {
        dw[i] = HalfAt(src);
        m[i] = HalfAt(src + offsetof(BlockQ4_1, m));
        UnpackNibbles32(src + offsetof(BlockQ4_1, qs), 0, false, q);
      }
      return;
    case GgmlType::kQ5_0:
      for (size_t i = 0; i < nb; ++i, src += sizeof(BlockQ5_0), q += kQk) {
        dw[i] = HalfAt(src);
        m[i] = -16.0f * dw[i];
        uint32_t qh;
        std::memcpy(&qh, src + offsetof(BlockQ5_0, qh), 4);
        UnpackNibbles32(src + offsetof(BlockQ5_0, qs), qh, true, q);
      }
      return;
    case GgmlType::kQ5_1:
      for (size_t i = 0; i < nb; ++i, src += sizeof(BlockQ5_1), q += kQk) {
        dw[i] = HalfAt(src);
        m[i] = HalfAt(src + offsetof(BlockQ5_1, m));
        uint32_t qh;
        std::memcpy(&qh, src + offsetof(BlockQ5_1, qh), 4);
        UnpackNibbles32(src + offsetof(BlockQ5_1, qs), qh, true, q);
      }
      return;
    case GgmlType::kQ8_0:
      for (size_t i = 0; i < nb; ++i, src += sizeof(BlockQ8_0), q += kQk) {
        dw[i] = HalfAt(src);
        m[i] = -128.0f * dw[i];
        const uint8_t* qs = src + offsetof(BlockQ8_0, qs);
        for (int j = 0; j < kQk; ++j) q[j] = static_cast<uint8_t>(qs[j] ^ 0x80);
      }
      return;
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: {
      const bool five = type == GgmlType::kQ5_K;
      const size_t bytes = five ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
      const size_t qs_off = five ? offsetof(BlockQ5_K, qs) : offsetof(BlockQ4_K, qs);
      for (size_t i = 0; i < nb; ++i, src += bytes, q += kQkK, dw += 8, m += 8) {
        KQuantScales(src, dw, m);
        const uint8_t* qs = src + qs_off;
        for (int c = 0; c < 4; ++c) {
          for (int l = 0; l < 32; ++l) {
            q[64 * c + l] = qs[32 * c + l] & 0xF;
            q[64 * c + 32 + l] = qs[32 * c + l] >> 4;
          }
        }
        if (five) {
          const uint8_t* qh = src + offsetof(BlockQ5_K, qh);
          for (int c = 0; c < 4; ++c) {
            for (int l = 0; l < 32; ++l) {
              q[64 * c + l] |= ((qh[l] >> (2 * c)) & 1) << 4;
              q[64 * c + 32 + l] |= ((qh[l] >> (2 * c + 1)) & 1) << 4;
            }
          }
        }
      }
      return;
    }
    case GgmlType::kQ6_K:
      for (size_t i = 0; i < nb; ++i, src += sizeof(BlockQ6_K), q += kQkK, dw += 16, m += 16) {
        Q6KScales(src, dw, m);
        const uint8_t* ql = src + offsetof(BlockQ6_K, ql);
        const uint8_t* qh = src + offsetof(BlockQ6_K, qh);
        for (int h = 0; h < 2; ++h) {
          uint8_t* y = q + 128 * h;
          const uint8_t* l8 = ql + 64 * h;
          const uint8_t* h8 = qh + 32 * h;
          for (int l = 0; l < 32; ++l) {
            y[l] = (l8[l] & 0xF) | (((h8[l] >> 0) & 3) << 4);
            y[l + 32] = (l8[l + 32] & 0xF) | (((h8[l] >> 2) & 3) << 4);
            y[l + 64] = (l8[l] >> 4) | (((h8[l] >> 4) & 3) << 4);
            y[l + 96] = (l8[l + 32] >> 4) | (((h8[l] >> 6) & 3) << 4);
          }
        }
      }
      return;
    default:
      return;
  }
}

}  // namespace mm
}  // namespace HWY_NAMESPACE
}  // namespace chorus
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
