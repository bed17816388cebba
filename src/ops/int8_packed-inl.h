// AVX3_DL kernels for Q4_0 / Q4_1 / Q8_0 weights repacked at load (repack.h): 16 rows in the 16 dword
// lanes of one 512-bit vector. Per 32 columns a panel's codes are 8 code vectors (Q4: 4 loads, the low
// and high nibbles of each by an and, a shift + and; Q8_0: 8 loads of codes stored + 128), each met by
// one vpdpbusd per token against 4 broadcast activation bytes — no per-call packing, no transposes,
// no per-row reduction.
// Token passes over a panel prefetch the next one (CHORUS_WEIGHT_PREFETCH=0 turns it off).
// Invariant: per (row, token) the arithmetic of int8_ref.h in its order (exact integer block sums,
// then acc = fma(float(isum), d · dx, acc), acc = fma(m, s, acc)): bit-identical to the int8 twin
// and independent of n_tok, the panel grouping and the threads.
#if defined(CHORUS_OPS_INT8_PACKED_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CHORUS_OPS_INT8_PACKED_INL_H_
#undef CHORUS_OPS_INT8_PACKED_INL_H_
#else
#define CHORUS_OPS_INT8_PACKED_INL_H_
#endif

#include <cstring>

#include "hwy/highway.h"
#include "ops/cpu_target.h"       // AmxInt8Enabled, AmxWake
#include "ops/int8_amx-inl.h"     // AmxPanelTokens
#include "ops/int8_ref.h"         // Int8ActLayout
#include "ops/int8_x86-inl.h"     // QuantizeActsPool
#include "ops/matmul_internal.h"  // JobList, ParallelRanges, TokenPasses
#include "ops/repack.h"           // kPackedRows, PackedBlockBytes

HWY_BEFORE_NAMESPACE();
#if HWY_TARGET == HWY_AVX3_DL
#pragma GCC target("avx512vnni,amx-tile,amx-int8")  // amx: PackedAmxPanels (int8_amx-inl.h)
#include <immintrin.h>

