// AVX3_DL path for quantized weights: quantize x once, then decode kernels (Q4_0/Q4_1/Q8_0 with
// ≤ kDecodeMaxTok tokens) or the VNNI panel GEMM (everything else), rows split over the pool.
#if defined(CHORUS_OPS_VNNI_KERNELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CHORUS_OPS_VNNI_KERNELS_INL_H_
#undef CHORUS_OPS_VNNI_KERNELS_INL_H_
#else
#define CHORUS_OPS_VNNI_KERNELS_INL_H_
#endif

#include <algorithm>
#include <type_traits>

#include "hwy/highway.h"
#include "ops/float_kernels-inl.h"  // MatMulF32Path, SubBlockOf
#include "ops/matmul_internal.h"    // Scratch
#include "ops/vnni_act-inl.h"
#include "ops/vnni_gemm-inl.h"
#include "ops/vnni_gemv-inl.h"
#include "ops/vnni_unpacked-inl.h"

HWY_BEFORE_NAMESPACE();
#if HWY_TARGET == HWY_AVX3_DL
#pragma GCC target("avx512vnni")

namespace chorus {
namespace HWY_NAMESPACE {
namespace mm {  // matmul internals (names private to these kernels)

// Q4_0/Q4_1 (Q8_0) with ≤ 16 (8) tokens take the decode kernels, ≤ 4 tokens per pass over a slab
// of rows; beyond that the panel GEMM's packing pays for itself (measured crossovers: 12 before the
// slabs, which read the weights once for all passes; bench/matmul_bench ModelMatMuls n_tok 8–24).
// Up to 16 tokens a token's result does not depend on the others in the batch (same kernel).
// Q8_0 (SmolLM2's output matrix) stays at 8: at 15 tokens its GEMM measured faster (14–18 vs 20 ms).
// The other quantized types decode rows through UnpackedRows up to 8 tokens.
inline size_t DecodeMaxTok(GgmlType t) {
  return t == GgmlType::kQ4_0 || t == GgmlType::kQ4_1 ? 16 : 8;
}

// The decode kernels need VBMI (vpermt2b) and VNNI; Highway's AVX3_DL implies both on every CPU
// we know of, but check once rather than trust it.
inline bool HaveVnniVbmi() {
  static const bool ok = __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vbmi");
  return ok;
}

template <int kT>
void DecodeRows(const WeightView& w, const uint8_t* act, size_t ld_act, float* y, size_t r0, size_t r1) {
  const size_t nb = w.cols / 32;
  switch (w.type) {
    case GgmlType::kQ4_0:
      if (w.row_bytes == nb * 18) return Q4Stream<18, false, kT>(w.data, nb, r0, r1, act, ld_act, w.cols, y, w.rows);
      return Q4Rows<18, false, kT>(w.data, w.row_bytes, nb, r0, r1, act, ld_act, w.cols, y, w.rows);
    case GgmlType::kQ4_1:
      if (w.row_bytes == nb * 20) return Q4Stream<20, true, kT>(w.data, nb, r0, r1, act, ld_act, w.cols, y, w.rows);
      return Q4Rows<20, true, kT>(w.data, w.row_bytes, nb, r0, r1, act, ld_act, w.cols, y, w.rows);
    default:
      return Q8Rows<kT>(w.data, w.row_bytes, nb, r0, r1, act, ld_act, w.cols, y, w.rows);
  }
}

// Matrices of one type and width sharing x; global row g of the list is row g - start[j] of ws[j].
struct JobList {
  const WeightView* ws;
  float* const* ys;
  size_t n;
  size_t start[ops_internal::kMaxJobs + 1];  // prefix sums of `units` (rows or panels) per matrix

