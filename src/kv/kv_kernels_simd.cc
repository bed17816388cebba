// SIMD Score/Accumulate kernels per KV format, computed straight from the compressed bytes
// (Highway, dynamic dispatch). No dequantized copy: codes become values in registers.
#include "kv/kv_kernels.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <type_traits>

#include "kv/kv_format_layout.h"  // offsets, TileBytes, Codebook
#include "ops/cpu_target.h"       // Avx512VnniVbmi (ScoreTq4Q8)
#include "util/fp16.h"            // F16ToF32 (scalar tails)

#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL 1  // compile the Ice Lake+ target (VBMI: CentroidTable's 3-bit lookup) too
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kv/kv_kernels_simd.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kv/kv_kernels-inl.h"  // UnpackCodes, CentroidTable::Decode, LoadF16, LoadI8
#include "ops/reduce16-inl.h"    // Max16 (AccumulateTqQ8)

HWY_BEFORE_NAMESPACE();
namespace chorus {
namespace HWY_NAMESPACE {

using kv_layout::kGroupCodes;
using kv_layout::PackedGroupBytes;
// Full unrolling of register-tile loops (-O2 keeps them rolled, and the accumulators then live in
// memory instead of registers).
#define CHORUS_UNROLL _Pragma("GCC unroll 32")

template <size_t k>
using QTile = std::integral_constant<size_t, k>;

// fn(QTile<r>, i0) for a runtime 0 < r ≤ k (nothing for r = 0).
template <size_t k, class Fn>
HWY_INLINE void QueryTileOf(size_t r, size_t i0, const Fn& fn) {
  if constexpr (k > 0) {
    if (r == k) return fn(QTile<k>(), i0);
    QueryTileOf<k - 1>(r, i0, fn);
  }
}

// Runs fn(QTile<k>, i0) over the queries in register tiles of at most kMax.
template <size_t kMax = 4, class Fn>
HWY_INLINE void ForQueryTiles(size_t n_q, const Fn& fn) {
  size_t i0 = 0;
  for (; i0 + kMax <= n_q; i0 += kMax) fn(QTile<kMax>(), i0);
  QueryTileOf<kMax - 1>(n_q - i0, i0, fn);
}

// A loaded vector kept in a register: GCC otherwise folds the load into every FMA that reads it
// (one reload per query of a register tile), which makes the decoded-tile kernels load-bound.
// The value is unchanged (an empty asm that claims to modify the register).
HWY_INLINE VF InRegister(VF v) {
#if HWY_ARCH_X86 && (HWY_COMPILER_GCC || HWY_COMPILER_CLANG) && HWY_TARGET <= HWY_SSE4
#if HWY_TARGET <= HWY_AVX3
  asm("" : "+v"(v.raw));
#else
  asm("" : "+x"(v.raw));
#endif
#endif
  return v;
}

// ---- Row formats: token j is one row, k̂_j = ScaleOf(j) · values(row) ----------------------

struct F16Rows {
  const uint8_t* tile;
  uint32_t d;
  const uint8_t* Row(size_t j) const { return tile + j * 2 * size_t{d}; }
  float ScaleOf(size_t) const { return 1.0f; }
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
  float ScaleOf(size_t j) const { return LoadF16One(Row(j)); }
  VF Load(DF df, const uint8_t* row, size_t c) const { return LoadI8(df, row + 2 + c); }
  float At(const uint8_t* row, size_t c) const { return static_cast<int8_t>(row[2 + c]); }
};

struct PolyKvPaperRows {
  const uint8_t* tile;
  uint32_t d;
  float scale;  // the block header's layer scale
  const uint8_t* Row(size_t j) const { return tile + j * size_t{d}; }
  float ScaleOf(size_t) const { return scale; }
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
  float ScaleOf(size_t j) const { return LoadF16One(Row(j)) * inv_sqrt_d; }
  VF Load(DF df, const uint8_t* row, size_t c) const {
    return table.Decode(row + 2 + (c / kGroupCodes) * PackedGroupBytes(kBits), c % kGroupCodes);
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
  float ScaleOf(size_t j) const { return scales[j]; }
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
    scales[j] = rows.ScaleOf(j);
    float* out = tile + j * d;
    for (size_t c = 0; c < d_vec; c += N) hn::StoreU(rows.Load(df, row, c), df, out + c);
    for (size_t c = d_vec; c < d; ++c) out[c] = rows.At(row, c);
  }
  return DecodedRows{tile, d, scales};
}

// ---- Key tiles (row formats), channel-major: k̂_j[c] = scale_j · Load(c)[lane j] -------------
// Lanes run over the 32 tokens of one channel, so a score is one FMA chain over the channels with
// no horizontal sum: s_ij = scale_j · (((q_i0·k_0j) + q_i1·k_1j) + …), the same chain whichever
// kernel (compressed columns or a decoded tile) and however many queries share the pass.

struct F16Cols {
  const uint8_t* tile;
  VF Load(DF df, size_t c, size_t t0) const { return LoadF16(df, tile + 2 * (c * kBlockTokens + t0)); }
  VF Scales(DF df, size_t) const { return hn::Set(df, 1.0f); }
};

struct Q8Cols {
  const uint8_t* tile;
  VF Load(DF df, size_t c, size_t t0) const {
    return LoadI8(df, tile + kv_layout::KeyColumnsOffset(KvFormat::kQ8) + c * kBlockTokens + t0);
  }
  VF Scales(DF df, size_t t0) const { return LoadF16(df, tile + 2 * t0); }
};

struct PolyKvPaperCols {
  const uint8_t* tile;
  float scale;  // the block header's layer scale
  VF Load(DF df, size_t c, size_t t0) const { return LoadI8(df, tile + c * kBlockTokens + t0); }
  VF Scales(DF df, size_t) const { return hn::Set(df, scale); }
};

template <uint32_t kBits>
struct TqCols {
  const uint8_t* tile;
  float inv_sqrt_d;
  CentroidTable<kBits> table;
  VF Load(DF df, size_t c, size_t t0) const {
    return table.Decode(tile + kv_layout::KeyColumnsOffset(KvFormat::kTq2) + c * PackedGroupBytes(kBits), t0);
  }
  VF Scales(DF df, size_t t0) const { return hn::Mul(LoadF16(df, tile + 2 * t0), hn::Set(df, inv_sqrt_d)); }
};

// A key tile decoded once into f32, (d, 32) channel-major, for many stacked queries.
struct DecodedCols {
  const float* tile;    // (d, 32)
  const float* scales;  // (32)
  VF Load(DF df, size_t c, size_t t0) const { return hn::LoadU(df, tile + c * kBlockTokens + t0); }
  VF Scales(DF df, size_t t0) const { return hn::LoadU(df, scales + t0); }
};

template <class Cols>
HWY_INLINE DecodedCols DecodeCols(const Cols& cols, uint32_t d, float* tile, float* scales) {
  const DF df;
  const size_t N = hn::Lanes(df);
  for (size_t t0 = 0; t0 < kBlockTokens; t0 += N) hn::StoreU(cols.Scales(df, t0), df, scales + t0);
  for (size_t c = 0; c < d; ++c) {
    for (size_t t0 = 0; t0 < kBlockTokens; t0 += N) hn::StoreU(cols.Load(df, c, t0), df, tile + c * kBlockTokens + t0);
  }
  return DecodedCols{tile, scales};
}

// Query tiles of the column score kernel: kScoreQ on compressed columns (up to that many queries
// the tile is not decoded first), kScoreDecodedQ on a decoded tile; (kQ + 1) · 32/N registers.
inline constexpr size_t kTokenVecs = kBlockTokens / hn::MaxLanes(DF());
#if HWY_TARGET <= HWY_AVX3  // 32 vector registers, 2 token vectors
inline constexpr size_t kScoreQ = 4, kScoreDecodedQ = 10;
#elif HWY_TARGET <= HWY_AVX2  // 16 registers, 4 token vectors
inline constexpr size_t kScoreQ = 2, kScoreDecodedQ = 2;
#else
inline constexpr size_t kScoreQ = 1, kScoreDecodedQ = 1;
#endif

// scores[i*ld + j] = scale_j · Σ_c q[i*d + c] · k_j[c] for kQ queries and the kTV token vectors
// from token vector kTV0 on (all 32 tokens by default; compile-time, so a code group's nibble
// choice is too).
// init: null, or each query's starting value (KIVI's Σ_c q_c·min_c).
template <size_t kQ, class Cols, size_t kTV = kTokenVecs, size_t kTV0 = 0>
HWY_INLINE void ScoreColsTile(const Cols& cols, uint32_t d, const float* q, float* scores, size_t ld,
                              const float* init = nullptr) {
  constexpr size_t tv0 = kTV0;
  const DF df;
  const size_t N = hn::Lanes(df);
  VF acc[kQ][kTV];
  CHORUS_UNROLL for (size_t i = 0; i < kQ; ++i) {
    CHORUS_UNROLL for (size_t t = 0; t < kTV; ++t) acc[i][t] = init ? hn::Set(df, init[i]) : hn::Zero(df);
  }
  for (size_t c = 0; c < d; ++c) {
    VF k[kTV];
    CHORUS_UNROLL for (size_t t = 0; t < kTV; ++t) {
      k[t] = cols.Load(df, c, (tv0 + t) * N);
      if constexpr (std::is_same_v<Cols, DecodedCols>) k[t] = InRegister(k[t]);  // one load for kQ queries
    }
    CHORUS_UNROLL for (size_t i = 0; i < kQ; ++i) {
      const VF qb = hn::Set(df, q[i * d + c]);
      CHORUS_UNROLL for (size_t t = 0; t < kTV; ++t) acc[i][t] = hn::MulAdd(qb, k[t], acc[i][t]);
    }
  }
  CHORUS_UNROLL for (size_t t = 0; t < kTV; ++t) {
    const VF scale = cols.Scales(df, (tv0 + t) * N);
    CHORUS_UNROLL for (size_t i = 0; i < kQ; ++i)
      hn::StoreU(hn::Mul(acc[i][t], scale), df, scores + i * ld + (tv0 + t) * N);
  }
}

// AVX2 (16 vector registers, 4 token vectors): a few queries more than one full-width tile (a GQA
// group of 3 or 4, two agents) read the compressed columns in two passes over half the tokens —
// kQ·2 accumulators + 2 key vectors + 1 broadcast ≤ 16 registers — instead of decoding the tile
// first: the same lookups, no tile stores and reloads. Lanes are tokens, so every score is the same
// FMA chain over the channels whatever the tiling: the results are bit-identical.
#if HWY_TARGET == HWY_AVX2
inline constexpr size_t kScoreHalfQ = 6;
#else
inline constexpr size_t kScoreHalfQ = 0;
#endif

// More than kOnce queries (more than one register tile): fn gets src decoded once into a stack tile
// (decode(src, d, tile, scales), ≤ 32 KiB) instead of once per tile; else the compressed src itself.
template <size_t kOnce, class Src, class Decode, class Fn>
HWY_INLINE void WithDecoded(const Src& src, uint32_t d, size_t n_q, const Decode& decode, const Fn& fn) {
  if (n_q > kOnce && d <= kDecodeMaxDim) {
    HWY_ALIGN float tile[kBlockTokens * kDecodeMaxDim];
    HWY_ALIGN float scales[kBlockTokens];
    fn(decode(src, d, tile, scales));
  } else {
    fn(src);
  }
}
// Keys: up to kScoreQ queries read the compressed columns, more a decoded tile; ScoreTileQ of the
// type fn gets is its query tile.
template <class Cols, class Fn>
HWY_INLINE void WithCols(const Cols& cols, uint32_t d, size_t n_q, const Fn& fn) {
  WithDecoded<kScoreQ>(cols, d, n_q, [](const auto& c, uint32_t dd, float* t, float* s) { return DecodeCols(c, dd, t, s); },
                       fn);
}
template <class Cols>
constexpr size_t ScoreTileQ() { return std::is_same_v<Cols, DecodedCols> ? kScoreDecodedQ : kScoreQ; }

template <class Cols>
HWY_INLINE void ScoreCols(const Cols& cols, uint32_t d, const float* q, size_t n_q, float* scores, size_t ld) {
  if constexpr (kScoreHalfQ > 0 && kTokenVecs % 2 == 0) {
    if (n_q > kScoreQ && n_q <= kScoreHalfQ) {
      constexpr size_t kHalf = kTokenVecs / 2;
      ForQueryTiles<kScoreHalfQ>(n_q, [&](auto kq, size_t i0) {
        ScoreColsTile<decltype(kq)::value, Cols, kHalf, 0>(cols, d, q + i0 * d, scores + i0 * ld, ld);
        ScoreColsTile<decltype(kq)::value, Cols, kHalf, kHalf>(cols, d, q + i0 * d, scores + i0 * ld, ld);
      });
      return;
    }
  }
  WithCols(cols, d, n_q, [&](const auto& c) {
    ForQueryTiles<ScoreTileQ<std::decay_t<decltype(c)>>()>(n_q, [&](auto kq, size_t i0) {
      ScoreColsTile<decltype(kq)::value>(c, d, q + i0 * d, scores + i0 * ld, ld);
    });
  });
}

// acc[i*d + c] += Σ_j (p[i*ld + j] · Scale_j) · values_j[c], for kQ queries.
template <size_t kQ, class Rows>
HWY_INLINE void AccumulateRowsTile(const Rows& rows, uint32_t d, const float* p, size_t ld, float* acc) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const size_t d_vec = d - d % N;
  HWY_ALIGN float w[kQ][kBlockTokens];  // p · row scale
  for (size_t j = 0; j < kBlockTokens; ++j) {
    const float s = rows.ScaleOf(j);
    CHORUS_UNROLL for (size_t i = 0; i < kQ; ++i) w[i][j] = p[i * ld + j] * s;
  }
  for (size_t c = 0; c < d_vec; c += N) {
    VF a[kQ];
    CHORUS_UNROLL for (size_t i = 0; i < kQ; ++i) a[i] = hn::LoadU(df, acc + i * d + c);
    for (size_t j = 0; j < kBlockTokens; ++j) {
      const VF v = rows.Load(df, rows.Row(j), c);
      CHORUS_UNROLL for (size_t i = 0; i < kQ; ++i) a[i] = hn::MulAdd(hn::Set(df, w[i][j]), v, a[i]);
    }
    CHORUS_UNROLL for (size_t i = 0; i < kQ; ++i) hn::StoreU(a[i], df, acc + i * d + c);
  }
  for (size_t c = d_vec; c < d; ++c) {
    CHORUS_UNROLL for (size_t i = 0; i < kQ; ++i) {
      float sum = acc[i * d + c];
      for (size_t j = 0; j < kBlockTokens; ++j) sum += w[i][j] * rows.At(rows.Row(j), c);
      acc[i * d + c] = sum;
    }
  }
}

// TQ values for one register tile of queries: per 32-channel group, the 32 tokens in order, each
// token's group unpacked once for the group's kV channel vectors (the compiler shares the packed
// words' broadcasts between them) and met by kQ queries × kV vectors of accumulators, with each
// weight broadcast once per token instead of once per channel vector. Every output lane still sees
// a = fma(w_ij, v_jc, a) for j = 0..31 on the same floats: bit-identical to AccumulateRowsTile.
// kV: channel vectors per pass (divides the group's 32/N), kQ · kV + kQ + temporaries ≤ registers.
template <size_t kQ, size_t kV, uint32_t kBits>
HWY_INLINE void AccumulateTqRowsTile(const TqRows<kBits>& rows, uint32_t d, const float* p, size_t ld, float* acc) {
  const DF df;
  const size_t N = hn::Lanes(df);
  HWY_ALIGN float w[kQ][kBlockTokens];  // p · row scale, as AccumulateRowsTile
  for (size_t j = 0; j < kBlockTokens; ++j) {
    const float s = rows.ScaleOf(j);
    CHORUS_UNROLL for (size_t i = 0; i < kQ; ++i) w[i][j] = p[i * ld + j] * s;
  }
  constexpr size_t kGroupBytes = PackedGroupBytes(kBits);
  const size_t row_bytes = kv_layout::TqRowBytes(kBits, d);
  for (size_t c0 = 0; c0 < d; c0 += kV * N) {
    const size_t in_group = c0 % kGroupCodes;
    const uint8_t* group = rows.tile + 2 + (c0 / kGroupCodes) * kGroupBytes;
    VF a[kQ][kV];
    CHORUS_UNROLL for (size_t i = 0; i < kQ; ++i) {
      CHORUS_UNROLL for (size_t v = 0; v < kV; ++v) a[i][v] = hn::LoadU(df, acc + i * d + c0 + v * N);
    }
    for (size_t j = 0; j < kBlockTokens; ++j, group += row_bytes) {
      VF wb[kQ];
      CHORUS_UNROLL for (size_t i = 0; i < kQ; ++i) wb[i] = hn::Set(df, w[i][j]);
      CHORUS_UNROLL for (size_t v = 0; v < kV; ++v) {
        const VF x = rows.table.Decode(group, in_group + v * N);
        CHORUS_UNROLL for (size_t i = 0; i < kQ; ++i) a[i][v] = hn::MulAdd(wb[i], x, a[i][v]);
      }
    }
    CHORUS_UNROLL for (size_t i = 0; i < kQ; ++i) {
      CHORUS_UNROLL for (size_t v = 0; v < kV; ++v) hn::StoreU(a[i][v], df, acc + i * d + c0 + v * N);
    }
  }
}

// Channel vectors per pass of AccumulateTqRowsTile: a whole group where the registers allow.
template <size_t kQ>
constexpr size_t TqAccV() {
  constexpr size_t kGroupVecs = kGroupCodes / hn::MaxLanes(DF());
#if HWY_TARGET <= HWY_AVX3  // 32 registers
  return kGroupVecs;
#else
  return std::min<size_t>(kQ <= 2 ? 4 : 2, kGroupVecs);
#endif
}

// The decoded-tile twin of AccumulateRowsTile for many queries: every element sees the same FMAs
// in the same order (a = fma(w_ij, v_jc, a) for j = 0..31), so results are bit-identical; kQ
// queries × kV vectors of channels stay in registers, so a tile row is loaded once per kQ queries.
// AVX2 (16 registers): 2 queries × 4 vectors = 8 independent FMA chains (enough for both FMA pipes at
// a 4-cycle latency) and head_dim 64 in two whole passes; 3 × 3 left 2 of 8 vectors in 3-chain
// passes that wait on the FMA latency.
#if HWY_TARGET == HWY_SCALAR
inline constexpr size_t kAccQ = 1, kAccV = 1;
#elif HWY_TARGET <= HWY_AVX3  // 32 vector registers
inline constexpr size_t kAccQ = 6, kAccV = 4;
#else
inline constexpr size_t kAccQ = 2, kAccV = 4;
#endif

template <size_t kQ, size_t kV>
HWY_INLINE void AccumulateDecodedChunk(const float* tile, uint32_t d, const float (*w)[kBlockTokens], size_t c0,
                                       float* acc) {
  const DF df;
  const size_t N = hn::Lanes(df);
  VF a[kQ][kV];
  CHORUS_UNROLL for (size_t i = 0; i < kQ; ++i) {
    CHORUS_UNROLL for (size_t v = 0; v < kV; ++v) a[i][v] = hn::LoadU(df, acc + i * d + c0 + v * N);
  }
  for (size_t j = 0; j < kBlockTokens; ++j) {
    const float* row = tile + j * d + c0;
    VF x[kV];
    CHORUS_UNROLL for (size_t v = 0; v < kV; ++v) x[v] = InRegister(hn::LoadU(df, row + v * N));
    CHORUS_UNROLL for (size_t i = 0; i < kQ; ++i) {
      const VF wb = hn::Set(df, w[i][j]);
      CHORUS_UNROLL for (size_t v = 0; v < kV; ++v) a[i][v] = hn::MulAdd(wb, x[v], a[i][v]);
    }
  }
  CHORUS_UNROLL for (size_t i = 0; i < kQ; ++i) {
    CHORUS_UNROLL for (size_t v = 0; v < kV; ++v) hn::StoreU(a[i][v], df, acc + i * d + c0 + v * N);
  }
}

// AccumulateDecodedChunk<kQ, r> for a run-time r < kV vectors (0: nothing).
template <size_t kQ, size_t kV>
HWY_INLINE void AccumulateDecodedRest(size_t r, const float* tile, uint32_t d, const float (*w)[kBlockTokens],
                                      size_t c0, float* acc) {
  if constexpr (kV > 1) {
    if (r == kV - 1) return AccumulateDecodedChunk<kQ, kV - 1>(tile, d, w, c0, acc);
    AccumulateDecodedRest<kQ, kV - 1>(r, tile, d, w, c0, acc);
  }
}

template <size_t kQ>
HWY_INLINE void AccumulateDecodedTile(const DecodedRows& rows, uint32_t d, const float* p, size_t ld, float* acc) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const size_t d_vec = d - d % N;
  HWY_ALIGN float w[kQ][kBlockTokens];  // p · row scale, as AccumulateRowsTile (the same products, in vectors)
  for (size_t j = 0; j < kBlockTokens; j += N) {
    const VF s = hn::LoadU(df, rows.scales + j);
    CHORUS_UNROLL for (size_t i = 0; i < kQ; ++i) hn::Store(hn::Mul(hn::LoadU(df, p + i * ld + j), s), df, w[i] + j);
  }
  size_t c = 0;
  for (; c + kAccV * N <= d_vec; c += kAccV * N) AccumulateDecodedChunk<kQ, kAccV>(rows.tile, d, w, c, acc);
  AccumulateDecodedRest<kQ, kAccV>((d_vec - c) / N, rows.tile, d, w, c, acc);
  c = d_vec;
  for (; c < d; ++c) {
    CHORUS_UNROLL for (size_t i = 0; i < kQ; ++i) {
      float sum = acc[i * d + c];
      for (size_t j = 0; j < kBlockTokens; ++j) sum += w[i][j] * rows.tile[j * d + c];
      acc[i * d + c] = sum;
    }
  }
}

