// AMX kernel for the repacked Q4_0 / Q4_1 / Q8_0 panels (repack.h), AVX3_DL target on a CPU with
// AMX-INT8 (AmxInt8Enabled): one 16-row panel × up to 16 tokens per tile product. Per 32-column block:
//   A (tile 2 or 3): 16 tokens × 32 activation bytes, the signed xq as quantized;
//   B (tile 4 or 5): the block's codes as signed bytes, 8 rows of 64 — exactly the panel's 8 code
//                    vectors (row g: elements 4g .. 4g + 3 of the 16 rows), so no transpose;
//   C (tile 0 or 1): 16 tokens × 16 rows of int32, from zero, signed by signed (tdpbssd): the exact
//                    integer sum Σ xq · q the VNNI kernel forms.
// The float epilogue is the VNNI kernel's, op for op: bit-identical to int8_packed-inl.h and the int8
// twin (int8_ref.h), for any n_tok, grouping and thread count. With several token groups a panel's B
// tiles are staged once (nibbles unpacked) and serve every group; with one, each block is staged just
// before its product (the weight stream overlaps the tiles). Two tile sets alternate.
#if defined(CHORUS_OPS_INT8_AMX_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CHORUS_OPS_INT8_AMX_INL_H_
#undef CHORUS_OPS_INT8_AMX_INL_H_
#else
#define CHORUS_OPS_INT8_AMX_INL_H_
#endif

#include <cstring>

#include "hwy/highway.h"
#include "ops/int8_ref.h"  // Int8ActLayout
#include "ops/repack.h"    // PackedBlockBytes

HWY_BEFORE_NAMESPACE();
#if HWY_TARGET == HWY_AVX3_DL
#pragma GCC push_options
#pragma GCC target("avx512vnni,amx-tile,amx-int8")
#include <immintrin.h>

namespace chorus {
namespace HWY_NAMESPACE {
namespace mm {

// Tokens one tile product takes (the tile's rows).
inline constexpr size_t kAmxTokens = 16;

// A repacked block's 8 code vectors as stored (repack.h): c[k] = elements 4k .. 4k + 3 of the 16 rows,
// Q4: the low (k < 4) and high nibbles of 4 loads; Q8_0: 8 loads of q + 128.
template <GgmlType kType>
HWY_INLINE void LoadPanelCodes(const uint8_t* blk, __m512i* c) {
  if constexpr (kType == GgmlType::kQ8_0) {
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) c[g] = _mm512_load_si512(blk + 64 * g);
  } else {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      const __m512i v = _mm512_load_si512(blk + 64 * g);
      c[g] = _mm512_and_si512(v, low4);
      c[4 + g] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
    }
  }
}

// A repacked block's 16 rows' d (f32) and m: Q4_1 its stored m, Q4_0 −8 d, Q8_0 zero (unused).
template <GgmlType kType>
HWY_INLINE void LoadPanelScales(const uint8_t* blk, __m512* dw, __m512* mv) {
  constexpr size_t kScales = kType == GgmlType::kQ8_0 ? 512 : 256;
  *dw = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(blk + kScales)));
  if constexpr (kType == GgmlType::kQ4_1) {
    *mv = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(blk + kScales + 32)));
  } else if constexpr (kType == GgmlType::kQ4_0) {
    *mv = _mm512_mul_ps(*dw, _mm512_set1_ps(-8.0f));
  } else {
    *mv = _mm512_setzero_ps();
  }
}

// Bytes AmxStagePanel writes per block: the B tile.
inline constexpr size_t kAmxStageBlock = 512;

// A panel's B tiles, once per panel: block b at st + b · kAmxStageBlock, its 8 code rows as signed
// bytes (row g: elements 4g .. 4g + 3 of the 16 weight rows; Q4: the nibbles 0 .. 15, Q8_0: q).
template <GgmlType kType>
HWY_INLINE void AmxStageBlock(const uint8_t* blk, uint8_t* bt) {
  __m512i c[8];
  LoadPanelCodes<kType>(blk, c);
#pragma GCC unroll 8
  for (int g = 0; g < 8; ++g) {
    if constexpr (kType == GgmlType::kQ8_0) c[g] = _mm512_xor_si512(c[g], _mm512_set1_epi8(static_cast<char>(0x80)));  // q + 128 → q
    _mm512_store_si512(bt + 64 * g, c[g]);
  }
}
template <GgmlType kType>
HWY_INLINE void AmxStagePanel(const uint8_t* panel, size_t nb, uint8_t* st) {
  for (size_t b = 0; b < nb; ++b) AmxStageBlock<kType>(panel + b * PackedBlockBytes(kType), st + b * kAmxStageBlock);
}

