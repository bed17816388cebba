// SIMD Score/Accumulate kernels per KV format, computed straight from the compressed bytes
// (Highway, dynamic dispatch). No dequantized copy: codes become values in registers.
#include "kv/kv_kernels.h"

#include <cstring>
#include <type_traits>

#include "kv/kv_format_layout.h"  // offsets, TileBytes, Codebook
#include "util/fp16.h"            // F16ToF32 (scalar tails)

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kv/kv_kernels_simd.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kv/kv_kernels-inl.h"  // UnpackCodes, CentroidTable, LoadF16, LoadI8

HWY_BEFORE_NAMESPACE();
namespace chorus {
namespace HWY_NAMESPACE {

using kv_layout::kGroupCodes;
using kv_layout::PackedGroupBytes;
template <size_t k>
using QTile = std::integral_constant<size_t, k>;

// Runs fn(QTile<k>, i0) over the queries in register tiles of at most kMax (3 or 4).
template <size_t kMax = 4, class Fn>
HWY_INLINE void ForQueryTiles(size_t n_q, const Fn& fn) {
  size_t i0 = 0;
  for (; i0 + kMax <= n_q; i0 += kMax) fn(QTile<kMax>(), i0);
  switch (n_q - i0) {
    case 3: fn(QTile<3>(), i0); break;
    case 2: fn(QTile<2>(), i0); break;
    case 1: fn(QTile<1>(), i0); break;
    default: break;
  }
}

// ---- Row formats: token j is one row, k̂_j = Scale(row) · values(row) ----------------------

struct F16Rows {
  const uint8_t* tile;
  uint32_t d;
  const uint8_t* Row(size_t j) const { return tile + j * 2 * size_t{d}; }
  float Scale(const uint8_t*) const { return 1.0f; }
  VF Load(DF df, const uint8_t* row, size_t c) const { return LoadF16(df, row + 2 * c); }
  float At(const uint8_t* row, size_t c) const {
    uint16_t h;
    std::memcpy(&h, row + 2 * c, 2);
    return F16ToF32(h);
  }
};

struct Q8Rows {
  const uint8_t* tile;
  uint32_t d;
  const uint8_t* Row(size_t j) const { return tile + j * kv_layout::Q8RowBytes(d); }
  float Scale(const uint8_t* row) const { return LoadF16One(row); }
  VF Load(DF df, const uint8_t* row, size_t c) const { return LoadI8(df, row + 2 + c); }
  float At(const uint8_t* row, size_t c) const { return static_cast<int8_t>(row[2 + c]); }
};

struct PolyKvPaperRows {
  const uint8_t* tile;
  uint32_t d;
  float scale;  // the block header's layer scale
  const uint8_t* Row(size_t j) const { return tile + j * size_t{d}; }
  float Scale(const uint8_t*) const { return scale; }
  VF Load(DF df, const uint8_t* row, size_t c) const { return LoadI8(df, row + c); }
  float At(const uint8_t* row, size_t c) const { return static_cast<int8_t>(row[c]); }
};

template <uint32_t kBits>
struct TqRows {  // head_dim is a multiple of 32, hence of N: no scalar tail
  const uint8_t* tile;
  uint32_t d;
  float inv_sqrt_d;
  CentroidTable<kBits> table;
  const uint8_t* Row(size_t j) const { return tile + j * kv_layout::TqRowBytes(kBits, d); }
  float Scale(const uint8_t* row) const { return LoadF16One(row) * inv_sqrt_d; }
  VF Load(DF df, const uint8_t* row, size_t c) const {
    const uint8_t* group = row + 2 + (c / kGroupCodes) * PackedGroupBytes(kBits);
    return table.Lookup(UnpackCodes<kBits>(DU(), group, c % kGroupCodes));
  }
  float At(const uint8_t* row, size_t c) const {
    const uint8_t* group = row + 2 + (c / kGroupCodes) * PackedGroupBytes(kBits);
    return kv_layout::Codebook(kBits).centroid[kv_layout::UnpackCode(kBits, group, c % kGroupCodes)];
  }
};

// A row tile decoded once into f32 (values before the row scale, which stays separate), for many
// stacked queries: the per-query arithmetic is then bit-identical to reading the compressed rows
// directly (the same floats meet the same FMAs in the same order), so an agent's result does not
// depend on how many other queries share the pass. Scratch lives on the stack (≤ 32 KiB).
inline constexpr uint32_t kDecodeMaxDim = 256;

struct DecodedRows {
  const float* tile;    // (32, d)
  uint32_t d;
  const float* scales;  // (32)
  const uint8_t* Row(size_t j) const { return reinterpret_cast<const uint8_t*>(tile + j * d); }
  float Scale(const uint8_t* row) const { return scales[(reinterpret_cast<const float*>(row) - tile) / d]; }
  VF Load(DF df, const uint8_t* row, size_t c) const { return hn::LoadU(df, reinterpret_cast<const float*>(row) + c); }
  float At(const uint8_t* row, size_t c) const { return reinterpret_cast<const float*>(row)[c]; }
};

template <class Rows>
HWY_INLINE DecodedRows DecodeRows(const Rows& rows, uint32_t d, float* tile, float* scales) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const size_t d_vec = d - d % N;
  for (size_t j = 0; j < kBlockTokens; ++j) {
    const uint8_t* row = rows.Row(j);
    scales[j] = rows.Scale(row);
    float* out = tile + j * d;
    for (size_t c = 0; c < d_vec; c += N) hn::StoreU(rows.Load(df, row, c), df, out + c);
    for (size_t c = d_vec; c < d; ++c) out[c] = rows.At(row, c);
  }
  return DecodedRows{tile, d, scales};
}

// scores[i*ld + j] = Scale_j · Σ_c q[i*d + c] · values_j[c], for kQ queries. Tokens go in fours
// so that their horizontal sums share one transposing reduction (Sum4).
template <size_t kQ, class Rows>
HWY_INLINE void ScoreRowsTile(const Rows& rows, uint32_t d, const float* q, float* scores, size_t ld) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const size_t d_vec = d - d % N;
  HWY_ALIGN float scale[kBlockTokens];
  for (size_t j = 0; j < kBlockTokens; ++j) scale[j] = rows.Scale(rows.Row(j));
#if HWY_TARGET != HWY_SCALAR
  {
    static_assert(hn::MaxLanes(DF()) >= 4);
    constexpr size_t kT = 4;
    const hn::CappedTag<float, 4> d4;
    for (size_t j0 = 0; j0 < kBlockTokens; j0 += kT) {
      const uint8_t* row[kT];
      for (size_t t = 0; t < kT; ++t) row[t] = rows.Row(j0 + t);
      VF acc[kQ][kT];
      for (size_t i = 0; i < kQ; ++i) {
        for (size_t t = 0; t < kT; ++t) acc[i][t] = hn::Zero(df);
      }
      for (size_t c = 0; c < d_vec; c += N) {
        VF qv[kQ];
        for (size_t i = 0; i < kQ; ++i) qv[i] = hn::LoadU(df, q + i * d + c);
        for (size_t t = 0; t < kT; ++t) {
          const VF v = rows.Load(df, row[t], c);
          for (size_t i = 0; i < kQ; ++i) acc[i][t] = hn::MulAdd(qv[i], v, acc[i][t]);
        }
      }
      for (size_t i = 0; i < kQ; ++i) {
        auto sum = Sum4(df, acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
        if (d_vec != d) {
          HWY_ALIGN float tail[kT] = {0, 0, 0, 0};
          for (size_t t = 0; t < kT; ++t) {
            for (size_t c = d_vec; c < d; ++c) tail[t] += q[i * d + c] * rows.At(row[t], c);
          }
          sum = hn::Add(sum, hn::Load(d4, tail));
        }
        hn::StoreU(hn::Mul(sum, hn::Load(d4, scale + j0)), d4, scores + i * ld + j0);
      }
    }
  }
#else  // 1-lane target: plain sums
  {
    for (size_t j = 0; j < kBlockTokens; ++j) {
      const uint8_t* row = rows.Row(j);
      for (size_t i = 0; i < kQ; ++i) {
        VF acc = hn::Zero(df);
        for (size_t c = 0; c < d_vec; c += N) acc = hn::MulAdd(hn::LoadU(df, q + i * d + c), rows.Load(df, row, c), acc);
        float sum = ReduceSum(df, acc);
        for (size_t c = d_vec; c < d; ++c) sum += q[i * d + c] * rows.At(row, c);
        scores[i * ld + j] = sum * scale[j];
      }
    }
  }
#endif
}

// acc[i*d + c] += Σ_j (p[i*ld + j] · Scale_j) · values_j[c], for kQ queries.
template <size_t kQ, class Rows>
HWY_INLINE void AccumulateRowsTile(const Rows& rows, uint32_t d, const float* p, size_t ld, float* acc) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const size_t d_vec = d - d % N;
  HWY_ALIGN float w[kQ][kBlockTokens];  // p · row scale
  for (size_t j = 0; j < kBlockTokens; ++j) {
    const float s = rows.Scale(rows.Row(j));
    for (size_t i = 0; i < kQ; ++i) w[i][j] = p[i * ld + j] * s;
  }
  for (size_t c = 0; c < d_vec; c += N) {
    VF a[kQ];
    for (size_t i = 0; i < kQ; ++i) a[i] = hn::LoadU(df, acc + i * d + c);
    for (size_t j = 0; j < kBlockTokens; ++j) {
      const VF v = rows.Load(df, rows.Row(j), c);
      for (size_t i = 0; i < kQ; ++i) a[i] = hn::MulAdd(hn::Set(df, w[i][j]), v, a[i]);
    }
    for (size_t i = 0; i < kQ; ++i) hn::StoreU(a[i], df, acc + i * d + c);
  }
  for (size_t c = d_vec; c < d; ++c) {
    for (size_t i = 0; i < kQ; ++i) {
      float sum = acc[i * d + c];
      for (size_t j = 0; j < kBlockTokens; ++j) sum += w[i][j] * rows.At(rows.Row(j), c);
      acc[i * d + c] = sum;
    }
  }
}

