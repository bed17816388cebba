// AVX3_DL path for Q8_0, Q5_1 and Q5_K weights (the others take int8_x86-inl.h's 8-row kernels:
// matmul_kernels.cc): quantize x once, then the row kernels (the Q8_0 stream kernel, UnpackedRows for
// the other types) for every n_tok, ≤ 4 tokens per pass over slabs of
// rows. Invariant: a token's result never depends on the other tokens of the batch (the same
// kernel and lane order whatever n_tok; the 16-row panel GEMM that rounded differently is gone).
#if defined(CHORUS_OPS_VNNI_KERNELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CHORUS_OPS_VNNI_KERNELS_INL_H_
#undef CHORUS_OPS_VNNI_KERNELS_INL_H_
#else
#define CHORUS_OPS_VNNI_KERNELS_INL_H_
#endif

#include <algorithm>
#include <type_traits>

#include "hwy/highway.h"
#include "ops/cpu_target.h"  // Avx512VnniVbmi
#include "ops/float_kernels-inl.h"  // MatMulF32Path, SubBlockOf
#include "ops/matmul_internal.h"    // Scratch
#include "ops/vnni_act-inl.h"
#include "ops/vnni_gemv-inl.h"
#include "ops/vnni_unpacked-inl.h"

HWY_BEFORE_NAMESPACE();
#if HWY_TARGET == HWY_AVX3_DL
#pragma GCC target("avx512vnni")

namespace chorus {
namespace HWY_NAMESPACE {
namespace mm {  // matmul internals (names private to these kernels)

// The decode kernels need VBMI (vpermt2b) and VNNI; Highway's AVX3_DL implies both on every CPU
// we know of, but check once rather than trust it. (Through cpu_target.cc, which runs
// __builtin_cpu_init first: a bare __builtin_cpu_supports read false in CI's ASan build.)
inline bool HaveVnniVbmi() { return Avx512VnniVbmi(); }

template <int kT>
void DecodeRows(const WeightView& w, const uint8_t* act, size_t ld_act, float* y, size_t r0, size_t r1) {
  const size_t nb = w.cols / 32;
  Q8Rows<kT>(w.data, w.row_bytes, nb, r0, r1, act, ld_act, w.cols, y, w.rows);
}

using ops_internal::JobList;

inline constexpr size_t kSlabRows = 64;  // multiple of 16

inline void DecodePath(const JobList& jobs, const float* x, size_t n_tok, ThreadPool& pool) {
  const WeightView& w0 = jobs.ws[0];
  const size_t ld = Signed2LayoutOf(w0.cols).stride;
  uint8_t* act = ops_internal::ActScratch().Get(ld * n_tok);
  QuantizeSigned2(x, w0.cols, n_tok, act);
  const size_t passes = (n_tok + 3) / 4;
  ops_internal::ParallelRanges(pool, jobs.total(), 16, [&](size_t g0, size_t g1) {
    jobs.ForRange(g0, g1, [&](size_t j, size_t r0, size_t r1) {
      const WeightView& w = jobs.ws[j];
      // Slabs of rows small enough to stay in L2 while every pass reads them: the weights come
      // from memory once however many passes (tokens / 4) there are. One pass: the whole range
      // (Q8Rows reads it as several streams; a row's result does not depend on its slab).
      const size_t slab = passes == 1 ? r1 - r0 : kSlabRows;
      for (size_t s0 = r0; s0 < r1; s0 += slab) {
        const size_t s1 = std::min(r1, s0 + slab);
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

inline void UnpackedDecodePath(const JobList& jobs, const float* x, size_t n_tok, ThreadPool& pool) {
  const WeightView& w0 = jobs.ws[0];
  const int sub = SubBlockOf(w0.type);
  const size_t ld = NaturalLayoutOf(w0.cols, sub).stride;
  uint8_t* act = ops_internal::ActScratch().Get(ld * n_tok);
  QuantizeNatural(x, w0.cols, n_tok, sub, act);
  ops_internal::ParallelRanges(pool, jobs.total(), 16, [&](size_t g0, size_t g1) {
    jobs.ForRange(g0, g1, [&](size_t j, size_t r0, size_t r1) {
      const WeightView& w = jobs.ws[j];
      ops_internal::TokenPasses<4>(n_tok, [&](size_t t0, size_t nt) {
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

// ws[0, n) share type and cols (the caller checks).
inline void MatMulVnniPath(const WeightView* ws, float* const* ys, size_t n, const float* x, size_t n_tok,
                           ThreadPool& pool) {
  const GgmlType type = ws[0].type;
  if (type == GgmlType::kQ8_0) return DecodePath(JobList(ws, ys, n, 1), x, n_tok, pool);
  UnpackedDecodePath(JobList(ws, ys, n, 1), x, n_tok, pool);
}

}  // namespace mm
}  // namespace HWY_NAMESPACE
}  // namespace chorus
#endif  // HWY_TARGET == HWY_AVX3_DL
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