// ---- KIVI ---------------------------------------------------------------------------------

// Keys, group = channel over the 32 tokens: q·k̂_j = Σ_c (q_c·scale_c)·code_cj + Σ_c q_c·min_c.
// The codes are columns (tokens in lanes, ScoreColsTile); scale and min go into the queries.
template <uint32_t kBits>
struct KiviKeyCols {
  const uint8_t* codes;  // the tile's packed codes, one 32-token group per channel
  VF Load(DF df, size_t c, size_t t0) const {
    return CodesToFloat(df, UnpackCodes<kBits>(DU(), codes + c * PackedGroupBytes(kBits), t0));
  }
  VF Scales(DF df, size_t) const { return hn::Set(df, 1.0f); }
};

// qs[i·d + c] = q_ic · scale_c and base[i] = Σ_c q_ic · min_c for n queries (the same operations
// for a query whichever group it is computed in).
HWY_INLINE void KiviKeyQueries(const uint8_t* tile, uint32_t d, const float* q, size_t n, float* qs, float* base) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const size_t d_vec = d - d % N;
  const uint8_t* mins = tile + kv_layout::KiviMinOffset(d);
  for (size_t i = 0; i < n; ++i) {
    VF base_acc = hn::Zero(df);
    for (size_t c = 0; c < d_vec; c += N) {
      const VF qv = hn::LoadU(df, q + i * d + c);
      hn::StoreU(hn::Mul(qv, LoadF16(df, tile + 2 * c)), df, qs + i * d + c);
      base_acc = hn::MulAdd(qv, LoadF16(df, mins + 2 * c), base_acc);
    }
    base[i] = ReduceSum(df, base_acc);
    for (size_t c = d_vec; c < d; ++c) {
      qs[i * d + c] = q[i * d + c] * LoadF16One(tile + 2 * c);
      base[i] += q[i * d + c] * LoadF16One(mins + 2 * c);
    }
  }
}

