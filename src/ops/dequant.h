// Scalar dequantization of GGML weight rows (the reference every weight kernel is tested against).
// Invariant: DequantizeRow computes ggml's dequantize_row_* formula per element (w = d*q + m in f32).
#pragma once
#include <cstddef>
#include <cstdint>

#include "gguf/ggml_types.h"  // GgmlType

namespace chorus {

// dst[0, n) = the n weights stored in src. n must be a multiple of the type's block size and the
// type one of F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K (checked).
void DequantizeRow(GgmlType type, const uint8_t* src, float* dst, size_t n);

// True for the weight types DequantizeRow and MatMul accept.
bool IsMatMulType(GgmlType type);

}  // namespace chorus
