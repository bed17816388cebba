// Arm int8 kernels (NEON with the dot-product extension; also for the SVE targets should they be
// compiled again — CMakeLists.txt disables them): four weight
// rows in the four 32-bit lanes. As on x86 (int8_x86-inl.h) a panel of 4 rows is packed per call
// (codes [cols/4][4 rows][4 bytes], dw/m [sub-block][4]); sdot by lane meets 4 bytes of a token's
// activations with each 16-byte group vector, so every lane ends a sub-block with its row's exact
// integer dot product and the float operations are int8_ref.h's, in its order (bit-identical to
// the scalar twin and across n_tok). sdot is signed × signed: Q8_0 codes need no sign trick.
// Defines CHORUS_HAVE_NEON_INT8 (1 on the Arm A64 targets) for matmul_kernels.cc.
#if defined(CHORUS_OPS_INT8_NEON_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CHORUS_OPS_INT8_NEON_INL_H_
#undef CHORUS_OPS_INT8_NEON_INL_H_
#else
#define CHORUS_OPS_INT8_NEON_INL_H_
#endif

#include <algorithm>
#include <cstring>

#include "hwy/highway.h"
#include "ops/int8_ref.h"         // Int8ActLayout, QuantizeActsRef, UnpackRowInt8
#include "ops/matmul_internal.h"  // Scratch, JobList, TokenPasses

#undef CHORUS_HAVE_NEON_INT8
#if HWY_ARCH_ARM_A64 && (HWY_TARGET & (HWY_NEON | HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128))
#define CHORUS_HAVE_NEON_INT8 1
#else
#define CHORUS_HAVE_NEON_INT8 0
#endif

HWY_BEFORE_NAMESPACE();
#if CHORUS_HAVE_NEON_INT8
#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+dotprod")  // sdot (the kernels use no SVE instructions)
#include <arm_neon.h>