// ---- KIVI ---------------------------------------------------------------------------------

// Keys, group = channel over the 32 tokens: q·k̂_j = Σ_c (q_c·scale_c)·code_cj + Σ_c q_c·min_c.
// Lanes run over tokens, so no horizontal sums.
// codes: null, or the block's codes decoded once to floats, (d, 32) channel-major.
template <size_t kQ, uint32_t kBits>
HWY_INLINE void ScoreKiviKeyTile(const uint8_t* tile, uint32_t d, const float* q, float* scores, size_t ld,
                                 const float* decoded) {
  const DF df;
  const DU du;
  const size_t N = hn::Lanes(df);
  const size_t d_vec = d - d % N;
  const uint8_t* mins = tile + kv_layout::KiviMinOffset(d);
  HWY_ALIGN float qs[kQ][kMaxHeadDim];  // q ⊙ scale
  float base[kQ];                       // q · min
  VF base_acc[kQ];
  for (size_t i = 0; i < kQ; ++i) base_acc[i] = hn::Zero(df);
  for (size_t c = 0; c < d_vec; c += N) {
    const VF s = LoadF16(df, tile + 2 * c), m = LoadF16(df, mins + 2 * c);
    for (size_t i = 0; i < kQ; ++i) {
      const VF qv = hn::LoadU(df, q + i * d + c);
      hn::Store(hn::Mul(qv, s), df, qs[i] + c);
      base_acc[i] = hn::MulAdd(qv, m, base_acc[i]);
    }
  }
  for (size_t i = 0; i < kQ; ++i) {
    base[i] = ReduceSum(df, base_acc[i]);
    for (size_t c = d_vec; c < d; ++c) {
      qs[i][c] = q[i * d + c] * LoadF16One(tile + 2 * c);
      base[i] += q[i * d + c] * LoadF16One(mins + 2 * c);
    }
  }
  const uint8_t* codes = tile + kv_layout::KiviCodesOffset(d);
  constexpr size_t kGroupBytes = PackedGroupBytes(kBits);
  for (size_t t0 = 0; t0 < kBlockTokens; t0 += N) {
    VF acc[kQ];
    for (size_t i = 0; i < kQ; ++i) acc[i] = hn::Set(df, base[i]);
    for (size_t c = 0; c < d; ++c) {
      const VF code = decoded ? hn::LoadU(df, decoded + c * kBlockTokens + t0)
                              : CodesToFloat(df, UnpackCodes<kBits>(du, codes + c * kGroupBytes, t0));
      for (size_t i = 0; i < kQ; ++i) acc[i] = hn::MulAdd(hn::Set(df, qs[i][c]), code, acc[i]);
    }
    for (size_t i = 0; i < kQ; ++i) hn::StoreU(acc[i], df, scores + i * ld + t0);
  }
}