// One staged block's tile product into C tile kSlot (A kSlot + 2, B kSlot + 4), signed by signed
// (tdpbssd): C = Σ xq · q, the exact integer the VNNI kernel forms. GCC's tile intrinsics are macros
// that paste the tile number into the instruction text, hence the two spelled-out slots.
HWY_INLINE void AmxProduct(size_t slot, const uint8_t* bt, const uint8_t* a, long lda) {
  if (slot == 0) {
    _tile_zero(0);
    _tile_loadd(2, a, lda);
    _tile_loadd(4, bt, 64);
    _tile_dpbssd(0, 2, 4);
  } else {
    _tile_zero(1);
    _tile_loadd(3, a, lda);
    _tile_loadd(5, bt, 64);
    _tile_dpbssd(1, 3, 5);
  }
}
HWY_INLINE void AmxStore(size_t slot, int32_t* c) {
  if (slot == 0) {
    _tile_stored(0, c, 64);
  } else {
    _tile_stored(1, c, 64);
  }
}

// Staged panel (AmxStagePanel; `panel` for its scales; kFused: st a ring of kRing blocks, each staged
// from `panel` just before its product) × 16 tokens: `act` token rows ld_act apart
// whose code bytes are the signed xq; dxt / sxt: the tokens' dx / s, block b's 16 at b · ldt (the VNNI
// kernel's values, transposed once per call by PackedInt8Path); the first nt ≤ 16 tokens' rows
// are stored (all 16 are computed: the rows past the last token are zeros). Pipelined over blocks:
// while the tile unit multiplies block b, block b − 1's sums are stored (a ring of 4) and block
// b − 2's are read out. pf: the next panel (block b of it into L2 with block b), or null.
template <GgmlType kType, bool kFused>
HWY_INLINE void AmxPanelTokens(const uint8_t* panel, uint8_t* st, size_t nb, const uint8_t* act,
                               size_t ld_act, const float* dxt, const float* sxt, size_t ldt, size_t nt, float* y,
                               size_t ldy, __mmask16 mask, const uint8_t* pf) {
  constexpr bool kQ8 = kType == GgmlType::kQ8_0;
  constexpr size_t kBlock = PackedBlockBytes(kType), kRing = 4;
  alignas(64) int32_t ring[kRing][kAmxTokens * 16];
  __m512 acc[kAmxTokens];
#pragma GCC unroll 16
  for (size_t t = 0; t < kAmxTokens; ++t) acc[t] = _mm512_setzero_ps();
  const long lda = static_cast<long>(ld_act);
  for (size_t i = 0; i < nb + 2; ++i) {
    if (i < nb) {
      if constexpr (kFused) {
        uint8_t* bt = st + (i % kRing) * kAmxStageBlock;
        AmxStageBlock<kType>(panel + i * kBlock, bt);
        AmxProduct(i & 1, bt, act + 32 * i, lda);
      } else {
        AmxProduct(i & 1, st + i * kAmxStageBlock, act + 32 * i, lda);
      }
      if (pf) {
        for (size_t o = 0; o < kBlock; o += 64)
          _mm_prefetch(reinterpret_cast<const char*>(pf + i * kBlock + o), _MM_HINT_T1);
      }
    }
    if (i >= 1 && i - 1 < nb) AmxStore((i - 1) & 1, ring[(i - 1) % kRing]);
    if (i < 2) continue;
    const size_t b = i - 2;
    const int32_t* cs = ring[b % kRing];
    const uint8_t* blk = panel + b * kBlock;
    __m512 dw, mv;
    LoadPanelScales<kType>(blk, &dw, &mv);
    const float* dxb = dxt + b * ldt;  // the 16 tokens' dx of block b, side by side (no per-token pointers)
    const float* sxb = sxt + b * ldt;
#pragma GCC unroll 16
    for (size_t t = 0; t < kAmxTokens; ++t) {
      const __m512 sc = _mm512_mul_ps(dw, _mm512_set1_ps(dxb[t]));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(cs + 16 * t)), sc, acc[t]);
      if constexpr (!kQ8) acc[t] = _mm512_fmadd_ps(mv, _mm512_set1_ps(sxb[t]), acc[t]);
    }
  }
#pragma GCC unroll 16
  for (size_t t = 0; t < kAmxTokens; ++t) {
    if (t < nt) _mm512_mask_storeu_ps(y + t * ldy, mask, acc[t]);
  }
}

}  // namespace mm
}  // namespace HWY_NAMESPACE
}  // namespace chorus
#pragma GCC pop_options
#endif  // HWY_TARGET == HWY_AVX3_DL
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