template <uint32_t kBits>
HWY_INLINE void ScoreKiviKeys(const uint8_t* tile, uint32_t d, const float* q, size_t n_q, float* scores, size_t ld) {
  constexpr size_t kScratch = 16 * kMaxHeadDim;  // transformed queries (64 KiB of stack)
  HWY_ALIGN float qs[kScratch];
  float base[kScratch / kBlockTokens];
  const KiviKeyCols<kBits> cols{tile + kv_layout::KiviCodesOffset(d)};
  WithCols(cols, d, n_q, [&](const auto& c) {
    constexpr size_t kTile = ScoreTileQ<std::decay_t<decltype(c)>>();
    // Queries transformed at a time: as many whole register tiles as the scratch holds (d ≥ 32).
    const size_t group = std::max<size_t>(kTile, std::min(kScratch / d, kScratch / kBlockTokens) / kTile * kTile);
    for (size_t g0 = 0; g0 < n_q; g0 += group) {
      const size_t ng = std::min(group, n_q - g0);
      KiviKeyQueries(tile, d, q + g0 * d, ng, qs, base);
      ForQueryTiles<kTile>(ng, [&](auto kq, size_t i0) {
        ScoreColsTile<decltype(kq)::value>(c, d, qs + i0 * d, scores + (g0 + i0) * ld, ld, base + i0);
      });
    }
  });
}

