// Byte layouts of the KV block formats (docs/FORMATS.md): structs with compile-time sizes for
// head_dim 64, the size formulas for any head_dim, code-group packing and the Lloyd-Max codebooks.
// Invariant: every struct below is the exact memory image (little-endian, no padding).
#pragma once
#include <cstddef>  // offsetof
#include <cstdint>
#include <cstring>

#include "kv/kv_format.h"  // KvFormat, KvSide, kBlockTokens

namespace chorus::kv_layout {

// ---- Code groups: 32 codes of `bits` bits packed into 4*bits bytes -------------------------
// 2 bits: byte k holds codes 4k..4k+3, LSB first (i.e. code i = bits 2(i%16) of LE u32 word i/16).
// 4 bits: byte k (0..15) holds code k in its low nibble and code k+16 in its high nibble.
// 3 bits: the low 2 bits of every code as a 2-bit group (8 bytes), then the high bit of every
//         code as one LE u32 (bit i = code i) (4 bytes): 12 bytes.
inline constexpr size_t kGroupCodes = 32;
constexpr size_t PackedGroupBytes(uint32_t bits) { return 4 * bits; }

inline uint32_t LoadLE32(const uint8_t* p) {
  uint32_t w;
  std::memcpy(&w, p, 4);
  return w;
}

inline void PackGroup(uint32_t bits, const uint8_t* codes /*(32)*/, uint8_t* out) {
  if (bits == 4) {
    for (size_t k = 0; k < 16; ++k) out[k] = static_cast<uint8_t>(codes[k] | (codes[k + 16] << 4));
  } else if (bits == 2) {
    for (size_t k = 0; k < 8; ++k) {
      out[k] = static_cast<uint8_t>(codes[4 * k] | (codes[4 * k + 1] << 2) |
                                    (codes[4 * k + 2] << 4) | (codes[4 * k + 3] << 6));
    }
  } else {  // 3
    uint8_t lo[kGroupCodes];
    uint32_t hi = 0;
    for (size_t i = 0; i < kGroupCodes; ++i) {
      lo[i] = codes[i] & 3;
      hi |= static_cast<uint32_t>(codes[i] >> 2) << i;
    }
    PackGroup(2, lo, out);
    std::memcpy(out + 8, &hi, 4);
  }
}

inline uint32_t UnpackCode(uint32_t bits, const uint8_t* group, size_t i) {
  if (bits == 4) return (group[i & 15] >> ((i & 16) ? 4 : 0)) & 15;
  const uint32_t lo = (group[i >> 2] >> (2 * (i & 3))) & 3;
  if (bits == 2) return lo;
  return lo | (((LoadLE32(group + 8) >> i) & 1) << 2);
}

// ---- Structs (shown for head_dim D; sizes asserted for D = 64) --------------------------------
// Row formats (f16, q8, polykv-paper, tq) store a *value* tile token-major (one row per token, as
// below) and a *key* tile channel-major (the *KeyTile structs): the 32 tokens of one channel are
// contiguous, so a score kernel puts tokens in lanes and needs no horizontal sums. Same bytes.
// f16: a head tile is the fp16 rows of its 32 tokens.
template <uint32_t D>
struct F16Tile {
  uint16_t v[kBlockTokens][D];  // (token, channel) fp16
};
template <uint32_t D>
struct F16KeyTile {
  uint16_t k[D][kBlockTokens];  // (channel, token) fp16
};
// q8: one row per (token, head): x̂ = q * scale.
template <uint32_t D>
struct Q8Row {
  uint16_t scale_f16;  // max|x| / 127
  int8_t q[D];         // round(x / scale), in [-127, 127]
};
template <uint32_t D>
struct Q8KeyTile {
  uint16_t scale_f16[kBlockTokens];  // per token: max|x| / 127
  int8_t q[D][kBlockTokens];         // (channel, token)
};
// polykv-paper: the block starts with the layer scale, then one int8 tile per head.
struct PolyKvPaperHeader {
  float scale;  // layer_absmax / 127 (f32, the same in every block of the layer)
};
template <uint32_t D>
struct PolyKvPaperTile {
  int8_t q[kBlockTokens][D];  // round(x / scale), in [-127, 127]; keys: [D][kBlockTokens]
};
// KIVI: a group = 32 values with one fp16 scale and one fp16 min: x̂ = code * scale + min.
// Keys: group = one channel over the block's 32 tokens. Values: group = 32 consecutive channels of
// one token. Scales and mins are stored apart from the codes so kernels convert them as vectors.
template <uint32_t B, uint32_t D>
struct KiviKeyTile {
  uint16_t scale_f16[D];                 // per channel: (max - min) / (2^B - 1)
  uint16_t min_f16[D];                   // per channel: min over the 32 tokens
  uint8_t codes[D][PackedGroupBytes(B)];  // per channel: the 32 tokens' codes
};
template <uint32_t B, uint32_t D>
struct KiviValueTile {
  uint16_t scale_f16[D / 32][kBlockTokens];                 // (channel group, token)
  uint16_t min_f16[D / 32][kBlockTokens];                   // (channel group, token)
  uint8_t codes[D / 32][kBlockTokens][PackedGroupBytes(B)];  // (channel group, token): 32 channels
};
// tq: one row per (token, head): rotated domain ŷ_c = norm * centroid[code_c] / sqrt(D).
template <uint32_t B, uint32_t D>
struct TqRow {
  uint16_t norm_f16;                                // ||x||_2
  uint8_t codes[D / kGroupCodes][PackedGroupBytes(B)];  // D codes of B bits, groups of 32
};
template <uint32_t B, uint32_t D>
struct TqKeyTile {
  uint16_t norm_f16[kBlockTokens];         // per token: ||x||_2
  uint8_t codes[D][PackedGroupBytes(B)];   // per channel: the 32 tokens' codes (one group)
};

static_assert(sizeof(F16Tile<64>) == 4096);
static_assert(sizeof(Q8Row<64>) == 66);
static_assert(sizeof(PolyKvPaperHeader) == 4);
static_assert(sizeof(PolyKvPaperTile<64>) == 2048);
static_assert(sizeof(F16KeyTile<64>) == sizeof(F16Tile<64>));
static_assert(sizeof(Q8KeyTile<64>) == kBlockTokens * sizeof(Q8Row<64>));
static_assert(sizeof(KiviKeyTile<4, 64>) == 1280);
static_assert(sizeof(KiviKeyTile<3, 64>) == 1024);
static_assert(sizeof(KiviKeyTile<2, 64>) == 768);
static_assert(sizeof(KiviValueTile<4, 64>) == 1280);
static_assert(sizeof(KiviValueTile<3, 64>) == 1024);
static_assert(sizeof(KiviValueTile<2, 64>) == 768);
static_assert(sizeof(TqRow<4, 64>) == 34);
static_assert(sizeof(TqRow<3, 64>) == 26);
static_assert(sizeof(TqRow<2, 64>) == 18);

// ---- Size formulas for any head_dim d --------------------------------------------------------
constexpr size_t KiviGroupBytes(uint32_t bits) { return 4 + PackedGroupBytes(bits); }
// A KIVI tile (either side) is d groups: [scale_f16 × d][min_f16 × d][codes 4·bits bytes × d];
// key group g = channel g; value group g = (channel group g / 32, token g % 32).
constexpr size_t KiviMinOffset(uint32_t d) { return 2 * size_t{d}; }
constexpr size_t KiviCodesOffset(uint32_t d) { return 4 * size_t{d}; }
constexpr size_t Q8RowBytes(uint32_t d) { return 2 + d; }
constexpr size_t TqRowBytes(uint32_t bits, uint32_t d) { return 2 + d / kGroupCodes * PackedGroupBytes(bits); }
constexpr size_t HeaderBytes(KvFormat f) { return f == KvFormat::kPolyKvPaper ? sizeof(PolyKvPaperHeader) : 0; }
constexpr uint32_t KiviBits(KvFormat f) {
  return f == KvFormat::kKivi4 ? 4 : f == KvFormat::kKivi3 ? 3 : f == KvFormat::kKivi2 ? 2 : 0;
}
constexpr uint32_t TqBits(KvFormat f) {
  return f == KvFormat::kTq4 ? 4 : f == KvFormat::kTq3 ? 3 : f == KvFormat::kTq2 ? 2 : 0;
}
// Key tiles of q8 and tq start with the 32 tokens' fp16 scales / norms; then channel c's 32 values
// (q8: bytes; tq: one packed group) at KeyColumnsOffset + c · (32 or PackedGroupBytes).
constexpr size_t KeyColumnsOffset(KvFormat f) { return (f == KvFormat::kQ8 || TqBits(f) != 0) ? 2 * kBlockTokens : 0; }
// Both KIVI sides hold head_dim groups per tile (d channels × 32 tokens = 32 tokens × d/32 groups):
// [scales of all groups][mins of all groups][codes of all groups], group order as in the structs.
constexpr size_t TileBytes(KvFormat f, uint32_t d) {
  switch (f) {
    case KvFormat::kF16: return kBlockTokens * 2 * size_t{d};
    case KvFormat::kQ8: return kBlockTokens * Q8RowBytes(d);
    case KvFormat::kPolyKvPaper: return kBlockTokens * size_t{d};
    case KvFormat::kKivi4: case KvFormat::kKivi3: case KvFormat::kKivi2:
      return size_t{d} * KiviGroupBytes(KiviBits(f));
    case KvFormat::kTq4: case KvFormat::kTq3: case KvFormat::kTq2:
      return kBlockTokens * TqRowBytes(TqBits(f), d);
  }
  return 0;
}
static_assert(TileBytes(KvFormat::kF16, 64) == sizeof(F16Tile<64>));
static_assert(TileBytes(KvFormat::kQ8, 64) == kBlockTokens * sizeof(Q8Row<64>));
static_assert(TileBytes(KvFormat::kPolyKvPaper, 64) == sizeof(PolyKvPaperTile<64>));
using KiviKey3x64 = KiviKeyTile<3, 64>;
using KiviValue4x64 = KiviValueTile<4, 64>;
using Tq3Row64 = TqRow<3, 64>;
static_assert(offsetof(KiviKey3x64, min_f16) == KiviMinOffset(64));
static_assert(offsetof(KiviKey3x64, codes) == KiviCodesOffset(64));
static_assert(offsetof(KiviValue4x64, min_f16) == KiviMinOffset(64));
static_assert(offsetof(KiviValue4x64, codes) == KiviCodesOffset(64));
static_assert(offsetof(Tq3Row64, codes) == 2);
static_assert(offsetof(Q8Row<64>, q) == 2);
static_assert(TileBytes(KvFormat::kKivi3, 64) == sizeof(KiviKeyTile<3, 64>));
static_assert(TileBytes(KvFormat::kKivi4, 64) == sizeof(KiviValueTile<4, 64>));
static_assert(TileBytes(KvFormat::kKivi2, 128) == sizeof(KiviValueTile<2, 128>));
static_assert(TileBytes(KvFormat::kTq3, 64) == kBlockTokens * sizeof(TqRow<3, 64>));
static_assert(TileBytes(KvFormat::kTq2, 128) == kBlockTokens * sizeof(TqRow<2, 128>));
static_assert(TileBytes(KvFormat::kTq3, 64) == sizeof(TqKeyTile<3, 64>));
static_assert(TileBytes(KvFormat::kTq4, 128) == sizeof(TqKeyTile<4, 128>));
using TqKey3x64 = TqKeyTile<3, 64>;
static_assert(offsetof(TqKey3x64, codes) == KeyColumnsOffset(KvFormat::kTq3));
static_assert(offsetof(Q8KeyTile<64>, q) == KeyColumnsOffset(KvFormat::kQ8));

// ---- Lloyd-Max codebooks for N(0,1) (METHODS.md §4), full signed tables, ascending ----------
// Code k of a b-bit format decodes to kCentroids<b>[k]; encoding picks k = #{thresholds < z}.
// Arrays are padded to 16 floats so a SIMD table load never reads past them.
struct LloydMaxCodebook {
  uint32_t bits;
  float centroid[16];   // 2^bits used
  float threshold[15];  // 2^bits - 1 used (midpoints of neighbouring centroids)
  float mse;            // per-coordinate MSE for N(0,1)
};
inline constexpr LloydMaxCodebook kLloydMax2 = {
    2, {-1.5104f, -0.4528f, 0.4528f, 1.5104f}, {-0.9816f, 0.0f, 0.9816f}, 0.1175f};
inline constexpr LloydMaxCodebook kLloydMax3 = {
    3,
    {-2.1519f, -1.3439f, -0.7560f, -0.2451f, 0.2451f, 0.7560f, 1.3439f, 2.1519f},
    {-1.7479f, -1.0500f, -0.5005f, 0.0f, 0.5005f, 1.0500f, 1.7479f},
    0.03455f};
inline constexpr LloydMaxCodebook kLloydMax4 = {
    4,
    {-2.7326f, -2.0690f, -1.6180f, -1.2562f, -0.9423f, -0.6568f, -0.3880f, -0.1284f,
     0.1284f, 0.3880f, 0.6568f, 0.9423f, 1.2562f, 1.6180f, 2.0690f, 2.7326f},
    {-2.4008f, -1.8435f, -1.4371f, -1.0993f, -0.7995f, -0.5224f, -0.2582f, 0.0f,
     0.2582f, 0.5224f, 0.7995f, 1.0993f, 1.4371f, 1.8435f, 2.4008f},
    0.00950f};
constexpr const LloydMaxCodebook& Codebook(uint32_t bits) {
  return bits == 2 ? kLloydMax2 : bits == 3 ? kLloydMax3 : kLloydMax4;
}

}  // namespace chorus::kv_layout