// Values, group = 32 channels of one token: Σ_j p_j·v̂_j = Σ_j (p_j·scale_j)·code_j + Σ_j p_j·min_j
// per channel group. Lanes run over channels.
// decoded: null, or the block's codes decoded once to floats, (d/32 groups, 32 tokens, 32 codes).
template <size_t kQ, uint32_t kBits>
HWY_INLINE void AccumulateKiviValueTile(const uint8_t* tile, uint32_t d, const float* p, size_t ld, float* acc,
                                        const float* decoded) {
  const DF df;
  const DU du;
  const size_t N = hn::Lanes(df);
  constexpr size_t kGroupBytes = PackedGroupBytes(kBits);
  HWY_ALIGN float w[kQ][kBlockTokens];  // p ⊙ scale of this channel group
  for (size_t cg = 0; cg < d / kGroupCodes; ++cg) {
    const uint8_t* scales = tile + 2 * cg * kBlockTokens;
    const uint8_t* mins = tile + kv_layout::KiviMinOffset(d) + 2 * cg * kBlockTokens;
    VF bias_acc[kQ];
    for (size_t i = 0; i < kQ; ++i) bias_acc[i] = hn::Zero(df);
    for (size_t t0 = 0; t0 < kBlockTokens; t0 += N) {
      const VF s = LoadF16(df, scales + 2 * t0), m = LoadF16(df, mins + 2 * t0);
      for (size_t i = 0; i < kQ; ++i) {
        const VF pv = hn::LoadU(df, p + i * ld + t0);
        hn::Store(hn::Mul(pv, s), df, w[i] + t0);
        bias_acc[i] = hn::MulAdd(pv, m, bias_acc[i]);
      }
    }
    float bias[kQ];
    for (size_t i = 0; i < kQ; ++i) bias[i] = ReduceSum(df, bias_acc[i]);
    const uint8_t* codes = tile + kv_layout::KiviCodesOffset(d) + cg * kBlockTokens * kGroupBytes;
    for (size_t c0 = 0; c0 < kGroupCodes; c0 += N) {
      float* out = acc + cg * kGroupCodes + c0;
      VF a[kQ];
      for (size_t i = 0; i < kQ; ++i) a[i] = hn::Add(hn::LoadU(df, out + i * d), hn::Set(df, bias[i]));
      for (size_t j = 0; j < kBlockTokens; ++j) {
        const VF code = decoded ? hn::LoadU(df, decoded + (cg * kBlockTokens + j) * kGroupCodes + c0)
                                : CodesToFloat(df, UnpackCodes<kBits>(du, codes + j * kGroupBytes, c0));
        for (size_t i = 0; i < kQ; ++i) a[i] = hn::MulAdd(hn::Set(df, w[i][j]), code, a[i]);
      }
      for (size_t i = 0; i < kQ; ++i) hn::StoreU(a[i], df, out + i * d);
    }
  }
}

