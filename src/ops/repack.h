// Load-time repacking of Q4_0 / Q4_1 weights into 16-row panels, the layout the AVX-512 VNNI kernels
// read without unpacking (int8_packed-inl.h): one 512-bit load holds 4 code bytes of 16 rows.
// Invariant: the repacked matrix holds exactly the original's bits (codes, d, m), only moved; a
// MatMul reading it gives the same results, bit for bit, as the int8 twin (MatMulInt8Ref) on `data`.
//
// Layout: panel p (rows 16p .. 16p + 15) after panel p - 1, block b (columns 32b .. 32b + 31) after
// block b - 1 of its panel, kPackedBlockBytes per (panel, block):
//   bytes [64 g + 4 i + k]  (g, k < 4, i < 16)  qs[4 g + k] of row i's block b (low nibble: element
//                                                4 g + k, high nibble: element 16 + 4 g + k)
//   bytes [256 + 2 i]                           d of row i (the f16 bits)
//   bytes [288 + 2 i]                           m of row i (Q4_1; zero for Q4_0, whose m is −8 d)
// Rows past the matrix's last (its last panel's tail) are zero. Q4_1 takes the same bytes as the
// file (20 per block and row); Q4_0 takes 320 / 288 of them (the m bytes kept for alignment).
#pragma once
#include <cstddef>
#include <cstdint>

#include "gguf/ggml_types.h"  // GgmlType
#include "ops/matmul.h"       // WeightView

namespace chorus {

inline constexpr size_t kPackedRows = 16;
inline constexpr size_t kPackedBlockBytes = 320;

// Q4_0 and Q4_1.
bool IsRepackableType(GgmlType t);
// Bytes of w repacked: panels × blocks × kPackedBlockBytes.
size_t RepackedBytes(const WeightView& w);
// w (a repackable type) → dst (RepackedBytes(w) bytes), in the layout above.
void RepackQ4x16(const WeightView& w, uint8_t* dst);

}  // namespace chorus