namespace chorus {
namespace HWY_NAMESPACE {
namespace mm {
namespace neon {
using ops_internal::Align64;
using ops_internal::Int8ActLayout;
using ops_internal::Int8ActLayoutOf;

inline constexpr size_t kRows = 4;

struct Panel4 {
  uint8_t* codes;  // [cols / 4][4 rows][4]
  float* dw;       // [cols / sub][4]
  float* m;        // [cols / sub][4]
};
inline size_t Panel4Bytes(size_t cols, int sub) { return Align64(cols * 4) + 2 * (cols / sub) * 4 * sizeof(float); }
inline size_t Stage4Bytes(size_t cols, int sub) { return 4 * Align64(cols) + 2 * 4 * (cols / sub) * sizeof(float); }

// Rows [r0, r0 + 4) of w (clamped to the last row): unpacked one by one, then 4 × 4 transposes
// of 32-bit elements (16 columns of the 4 rows per step).
inline void PackPanel4(const WeightView& w, size_t r0, Panel4 pn, uint8_t* stage) {
  const size_t cols = w.cols, ldq = Align64(cols), sub = ops_internal::Int8SubOf(w.type), nsub = cols / sub;
  float* sdw = reinterpret_cast<float*>(stage + 4 * ldq);
  float* sm = sdw + 4 * nsub;
  for (size_t i = 0; i < kRows; ++i) {
    const uint8_t* row = w.data + std::min(r0 + i, w.rows - 1) * w.row_bytes;
    ops_internal::UnpackRowInt8(w.type, row, cols, stage + i * ldq, sdw + i * nsub, sm + i * nsub);
  }
  for (size_t c = 0; c < cols; c += 16) {
    uint32x4_t r[4];
    for (size_t i = 0; i < kRows; ++i) r[i] = vreinterpretq_u32_u8(vld1q_u8(stage + i * ldq + c));
    const uint64x2_t t0 = vreinterpretq_u64_u32(vtrn1q_u32(r[0], r[1])), t1 = vreinterpretq_u64_u32(vtrn2q_u32(r[0], r[1]));
    const uint64x2_t t2 = vreinterpretq_u64_u32(vtrn1q_u32(r[2], r[3])), t3 = vreinterpretq_u64_u32(vtrn2q_u32(r[2], r[3]));
    uint8_t* out = pn.codes + c * 4;
    vst1q_u8(out + 0, vreinterpretq_u8_u64(vtrn1q_u64(t0, t2)));
    vst1q_u8(out + 16, vreinterpretq_u8_u64(vtrn1q_u64(t1, t3)));
    vst1q_u8(out + 32, vreinterpretq_u8_u64(vtrn2q_u64(t0, t2)));
    vst1q_u8(out + 48, vreinterpretq_u8_u64(vtrn2q_u64(t1, t3)));
  }
  for (size_t j = 0; j < nsub; ++j) {
    for (size_t i = 0; i < kRows; ++i) {
      pn.dw[4 * j + i] = sdw[i * nsub + j];
      pn.m[4 * j + i] = sm[i * nsub + j];
    }
  }
}

// y[t * ldy + i] for t < kT, i < n_rows: the panel × kT tokens.
template <int kSub, bool kSigned, int kT>
HWY_INLINE void PanelTokens(const Panel4& pn, size_t cols, const uint8_t* act, size_t ld_act,
                            const Int8ActLayout& l, float* y, size_t ldy, size_t n_rows) {
  const size_t nsub = cols / kSub;
  float32x4_t acc[kT];
  for (int t = 0; t < kT; ++t) acc[t] = vdupq_n_f32(0.0f);
  for (size_t j = 0; j < nsub; ++j) {
    int32x4_t isum[kT];
    for (int t = 0; t < kT; ++t) isum[t] = vdupq_n_s32(0);
    const uint8_t* codes = pn.codes + j * kSub * 4;
    for (int k = 0; k < kSub / 16; ++k) {  // 16 columns = 4 groups per x load
      const int8x16_t w0 = vreinterpretq_s8_u8(vld1q_u8(codes + 64 * k));
      const int8x16_t w1 = vreinterpretq_s8_u8(vld1q_u8(codes + 64 * k + 16));
      const int8x16_t w2 = vreinterpretq_s8_u8(vld1q_u8(codes + 64 * k + 32));
      const int8x16_t w3 = vreinterpretq_s8_u8(vld1q_u8(codes + 64 * k + 48));
      for (int t = 0; t < kT; ++t) {
        const int8x16_t xv = vld1q_s8(reinterpret_cast<const int8_t*>(act + t * ld_act + j * kSub + 16 * k));
        isum[t] = vdotq_laneq_s32(isum[t], w0, xv, 0);
        isum[t] = vdotq_laneq_s32(isum[t], w1, xv, 1);
        isum[t] = vdotq_laneq_s32(isum[t], w2, xv, 2);
        isum[t] = vdotq_laneq_s32(isum[t], w3, xv, 3);
      }
    }
    const float32x4_t dwv = vld1q_f32(pn.dw + 4 * j), mv = vld1q_f32(pn.m + 4 * j);
    for (int t = 0; t < kT; ++t) {
      const float* dx = reinterpret_cast<const float*>(act + t * ld_act + l.dx_off);
      const float* s = reinterpret_cast<const float*>(act + t * ld_act + l.s_off);
      const float32x4_t sc = vmulq_f32(dwv, vdupq_n_f32(dx[j * kSub / 32]));
      acc[t] = vfmaq_f32(acc[t], vcvtq_f32_s32(isum[t]), sc);
      if (!kSigned) acc[t] = vfmaq_f32(acc[t], mv, vdupq_n_f32(s[j]));
    }
  }
  for (int t = 0; t < kT; ++t) {
    float tmp[4];
    vst1q_f32(tmp, acc[t]);
    std::memcpy(y + t * ldy, tmp, n_rows * sizeof(float));
  }
}

template <int kSub, bool kSigned>
void Int8Groups(const ops_internal::JobList& jobs, const uint8_t* act, size_t n_tok, size_t g0, size_t g1) {
  const size_t cols = jobs.ws[0].cols;
  const Int8ActLayout l = Int8ActLayoutOf(cols, kSub);
  const size_t panel_bytes = Align64(Panel4Bytes(cols, kSub));
  uint8_t* scratch = ops_internal::TileScratch().Get(panel_bytes + Stage4Bytes(cols, kSub));
  Panel4 pn;
  pn.codes = scratch;
  pn.dw = reinterpret_cast<float*>(scratch + Align64(cols * 4));
  pn.m = pn.dw + (cols / kSub) * 4;
  uint8_t* stage = scratch + panel_bytes;
  ops_internal::ForPanelTokens(
      jobs, n_tok, ops_internal::kPanelTokChunk, g0, g1, [&](const WeightView& w, size_t r0) { PackPanel4(w, r0, pn, stage); },
      [&](size_t j, size_t r0, size_t n_rows, size_t t0, size_t nt) {
        const size_t ldy = jobs.ws[j].rows;
        const uint8_t* a = act + t0 * l.stride;
        float* y = jobs.ys[j] + t0 * ldy + r0;
        switch (nt) {
          case 1: return PanelTokens<kSub, kSigned, 1>(pn, cols, a, l.stride, l, y, ldy, n_rows);
          case 2: return PanelTokens<kSub, kSigned, 2>(pn, cols, a, l.stride, l, y, ldy, n_rows);
          case 3: return PanelTokens<kSub, kSigned, 3>(pn, cols, a, l.stride, l, y, ldy, n_rows);
          default: return PanelTokens<kSub, kSigned, 4>(pn, cols, a, l.stride, l, y, ldy, n_rows);
        }
      });
}

inline void Int8Path(const WeightView* ws, float* const* ys, size_t n, const float* x, size_t n_tok,
                     ThreadPool& pool) {
  const GgmlType type = ws[0].type;
  const size_t cols = ws[0].cols;
  const int sub = ops_internal::Int8SubOf(type);
  const Int8ActLayout l = Int8ActLayoutOf(cols, sub);
  uint8_t* act = ops_internal::ActScratch().Get(l.stride * n_tok);
  ops_internal::ParallelRanges(pool, n_tok, 8, [&](size_t t0, size_t t1) {
    ops_internal::QuantizeActsRef(x + t0 * cols, cols, t1 - t0, sub, act + t0 * l.stride);
  });
  const ops_internal::JobList jobs(ws, ys, n, kRows);
  ops_internal::ParallelRanges(pool, jobs.total(), 2, [&](size_t g0, size_t g1) {
    if (type == GgmlType::kQ6_K) return Int8Groups<16, false>(jobs, act, n_tok, g0, g1);
    if (type == GgmlType::kQ8_0) return Int8Groups<32, true>(jobs, act, n_tok, g0, g1);
    Int8Groups<32, false>(jobs, act, n_tok, g0, g1);
  });
}

}  // namespace neon
}  // namespace mm
}  // namespace HWY_NAMESPACE
}  // namespace chorus
#pragma GCC pop_options
#endif  // CHORUS_HAVE_NEON_INT8
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