  JobList(const WeightView* w, float* const* y, size_t count, size_t unit) : ws(w), ys(y), n(count) {
    start[0] = 0;
    for (size_t j = 0; j < n; ++j) start[j + 1] = start[j] + (ws[j].rows + unit - 1) / unit;
  }
  size_t total() const { return start[n]; }
  // Calls fn(j, local_begin, local_end) for every matrix overlapping global units [g0, g1).
  template <class Fn>
  void ForRange(size_t g0, size_t g1, const Fn& fn) const {
    for (size_t j = 0; j < n; ++j) {
      const size_t b = std::max(g0, start[j]), e = std::min(g1, start[j + 1]);
      if (b < e) fn(j, b - start[j], e - start[j]);
    }
  }
};

inline constexpr size_t kSlabRows = 64;  // multiple of 16

inline void DecodePath(const JobList& jobs, const float* x, size_t n_tok, ThreadPool& pool) {
  const WeightView& w0 = jobs.ws[0];
  const bool q8 = w0.type == GgmlType::kQ8_0;
  const size_t ld = q8 ? Biased2LayoutOf(w0.cols).stride : Split4LayoutOf(w0.cols).stride;
  uint8_t* act = ops_internal::ActScratch().Get(ld * n_tok);
  if (q8) {
    QuantizeBiased2(x, w0.cols, n_tok, act);
  } else {
    QuantizeSplit4(x, w0.cols, n_tok, act);
  }
  const size_t passes = (n_tok + 3) / 4;
  ops_internal::ParallelRanges(pool, jobs.total(), 16, [&](size_t g0, size_t g1) {
    jobs.ForRange(g0, g1, [&](size_t j, size_t r0, size_t r1) {
      const WeightView& w = jobs.ws[j];
      // Slabs of rows small enough to stay in L2 while every pass reads them: the weights come
      // from memory once however many passes (tokens / 4) there are.
      for (size_t s0 = r0; s0 < r1; s0 += kSlabRows) {
        const size_t s1 = std::min(r1, s0 + kSlabRows);
        for (size_t i = 0; i < passes; ++i) {
          const size_t t0 = n_tok * i / passes, nt = n_tok * (i + 1) / passes - t0;
          const uint8_t* a = act + t0 * ld;
          float* yt = jobs.ys[j] + t0 * w.rows;
          switch (nt) {
            case 1: DecodeRows<1>(w, a, ld, yt, s0, s1); break;
            case 2: DecodeRows<2>(w, a, ld, yt, s0, s1); break;
            case 3: DecodeRows<3>(w, a, ld, yt, s0, s1); break;
            default: DecodeRows<4>(w, a, ld, yt, s0, s1); break;
          }
        }
      }
    });
  });
}

// Tokens in passes of ≤ 4 (balanced); fn(t0, nt) per pass.
template <class Fn>
HWY_INLINE void TokenPasses(size_t n_tok, const Fn& fn) {
  const size_t passes = (n_tok + 3) / 4;
  for (size_t i = 0; i < passes; ++i) {
    const size_t t0 = n_tok * i / passes;
    fn(t0, n_tok * (i + 1) / passes - t0);
  }
}

inline void UnpackedDecodePath(const JobList& jobs, const float* x, size_t n_tok, ThreadPool& pool) {
  const WeightView& w0 = jobs.ws[0];
  const int sub = SubBlockOf(w0.type);
  const size_t ld = NaturalLayoutOf(w0.cols, sub).stride;
  uint8_t* act = ops_internal::ActScratch().Get(ld * n_tok);
  QuantizeNatural(x, w0.cols, n_tok, sub, act);
  ops_internal::ParallelRanges(pool, jobs.total(), 16, [&](size_t g0, size_t g1) {
    jobs.ForRange(g0, g1, [&](size_t j, size_t r0, size_t r1) {
      const WeightView& w = jobs.ws[j];
      TokenPasses(n_tok, [&](size_t t0, size_t nt) {
        const uint8_t* a = act + t0 * ld;
        float* yt = jobs.ys[j] + t0 * w.rows;
        auto run = [&](auto sub_tag) {
          constexpr int kSub = decltype(sub_tag)::value;
          switch (nt) {
            case 1: return UnpackedRows<kSub, 1>(w, a, ld, yt, r0, r1);
            case 2: return UnpackedRows<kSub, 2>(w, a, ld, yt, r0, r1);
            case 3: return UnpackedRows<kSub, 3>(w, a, ld, yt, r0, r1);
            default: return UnpackedRows<kSub, 4>(w, a, ld, yt, r0, r1);
          }
        };
        if (sub == 32) {
          run(std::integral_constant<int, 32>());
        } else {
          run(std::integral_constant<int, 16>());
        }
      });
    });
  });
}

template <int kSub>
void GemmPanels(const JobList& panels, size_t tile_groups, const TokenTiling& tt, const uint8_t* act,
                size_t tile_bytes, size_t i0, size_t i1) {
  const size_t cols = panels.ws[0].cols;
  uint8_t* scratch = ops_internal::TileScratch().Get(PanelScratchBytes(cols, kSub));
  uint8_t* panel = scratch;
  uint8_t* tmp = scratch + Align64(PanelBytes(cols, kSub));
  size_t packed = ~size_t{0};
  panels.ForRange(i0 / tile_groups, (i1 + tile_groups - 1) / tile_groups, [&](size_t j, size_t p0, size_t p1) {
    const WeightView& w = panels.ws[j];
    for (size_t p = p0; p < p1; ++p) {
      const size_t gp = panels.start[j] + p;  // global panel
      const size_t grp_begin = gp * tile_groups < i0 ? i0 - gp * tile_groups : 0;
      const size_t grp_end = std::min(tile_groups, i1 - gp * tile_groups);
      if (grp_begin >= grp_end) continue;
      if (gp != packed) {
        PackVnniPanel<kSub>(w, p * kPanelRows, panel, tmp);
        packed = gp;
      }
      const size_t r0 = p * kPanelRows, n_rows = std::min(kPanelRows, w.rows - r0);
      for (size_t grp = grp_begin; grp < grp_end; ++grp) {
        const size_t t_begin = tt.n_tiles * grp / tile_groups, t_end = tt.n_tiles * (grp + 1) / tile_groups;
        for (size_t ti = t_begin; ti < t_end; ++ti) {
          VnniTile<kSub>(tt.Size(ti), panel, cols, act + ti * tile_bytes, panels.ys[j] + tt.Start(ti) * w.rows + r0,
                         w.rows, n_rows);
        }
      }
    }
  });
}

inline void GemmPath(const WeightView* ws, float* const* ys, size_t n, const float* x, size_t n_tok,
                     ThreadPool& pool) {
  const int sub = SubBlockOf(ws[0].type);
  const size_t cols = ws[0].cols;
  const TokenTiling tt = TokenTilingOf(n_tok);
  const size_t tile_bytes = TileLayoutOf(cols, sub, kMaxTileTok).bytes;
  uint8_t* act = ops_internal::ActScratch().Get(tile_bytes * tt.n_tiles);
  auto quantize = [&](size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; ++i) QuantizeTile(x, cols, tt.Start(i), tt.Size(i), sub, act + i * tile_bytes);
  };
  if (n_tok >= 32) {
    ops_internal::ParallelRanges(pool, tt.n_tiles, 1, quantize);
  } else {
    quantize(0, tt.n_tiles);
  }
  // Work items: (global panel, group of tiles); a thread's items are consecutive, so it packs each
  // of its panels once. Split tiles only when there are too few panels to keep every thread busy.
  const JobList panels(ws, ys, n, kPanelRows);
  const size_t want = static_cast<size_t>(pool.size()) * 4;
  const size_t tile_groups = std::min(tt.n_tiles, std::max<size_t>(1, (want + panels.total() - 1) / panels.total()));
  ops_internal::ParallelRanges(pool, panels.total() * tile_groups, 1, [&](size_t i0, size_t i1) {
    if (sub == 32) {
      GemmPanels<32>(panels, tile_groups, tt, act, tile_bytes, i0, i1);
    } else {
      GemmPanels<16>(panels, tile_groups, tt, act, tile_bytes, i0, i1);
    }
  });
}

// ws[0, n) share type and cols (the caller checks).
inline void MatMulVnniPath(const WeightView* ws, float* const* ys, size_t n, const float* x, size_t n_tok,
                           ThreadPool& pool) {
  const GgmlType type = ws[0].type;
  const bool decode_type = type == GgmlType::kQ4_0 || type == GgmlType::kQ4_1 || type == GgmlType::kQ8_0;
  if (n_tok <= DecodeMaxTok(type)) {
    if (decode_type) return DecodePath(JobList(ws, ys, n, 1), x, n_tok, pool);
    return UnpackedDecodePath(JobList(ws, ys, n, 1), x, n_tok, pool);
  }
  GemmPath(ws, ys, n, x, n_tok, pool);
}

}  // namespace mm
}  // namespace HWY_NAMESPACE
}  // namespace chorus
#endif  // HWY_TARGET == HWY_AVX3_DL
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