namespace chorus {
namespace HWY_NAMESPACE {
namespace mm {

HWY_INLINE __m512i Bcast4At(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// One panel (16 rows, nb blocks at `panel`) × kT tokens (activation rows ld_act apart): y[t * ldy + i]
// for the rows in `mask`. Q8_0: its codes are stored + 128, so each block's sum is started at
// −128 · Σ xq (xsum[t][b], exact integers: the sum is the twin's Σ q · xq).
template <GgmlType kType, int kT>
HWY_INLINE void PackedPanelTokens(const uint8_t* panel, size_t nb, const uint8_t* act, size_t ld_act,
                                  const Int8ActLayout& l, const int32_t* xsum, float* y, size_t ldy,
                                  __mmask16 mask, const uint8_t* pf, size_t pf_phase, size_t pf_step) {
  constexpr bool kQ8 = kType == GgmlType::kQ8_0;
  constexpr size_t kBlock = PackedBlockBytes(kType);
  __m512 acc[kT];
  const uint8_t* xq[kT];
  const float* dx[kT];
  const float* s[kT];
#pragma GCC unroll 4
  for (int t = 0; t < kT; ++t) {
    acc[t] = _mm512_setzero_ps();
    xq[t] = act + t * ld_act;
    dx[t] = reinterpret_cast<const float*>(xq[t] + l.dx_off);
    s[t] = reinterpret_cast<const float*>(xq[t] + l.s_off);
  }
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* blk = panel + b * kBlock;
    // pf (the next panel, or null): its blocks pf_phase, pf_phase + pf_step, ... into L2. With several token
    // passes over this panel, each pass asks for its share of the next one, so DRAM streams the next
    // panel the whole time the passes compute from cache (faster than no prefetch or all of it in the
    // first pass). A single pass is one contiguous stream the hardware prefetcher follows alone: a
    // software prefetch there was no better (docs/results/design-measurements.md, PackedInt8Path prefetch).
    if (pf && b == pf_phase) {
      for (size_t o = 0; o < kBlock; o += 64)
        _mm_prefetch(reinterpret_cast<const char*>(pf + b * kBlock + o), _MM_HINT_T1);
      pf_phase += pf_step;
    }
    __m512i c[8];  // c[k]: the codes of elements 4k .. 4k + 3 of the block, 16 rows
    LoadPanelCodes<kType>(blk, c);
    __m512i isum[kT];
#pragma GCC unroll 4
    for (int t = 0; t < kT; ++t) {
      const uint8_t* x = xq[t] + 32 * b;
      // two chains (even and odd k) for the latency; the integer sum is exact in any order
      __m512i e = kQ8 ? _mm512_set1_epi32(-128 * xsum[t * nb + b]) : _mm512_setzero_si512();
      e = _mm512_dpbusd_epi32(e, c[0], Bcast4At(x));
      __m512i o = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c[1], Bcast4At(x + 4));
#pragma GCC unroll 3
      for (int k = 2; k < 8; k += 2) {
        e = _mm512_dpbusd_epi32(e, c[k], Bcast4At(x + 4 * k));
        o = _mm512_dpbusd_epi32(o, c[k + 1], Bcast4At(x + 4 * k + 4));
      }
      isum[t] = _mm512_add_epi32(e, o);
    }
    __m512 dw, mv;
    LoadPanelScales<kType>(blk, &dw, &mv);
#pragma GCC unroll 4
    for (int t = 0; t < kT; ++t) {
      const __m512 sc = _mm512_mul_ps(dw, _mm512_set1_ps(dx[t][b]));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), sc, acc[t]);
      if constexpr (!kQ8) acc[t] = _mm512_fmadd_ps(mv, _mm512_set1_ps(s[t][b]), acc[t]);
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < kT; ++t) _mm512_mask_storeu_ps(y + t * ldy, mask, acc[t]);
}

// The panels of jobs' global range [g0, g1) × all tokens in chunks of kPanelTokChunk (their activations
// stay in L2 while the panels meet them): fn(w, panel, r0, mask, c0, nc) per panel and chunk.
template <class Fn>
HWY_INLINE void ForPackedPanels(const ops_internal::JobList& jobs, size_t n_tok, size_t panel_bytes, size_t g0,
                                size_t g1, const Fn& fn) {
  for (size_t c0 = 0; c0 < n_tok; c0 += ops_internal::kPanelTokChunk) {
    const size_t nc = std::min(n_tok - c0, ops_internal::kPanelTokChunk);
    jobs.ForRange(g0, g1, [&](size_t j, size_t p0, size_t p1) {
      const WeightView& w = jobs.ws[j];
      for (size_t p = p0; p < p1; ++p) {
        const size_t r0 = p * kPackedRows, n_rows = std::min(kPackedRows, w.rows - r0);
        fn(w, jobs.ys[j], w.packed + p * panel_bytes, r0, static_cast<__mmask16>((1u << n_rows) - 1), c0, nc);
      }
    });
  }
}

// Below this many tokens the VNNI kernel is faster than the AMX one (docs/results/design-measurements.md,
// kAmxMinTokens).
inline constexpr size_t kAmxMinTokens = 12;

// PackedInt8Path on AMX: act holds the tokens' codes (signed xq), and kAmxTokens readable rows past the
// last. Panels over the pool; per panel and chunk of kPanelTokChunk tokens, tile products of ≤ 16 tokens.
template <GgmlType kType>
void PackedAmxPanels(const WeightView* ws, float* const* ys, size_t n, const uint8_t* act,
                     const ops_internal::Int8ActLayout& l, size_t n_tok, ThreadPool& pool) {
  const size_t nb = ws[0].cols / 32;
  // dx and s transposed: block b's tokens side by side (ldt floats a block, zeros past n_tok), so a
  // tile's epilogue reads 16 tokens' scales from one base
  const size_t ldt = n_tok + kAmxTokens;
  thread_local AlignedBuffer<float> scales_t;
  if (scales_t.size() < 2 * nb * ldt) scales_t.Resize(2 * nb * ldt);
  float* dxt = scales_t.data();
  float* sxt = dxt + nb * ldt;
  for (size_t b = 0; b < nb; ++b) {
    for (size_t t = 0; t < n_tok; ++t) {
      const uint8_t* row = act + t * l.stride;
      dxt[b * ldt + t] = reinterpret_cast<const float*>(row + l.dx_off)[b];
      sxt[b * ldt + t] = kType == GgmlType::kQ8_0 ? 0.0f : reinterpret_cast<const float*>(row + l.s_off)[b];
    }
    std::fill(dxt + b * ldt + n_tok, dxt + (b + 1) * ldt, 0.0f);
    std::fill(sxt + b * ldt + n_tok, sxt + (b + 1) * ldt, 0.0f);
  }
  const ops_internal::JobList jobs(ws, ys, n, kPackedRows);
  const size_t panel_bytes = nb * PackedBlockBytes(kType);
  const bool prefetch = ops_internal::WeightPrefetch();
  ops_internal::ParallelRanges(pool, jobs.total(), 1, [&](size_t g0, size_t g1) {
    AmxWake();  // while the first panel is staged
    uint8_t* st = ops_internal::TileScratch().Get(nb * kAmxStageBlock);
    ForPackedPanels(jobs, n_tok, panel_bytes, g0, g1,
                    [&](const WeightView& w, float* yw, const uint8_t* panel, size_t r0, __mmask16 mask, size_t c0, size_t nc) {
      if (nc <= kAmxTokens) {  // one group: each block staged just before its product
        const uint8_t* pf = prefetch ? panel + panel_bytes : nullptr;
        AmxPanelTokens<kType, true>(panel, st, nb, act + c0 * l.stride, l.stride, dxt + c0, sxt + c0, ldt, nc,
                                    yw + c0 * w.rows + r0, w.rows, mask, pf);
        return;
      }
      AmxStagePanel<kType>(panel, nb, st);
      ops_internal::TokenPasses<kAmxTokens>(nc, [&](size_t t0, size_t nt) {
        const size_t t = c0 + t0;
        const uint8_t* a = act + t * l.stride;
        float* y = yw + t * w.rows + r0;
        // the first group over a panel asks for the next one, spread over its blocks
        const uint8_t* pf = prefetch && t0 == 0 ? panel + panel_bytes : nullptr;
        AmxPanelTokens<kType, false>(panel, st, nb, a, l.stride, dxt + t, sxt + t, ldt, nt, y, w.rows, mask, pf);
      });
    });
  });
}

// ws[0, n): Q4_0, Q4_1 or Q8_0 (one type and cols), every one with `packed`. Quantize x once (the int8
// layout of int8_ref.h; Q8_0: and each block's Σ xq), then panels over the pool; tokens in chunks of
// kPanelTokChunk (their activations stay in L2 while a panel meets them ≤ 4 at a time).
inline void PackedInt8Path(const WeightView* ws, float* const* ys, size_t n, const float* x, size_t n_tok,
                         ThreadPool& pool) {
  const GgmlType type = ws[0].type;
  const size_t cols = ws[0].cols, nb = cols / 32;
  const Int8ActLayout l = Int8ActLayoutOf(cols, 32);
  const bool q8 = type == GgmlType::kQ8_0;
  const bool amx = n_tok >= kAmxMinTokens && AmxInt8Enabled();
  // AMX: a tile reads kAmxTokens rows from its first token on, so the rows past n_tok exist (zeros)
  const size_t act_rows = amx ? n_tok + kAmxTokens : n_tok;
  const size_t sums_off = Align64(l.stride * act_rows);
  uint8_t* act = ops_internal::ActScratch().Get(sums_off + (q8 ? n_tok * nb * sizeof(int32_t) : 0));
  if (amx) AmxWake();  // this thread's tile unit, while the activations are quantized
  QuantizeActsPool(x, cols, n_tok, 32, act, pool);
  if (amx) {
    std::memset(act + n_tok * l.stride, 0, (act_rows - n_tok) * l.stride);
    switch (type) {
      case GgmlType::kQ4_0: return PackedAmxPanels<GgmlType::kQ4_0>(ws, ys, n, act, l, n_tok, pool);
      case GgmlType::kQ4_1: return PackedAmxPanels<GgmlType::kQ4_1>(ws, ys, n, act, l, n_tok, pool);
      default: return PackedAmxPanels<GgmlType::kQ8_0>(ws, ys, n, act, l, n_tok, pool);
    }
  }
  auto* xsum = reinterpret_cast<int32_t*>(act + sums_off);
  if (q8) {
    for (size_t t = 0; t < n_tok; ++t)
      for (size_t b = 0; b < nb; ++b) {
        const auto* q = reinterpret_cast<const int8_t*>(act + t * l.stride + 32 * b);
        int32_t sum = 0;
        for (int i = 0; i < 32; ++i) sum += q[i];
        xsum[t * nb + b] = sum;
      }
  }
  const ops_internal::JobList jobs(ws, ys, n, kPackedRows);
  const size_t panel_bytes = nb * PackedBlockBytes(type);
  const bool prefetch = ops_internal::WeightPrefetch();
  ops_internal::ParallelRanges(pool, jobs.total(), 1, [&](size_t g0, size_t g1) {
    ForPackedPanels(jobs, n_tok, panel_bytes, g0, g1,
                    [&](const WeightView& w, float* yw, const uint8_t* panel, size_t r0, __mmask16 mask, size_t c0, size_t nc) {
      ops_internal::TokenPasses<4>(nc, [&](size_t t0, size_t nt) {
        const size_t t = c0 + t0;
        const uint8_t* a = act + t * l.stride;
        float* y = yw + t * w.rows + r0;
        // pass `pass` of `passes` (TokenPasses' t0 = nc · pass / passes, rounded down) prefetches
        // the next panel's blocks b with b % passes == pass
        const size_t passes = (nc + 3) / 4, pass = (t0 * passes + nc - 1) / nc;
        const uint8_t* pf = prefetch && passes > 1 ? panel + panel_bytes : nullptr;
        auto run = [&]<int kT>() {
          switch (type) {
            case GgmlType::kQ4_0:
              return PackedPanelTokens<GgmlType::kQ4_0, kT>(panel, nb, a, l.stride, l, nullptr, y, w.rows, mask, pf, pass, passes);
            case GgmlType::kQ4_1:
              return PackedPanelTokens<GgmlType::kQ4_1, kT>(panel, nb, a, l.stride, l, nullptr, y, w.rows, mask, pf, pass, passes);
            default:
              return PackedPanelTokens<GgmlType::kQ8_0, kT>(panel, nb, a, l.stride, l, xsum + t * nb, y, w.rows, mask, pf,
                                                            pass, passes);
          }
        };
        switch (nt) {
          case 1: return run.template operator()<1>();
          case 2: return run.template operator()<2>();
          case 3: return run.template operator()<3>();
          default: return run.template operator()<4>();
        }
      });
    });
  });
}

}  // namespace mm
}  // namespace HWY_NAMESPACE
}  // namespace chorus
#endif  // HWY_TARGET == HWY_AVX3_DL
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
