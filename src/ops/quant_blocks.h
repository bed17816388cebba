// GGML weight blocks: the byte layouts of llama.cpp's ggml-common.h as documented structs.
// Invariant: sizes and field offsets are exactly ggml's (they are on disk); see docs/FORMATS.md.
#pragma once
#include <cstddef>
#include <cstdint>

namespace chorus {

inline constexpr int kQk = 32;    // elements per block of the 32-block types (Q4_0 ... Q8_0)
inline constexpr int kQkK = 256;  // elements per super-block of the K-quants

// All scales are IEEE half (F16ToF32). Nibble order of the 32-block types: qs[j] & 0xF is
// element j, qs[j] >> 4 is element j + 16 (j < 16).

struct BlockQ4_0 {  // w = d * (q - 8), q in [0, 15]
  uint16_t d;
  uint8_t qs[kQk / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

struct BlockQ4_1 {  // w = d * q + m, q in [0, 15]
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQk / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

struct BlockQ5_0 {  // w = d * (q - 16), q = nibble | (bit j of qh) << 4, in [0, 31]
  uint16_t d;
  uint8_t qh[4];  // little-endian uint32: bit j = 5th bit of element j
  uint8_t qs[kQk / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

struct BlockQ5_1 {  // w = d * q + m, q in [0, 31] as in Q5_0
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQk / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

struct BlockQ8_0 {  // w = d * q, q in [-128, 127]
  uint16_t d;
  int8_t qs[kQk];
};
static_assert(sizeof(BlockQ8_0) == 34);

// K-quants: a super-block of 256 = 8 sub-blocks of 32 (Q4_K, Q5_K) or 16 of 16 (Q6_K).
// Q4_K/Q5_K sub-block j (j < 8) has a 6-bit scale sc_j and 6-bit min mn_j packed in scales[12]:
//   j < 4: sc = scales[j] & 63,             mn = scales[j + 4] & 63
//   j ≥ 4: sc = (scales[j + 4] & 0xF) | (scales[j - 4] >> 6) << 4,
//          mn = (scales[j + 4] >> 4)  | (scales[j] >> 6) << 4
// and w = d * sc_j * q - dmin * mn_j.
inline constexpr int kKScaleBytes = 12;

struct BlockQ4_K {  // qs[32 c + l]: low nibble = element 64 c + l, high = 64 c + 32 + l
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qs[kQkK / 2];
};
static_assert(sizeof(BlockQ4_K) == 144);

struct BlockQ5_K {  // as Q4_K, plus bit (2 c) of qh[l] / bit (2 c + 1) = 5th bit of those elements
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQkK / 8];
  uint8_t qs[kQkK / 2];
};
static_assert(sizeof(BlockQ5_K) == 176);

// Q6_K: w = d * scales[e / 16] * (q - 32), q in [0, 63]. For half h (128 elements) and l < 32:
//   element 128h + l      : ql[64h + l] & 0xF      | ((qh[32h + l] >> 0) & 3) << 4
//   element 128h + l + 32 : ql[64h + l + 32] & 0xF | ((qh[32h + l] >> 2) & 3) << 4
//   element 128h + l + 64 : ql[64h + l] >> 4       | ((qh[32h + l] >> 4) & 3) << 4
//   element 128h + l + 96 : ql[64h + l + 32] >> 4  | ((qh[32h + l] >> 6) & 3) << 4
struct BlockQ6_K {
  uint8_t ql[kQkK / 2];
  uint8_t qh[kQkK / 4];
  int8_t scales[kQkK / 16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(offsetof(BlockQ6_K, d) == 208);

// The (scale, min) pair of sub-block j of a Q4_K / Q5_K super-block.
inline void KScaleMin(const uint8_t* scales, int j, int* sc, int* mn) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *mn = scales[j + 4] & 63;
  } else {
    *sc = (scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4);
    *mn = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

}  // namespace chorus
