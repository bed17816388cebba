// The native window's row formats: the newest < 32 tokens of a sequence, before they are sealed
// into a block. f16 rows (the default, exact for f16 blocks) or q8 rows (one fp16 scale and
// head_dim int8 codes per KV head: 66 bytes instead of 128 at head_dim 64). Attention always
// reads f16 rows: a q8 window is decoded into the batch's native rows, and a new token's row is
// rounded through q8 before anything reads it, so every reader — the token itself, later tokens,
// a prefill batch or token-by-token decoding — sees the same values, and sealing encodes them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "util/status.h"

namespace chorus {

enum class WindowFormat : uint8_t { kF16, kQ8 };

Result<WindowFormat> ParseWindowFormat(std::string_view name);  // "f16" | "q8"
std::string_view WindowFormatName(WindowFormat f);

// Bytes of one token's stored row (all KV heads).
size_t WindowRowBytes(WindowFormat f, size_t n_head_kv, size_t head_dim);

// n rows x (n, n_head_kv·head_dim) f32 → stored rows (n · WindowRowBytes) and the f16 rows the
// attention reads (n, kv_dim). For f16 the two are the same bytes (stored may equal nat).
void EncodeWindowRows(WindowFormat f, size_t n_head_kv, size_t head_dim, const float* x, size_t n, uint8_t* stored,
                      uint16_t* nat);
// Stored rows → the f16 rows the attention reads.
void DecodeWindowRows(WindowFormat f, size_t n_head_kv, size_t head_dim, const uint8_t* stored, size_t n,
                      uint16_t* nat);

// True when the dispatched target encodes and decodes with SIMD rows; false where it runs the
// scalar reference itself (Highway's software fp16 demotion truncates, so those targets keep it).
bool WindowCodecHasSimdRows();

// Scalar references of the two (tests): the SIMD rows above must give exactly these bits.
void EncodeWindowRowsRef(WindowFormat f, size_t n_head_kv, size_t head_dim, const float* x, size_t n, uint8_t* stored,
                         uint16_t* nat);
void DecodeWindowRowsRef(WindowFormat f, size_t n_head_kv, size_t head_dim, const uint8_t* stored, size_t n,
                         uint16_t* nat);

}  // namespace chorus