// Values, group = 32 channels of one token: Σ_j p_j·v̂_j = Σ_j (p_j·scale_j)·code_j + Σ_j p_j·min_j
// per channel group. Lanes run over channels; kQ queries × kV channel vectors in registers (every
// output lane sees a = out + bias, then a = fma(w_ij, code_jc, a) for j = 0..31 whatever the tile,
// so stacked queries get their solo bits).
// decoded: null, or the block's codes decoded once to floats, (d/32 groups, 32 tokens, 32 codes).
template <size_t kQ, uint32_t kBits, size_t kV = 1>
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
    CHORUS_UNROLL for (size_t i = 0; i < kQ; ++i) bias_acc[i] = hn::Zero(df);
    for (size_t t0 = 0; t0 < kBlockTokens; t0 += N) {
      const VF s = LoadF16(df, scales + 2 * t0), m = LoadF16(df, mins + 2 * t0);
      CHORUS_UNROLL for (size_t i = 0; i < kQ; ++i) {
        const VF pv = hn::LoadU(df, p + i * ld + t0);
        hn::Store(hn::Mul(pv, s), df, w[i] + t0);
        bias_acc[i] = hn::MulAdd(pv, m, bias_acc[i]);
      }
    }
    float bias[kQ];
    CHORUS_UNROLL for (size_t i = 0; i < kQ; ++i) bias[i] = ReduceSum(df, bias_acc[i]);
    const uint8_t* codes = tile + kv_layout::KiviCodesOffset(d) + cg * kBlockTokens * kGroupBytes;
    for (size_t c0 = 0; c0 < kGroupCodes; c0 += kV * N) {
      float* out = acc + cg * kGroupCodes + c0;
      VF a[kQ][kV];
      CHORUS_UNROLL for (size_t i = 0; i < kQ; ++i) {
        CHORUS_UNROLL for (size_t v = 0; v < kV; ++v)
          a[i][v] = hn::Add(hn::LoadU(df, out + i * d + v * N), hn::Set(df, bias[i]));
      }
      for (size_t j = 0; j < kBlockTokens; ++j) {
        VF code[kV];
        CHORUS_UNROLL for (size_t v = 0; v < kV; ++v)
          code[v] = decoded ? hn::LoadU(df, decoded + (cg * kBlockTokens + j) * kGroupCodes + c0 + v * N)
                            : CodesToFloat(df, UnpackCodes<kBits>(du, codes + j * kGroupBytes, c0 + v * N));
        CHORUS_UNROLL for (size_t i = 0; i < kQ; ++i) {
          const VF wi = hn::Set(df, w[i][j]);
          CHORUS_UNROLL for (size_t v = 0; v < kV; ++v) a[i][v] = hn::MulAdd(wi, code[v], a[i][v]);
        }
      }
      CHORUS_UNROLL for (size_t i = 0; i < kQ; ++i) {
        CHORUS_UNROLL for (size_t v = 0; v < kV; ++v) hn::StoreU(a[i][v], df, out + i * d + v * N);
      }
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

// Value tiles on decoded KIVI codes: kKiviAccQ queries × kKiviAccV channel vectors (a 32-code group
// is 32/N vectors; kKiviAccV must divide it).
#if HWY_TARGET <= HWY_AVX3  // 32 vector registers
inline constexpr size_t kKiviAccQ = 8, kKiviAccV = 2;
#else
inline constexpr size_t kKiviAccQ = 4, kKiviAccV = 1;
#endif
static_assert((kGroupCodes / hn::MaxLanes(DF())) % kKiviAccV == 0);

// KIVI values over n_q queries: up to 4 read the packed codes in 4-query tiles; more decode the
// block's d/32·32 code groups once and run larger tiles over them.
template <uint32_t kBits>
HWY_INLINE void AccumulateKiviValues(const uint8_t* tile, uint32_t d, const float* p, size_t n_q, float* acc,
                                     size_t ld) {
  if (n_q > 4 && d <= kDecodeMaxDim) {
    HWY_ALIGN float decoded[kDecodeMaxDim * kBlockTokens];
    DecodeKiviCodes<kBits>(tile + kv_layout::KiviCodesOffset(d), (d / kGroupCodes) * kBlockTokens, decoded);
    ForQueryTiles<kKiviAccQ>(n_q, [&](auto kq, size_t i0) {
      AccumulateKiviValueTile<decltype(kq)::value, kBits, kKiviAccV>(tile, d, p + i0 * ld, ld, acc + i0 * d, decoded);
    });
  } else {
    ForQueryTiles(n_q, [&](auto kq, size_t i0) {
      AccumulateKiviValueTile<decltype(kq)::value, kBits>(tile, d, p + i0 * ld, ld, acc + i0 * d, nullptr);
    });
  }
}

// ---- Per-format entry points ----------------------------------------------------------------

template <KvFormat kF>
HWY_INLINE const uint8_t* HeadTile(const uint8_t* block, uint32_t d, uint32_t kv_head) {
  return block + kv_layout::HeaderBytes(kF) + size_t{kv_head} * kv_layout::TileBytes(kF, d);
}

template <class Rows>
HWY_INLINE void AccumulateRowsDirect(const Rows& rows, uint32_t d, const float* p, size_t n_q, float* acc, size_t ld) {
  if constexpr (std::is_same_v<Rows, TqRows<2>> || std::is_same_v<Rows, TqRows<3>> || std::is_same_v<Rows, TqRows<4>>) {
    ForQueryTiles(n_q, [&](auto kq, size_t i0) {
      constexpr size_t kQ = decltype(kq)::value;
      AccumulateTqRowsTile<kQ, TqAccV<kQ>()>(rows, d, p + i0 * ld, ld, acc + i0 * d);
    });
  } else if constexpr (std::is_same_v<Rows, DecodedRows>) {
    ForQueryTiles<kAccQ>(n_q, [&](auto kq, size_t i0) {
      AccumulateDecodedTile<decltype(kq)::value>(rows, d, p + i0 * ld, ld, acc + i0 * d);
    });
  } else {
    ForQueryTiles(n_q, [&](auto kq, size_t i0) {
      AccumulateRowsTile<decltype(kq)::value>(rows, d, p + i0 * ld, ld, acc + i0 * d);
    });
  }
}
// Values: more than one register tile of queries reads the rows decoded once (WithDecoded).
template <class Rows>
HWY_INLINE void AccumulateRows(const Rows& rows, uint32_t d, const float* p, size_t n_q, float* acc, size_t ld) {
  WithDecoded<4>(rows, d, n_q, [](const auto& r, uint32_t dd, float* t, float* s) { return DecodeRows(r, dd, t, s); },
                 [&](const auto& r) { AccumulateRowsDirect(r, d, p, n_q, acc, ld); });
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
    ScoreCols(F16Cols{tile}, d, q, n_q, scores, ld);
  } else if constexpr (kF == KvFormat::kQ8) {
    ScoreCols(Q8Cols{tile}, d, q, n_q, scores, ld);
  } else if constexpr (kF == KvFormat::kPolyKvPaper) {
    ScoreCols(PolyKvPaperCols{tile, PolyKvPaperScale(block)}, d, q, n_q, scores, ld);
  } else if constexpr (kv_layout::TqBits(kF) != 0) {
    constexpr uint32_t kBits = kv_layout::TqBits(kF);
    ScoreCols(TqCols<kBits>{tile, 1.0f / std::sqrt(static_cast<float>(d)), {}}, d, q, n_q, scores, ld);
  } else {
    constexpr uint32_t kBits = kv_layout::KiviBits(kF);
    ScoreKiviKeys<kBits>(tile, d, q, n_q, scores, ld);
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
    AccumulateKiviValues<kBits>(tile, d, p, n_q, acc, ld);
  }
}

