// Load-time repacking of Q4_0 / Q4_1 / Q8_0 weights into 16-row panels, the layout the AVX-512 VNNI
// kernels read without unpacking (int8_packed-inl.h): one 512-bit load holds 4 code bytes of 16 rows.
// Invariant: the repacked matrix holds exactly the original's values (codes, d, m), only moved (Q8_0's
// codes biased by +128); a MatMul reading it gives the same results, bit for bit, as the int8 twin
// (MatMulInt8Ref) on `data`.
//
// Layout: panel p (rows 16p .. 16p + 15) after panel p - 1, block b (columns 32b .. 32b + 31) after
// block b - 1 of its panel, PackedBlockBytes(type) per (panel, block), row i of the panel in dword
// lane i of each 64-byte vector:
//   Q4_0 / Q4_1 (320 bytes):
//     bytes [64 g + 4 i + k]  (g, k < 4)   qs[4 g + k] of row i's block b (low nibble: element 4 g + k,
//                                          high nibble: element 16 + 4 g + k)
//     bytes [256 + 2 i]                    d of row i (the f16 bits)
//     bytes [288 + 2 i]                    m of row i (Q4_1; zero for Q4_0, whose m is −8 d)
//   Q8_0 (576 bytes):
//     bytes [64 g + 4 i + k]  (g < 8, k < 4)  qs[4 g + k] + 128 (as u8: vpdpbusd's unsigned operand)
//     bytes [512 + 2 i]                    d of row i; bytes [544, 576) zero
// Rows past the matrix's last (its last panel's tail) are zero. Q4_1 takes the file's bytes (20 per
// block and row), Q4_0 320 / 288 of them, Q8_0 576 / 544.
#pragma once
#include <cstddef>
#include <cstdint>  // SIZE_MAX

#include "gguf/ggml_types.h"  // GgmlType
#include "ops/matmul.h"       // WeightView

namespace chorus {

inline constexpr size_t kPackedRows = 16;

// Q4_0, Q4_1 and Q8_0.
bool IsRepackableType(GgmlType t);
// Bytes per (panel, block): 320 for Q4_0 / Q4_1, 576 for Q8_0.
inline constexpr size_t PackedBlockBytes(GgmlType t) { return t == GgmlType::kQ8_0 ? 576 : 320; }
// Bytes of w repacked: panels × blocks × PackedBlockBytes.
size_t RepackedBytes(const WeightView& w);
// w (a repackable type) → dst (RepackedBytes(w) bytes), in the layout above: panels [p0, p1) (of
// rows [16 p0, 16 p1)), or all of them.
void RepackPanels(const WeightView& w, uint8_t* dst, size_t p0 = 0, size_t p1 = SIZE_MAX);

}  // namespace chorus