// Every 32-code group of a KIVI tile (d/32·32 groups for values, d for keys: both d·32 codes in
// group order) as floats, for stacked queries: the same floats the direct path unpacks.
template <uint32_t kBits>
HWY_INLINE void DecodeKiviCodes(const uint8_t* codes, size_t n_groups, float* out) {
  const DF df;
  const DU du;
  const size_t N = hn::Lanes(df);
  constexpr size_t kGroupBytes = PackedGroupBytes(kBits);
  for (size_t gi = 0; gi < n_groups; ++gi) {
    for (size_t i0 = 0; i0 < kGroupCodes; i0 += N)
      hn::StoreU(CodesToFloat(df, UnpackCodes<kBits>(du, codes + gi * kGroupBytes, i0)), df, out + gi * kGroupCodes + i0);
  }
}

// Runs fn(tile size, first query, decoded codes or null) over the query tiles of a KIVI block side:
// with more than one tile the n_groups code groups are decoded once for all of them.
template <uint32_t kBits, class Fn>
HWY_INLINE void KiviQueryTiles(const uint8_t* tile, uint32_t d, size_t n_q, size_t n_groups, const Fn& fn) {
  HWY_ALIGN float decoded[kDecodeMaxDim * kBlockTokens];
  const bool once = n_q > 4 && d <= kDecodeMaxDim;
  if (once) DecodeKiviCodes<kBits>(tile + kv_layout::KiviCodesOffset(d), n_groups, decoded);
  ForQueryTiles(n_q, [&](auto kq, size_t i0) { fn(kq, i0, once ? decoded : nullptr); });
}