#include "kv/kv_int8_kernels-inl.inc"   // ScoreTq4Q8, AccumulateTqQ8 (AVX3_DL only)
#include "kv/kv_int8_kivikeys-inl.inc"  // ScoreKivi4Q8 (AVX3_DL only)
#include "kv/kv_int8_q8keys-inl.inc"    // ScoreQ8Q8 (AVX3_DL only)

// This target's kernels of `format` (direct pointers: no dispatch per block).
KvBlockKernels KernelsFor(KvFormat format) {
  switch (format) {
    case KvFormat::kF16: return {&ScoreBlock<KvFormat::kF16>, &AccumulateBlock<KvFormat::kF16>};
#if HWY_TARGET == HWY_AVX3_DL
    case KvFormat::kQ8:
      return {&ScoreBlock<KvFormat::kQ8>, &AccumulateBlock<KvFormat::kQ8>, Avx512VnniVbmi() ? &ScoreQ8Q8 : nullptr};
#else
    case KvFormat::kQ8: return {&ScoreBlock<KvFormat::kQ8>, &AccumulateBlock<KvFormat::kQ8>};
#endif
#if HWY_TARGET == HWY_AVX3_DL
    case KvFormat::kKivi4:
      return {&ScoreBlock<KvFormat::kKivi4>, &AccumulateBlock<KvFormat::kKivi4>,
              Avx512VnniVbmi() ? &ScoreKivi4Q8 : nullptr};
#else
    case KvFormat::kKivi4: return {&ScoreBlock<KvFormat::kKivi4>, &AccumulateBlock<KvFormat::kKivi4>};
#endif
    case KvFormat::kKivi3: return {&ScoreBlock<KvFormat::kKivi3>, &AccumulateBlock<KvFormat::kKivi3>};
    case KvFormat::kKivi2: return {&ScoreBlock<KvFormat::kKivi2>, &AccumulateBlock<KvFormat::kKivi2>};
#if HWY_TARGET == HWY_AVX3_DL
    case KvFormat::kTq4:
      return {&ScoreBlock<KvFormat::kTq4>, &AccumulateBlock<KvFormat::kTq4>, Avx512VnniVbmi() ? &ScoreTq4Q8 : nullptr,
              Avx512VnniVbmi() ? &AccumulateTqQ8<KvFormat::kTq4> : nullptr};
#else
    case KvFormat::kTq4: return {&ScoreBlock<KvFormat::kTq4>, &AccumulateBlock<KvFormat::kTq4>};
#endif
#if HWY_TARGET == HWY_AVX3_DL
    case KvFormat::kTq3:
      return {&ScoreBlock<KvFormat::kTq3>, &AccumulateBlock<KvFormat::kTq3>, nullptr,
              Avx512VnniVbmi() ? &AccumulateTqQ8<KvFormat::kTq3> : nullptr};
#else
    case KvFormat::kTq3: return {&ScoreBlock<KvFormat::kTq3>, &AccumulateBlock<KvFormat::kTq3>};
#endif
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
namespace {
std::atomic<bool>& Int8Scores() {
  static std::atomic<bool> on{[] {
    const char* e = std::getenv("CHORUS_KV_INT8");
    if (!e || !*e) return true;
    const std::string_view v(e);
    if (v == "0" || v == "off") return false;
    if (v != "1" && v != "on")  // a typo must not pass silently for an A/B
      std::fprintf(stderr, "chorus: CHORUS_KV_INT8='%s' is not 0, 1, off or on; the integer KV kernels stay on\n", e);
    return true;
  }()};
  return on;
}
}  // namespace

bool KvInt8ScoresEnabled() { return Int8Scores().load(std::memory_order_relaxed); }
void SetKvInt8Scores(bool on) { Int8Scores().store(on, std::memory_order_relaxed); }

// CHORUS_KV_INT8=0 turns the integer kernels off (the float Score / Accumulate everywhere: an exact
// A/B of what the int8 rounding does).
KvBlockKernels GetKvBlockKernels(KvFormat format) {
  KvBlockKernels k = HWY_DYNAMIC_DISPATCH(KernelsFor)(format);
  if (!KvInt8ScoresEnabled()) k.score_q8 = nullptr, k.accumulate_q8 = nullptr;
  return k;
}

}  // namespace chorus
#endif  // HWY_ONCE