// ---- Per-format entry points ----------------------------------------------------------------

template <KvFormat kF>
HWY_INLINE const uint8_t* HeadTile(const uint8_t* block, uint32_t d, uint32_t kv_head) {
  return block + kv_layout::HeaderBytes(kF) + size_t{kv_head} * kv_layout::TileBytes(kF, d);
}

template <class Rows>
HWY_INLINE void ScoreRowsDirect(const Rows& rows, uint32_t d, const float* q, size_t n_q, float* scores, size_t ld) {
  ForQueryTiles<3>(n_q, [&](auto kq, size_t i0) {
    ScoreRowsTile<decltype(kq)::value>(rows, d, q + i0 * d, scores + i0 * ld, ld);
  });
}
template <class Rows>
HWY_INLINE void AccumulateRowsDirect(const Rows& rows, uint32_t d, const float* p, size_t n_q, float* acc, size_t ld) {
  ForQueryTiles(n_q, [&](auto kq, size_t i0) {
    AccumulateRowsTile<decltype(kq)::value>(rows, d, p + i0 * ld, ld, acc + i0 * d);
  });
}
// More than kOnce queries (more than one register tile): fn gets the rows decoded once into a stack
// tile instead of once per tile; else the compressed rows themselves.
template <size_t kOnce, class Rows, class Fn>
HWY_INLINE void WithRows(const Rows& rows, uint32_t d, size_t n_q, const Fn& fn) {
  if (n_q > kOnce && d <= kDecodeMaxDim) {
    HWY_ALIGN float tile[kBlockTokens * kDecodeMaxDim];
    HWY_ALIGN float scales[kBlockTokens];
    fn(DecodeRows(rows, d, tile, scales));
  } else {
    fn(rows);
  }
}
template <class Rows>
HWY_INLINE void ScoreRows(const Rows& rows, uint32_t d, const float* q, size_t n_q, float* scores, size_t ld) {
  WithRows<3>(rows, d, n_q, [&](const auto& r) { ScoreRowsDirect(r, d, q, n_q, scores, ld); });
}
template <class Rows>
HWY_INLINE void AccumulateRows(const Rows& rows, uint32_t d, const float* p, size_t n_q, float* acc, size_t ld) {
  WithRows<4>(rows, d, n_q, [&](const auto& r) { AccumulateRowsDirect(r, d, p, n_q, acc, ld); });
}

float PolyKvPaperScale(const uint8_t* block) {
  kv_layout::PolyKvPaperHeader h;
  std::memcpy(&h, block, sizeof(h));
  return h.scale;
}

template <KvFormat kF>
void ScoreBlock(const KvGeometry& g, const uint8_t* block, uint32_t kv_head, const float* q, size_t n_q,
                float* scores, size_t ld) {
  const uint32_t d = g.head_dim;
  const uint8_t* tile = HeadTile<kF>(block, d, kv_head);
  if constexpr (kF == KvFormat::kF16) {
    ScoreRows(F16Rows{tile, d}, d, q, n_q, scores, ld);
  } else if constexpr (kF == KvFormat::kQ8) {
    ScoreRows(Q8Rows{tile, d}, d, q, n_q, scores, ld);
  } else if constexpr (kF == KvFormat::kPolyKvPaper) {
    ScoreRows(PolyKvPaperRows{tile, d, PolyKvPaperScale(block)}, d, q, n_q, scores, ld);
  } else if constexpr (kv_layout::TqBits(kF) != 0) {
    constexpr uint32_t kBits = kv_layout::TqBits(kF);
    ScoreRows(TqRows<kBits>{tile, d, 1.0f / std::sqrt(static_cast<float>(d)), {}}, d, q, n_q, scores, ld);
  } else {
    constexpr uint32_t kBits = kv_layout::KiviBits(kF);
    KiviQueryTiles<kBits>(tile, d, n_q, d, [&](auto kq, size_t i0, const float* decoded) {
      ScoreKiviKeyTile<decltype(kq)::value, kBits>(tile, d, q + i0 * d, scores + i0 * ld, ld, decoded);
    });
  }
}

template <KvFormat kF>
void AccumulateBlock(const KvGeometry& g, const uint8_t* block, uint32_t kv_head, const float* p, size_t n_q,
                     float* acc, size_t ld) {
  const uint32_t d = g.head_dim;
  const uint8_t* tile = HeadTile<kF>(block, d, kv_head);
  if constexpr (kF == KvFormat::kF16) {
    AccumulateRows(F16Rows{tile, d}, d, p, n_q, acc, ld);
  } else if constexpr (kF == KvFormat::kQ8) {
    AccumulateRows(Q8Rows{tile, d}, d, p, n_q, acc, ld);
  } else if constexpr (kF == KvFormat::kPolyKvPaper) {
    AccumulateRows(PolyKvPaperRows{tile, d, PolyKvPaperScale(block)}, d, p, n_q, acc, ld);
  } else if constexpr (kv_layout::TqBits(kF) != 0) {
    constexpr uint32_t kBits = kv_layout::TqBits(kF);
    AccumulateRows(TqRows<kBits>{tile, d, 1.0f / std::sqrt(static_cast<float>(d)), {}}, d, p, n_q, acc, ld);
  } else {
    constexpr uint32_t kBits = kv_layout::KiviBits(kF);
    KiviQueryTiles<kBits>(tile, d, n_q, (d / kGroupCodes) * kBlockTokens, [&](auto kq, size_t i0, const float* decoded) {
      AccumulateKiviValueTile<decltype(kq)::value, kBits>(tile, d, p + i0 * ld, ld, acc + i0 * d, decoded);
    });
  }
}

// This target's kernels of `format` (direct pointers: no dispatch per block).
KvBlockKernels KernelsFor(KvFormat format) {
  switch (format) {
    case KvFormat::kF16: return {&ScoreBlock<KvFormat::kF16>, &AccumulateBlock<KvFormat::kF16>};
    case KvFormat::kQ8: return {&ScoreBlock<KvFormat::kQ8>, &AccumulateBlock<KvFormat::kQ8>};
    case KvFormat::kKivi4: return {&ScoreBlock<KvFormat::kKivi4>, &AccumulateBlock<KvFormat::kKivi4>};
    case KvFormat::kKivi3: return {&ScoreBlock<KvFormat::kKivi3>, &AccumulateBlock<KvFormat::kKivi3>};
    case KvFormat::kKivi2: return {&ScoreBlock<KvFormat::kKivi2>, &AccumulateBlock<KvFormat::kKivi2>};
    case KvFormat::kTq4: return {&ScoreBlock<KvFormat::kTq4>, &AccumulateBlock<KvFormat::kTq4>};
    case KvFormat::kTq3: return {&ScoreBlock<KvFormat::kTq3>, &AccumulateBlock<KvFormat::kTq3>};
    case KvFormat::kTq2: return {&ScoreBlock<KvFormat::kTq2>, &AccumulateBlock<KvFormat::kTq2>};
    case KvFormat::kPolyKvPaper:
      return {&ScoreBlock<KvFormat::kPolyKvPaper>, &AccumulateBlock<KvFormat::kPolyKvPaper>};
  }
  return {nullptr, nullptr};
}

}  // namespace HWY_NAMESPACE
}  // namespace chorus
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace chorus {

HWY_EXPORT(KernelsFor);

// Picks the best target of this CPU once per call; callers fetch once per format group.
KvBlockKernels GetKvBlockKernels(KvFormat format) { return HWY_DYNAMIC_DISPATCH(KernelsFor)(format); }

}  // namespace chorus
#endif  // HWY_ONCE
