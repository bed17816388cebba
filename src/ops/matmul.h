// Quantized weight × activation products: y = x · Wᵀ straight from GGML blocks (no dequantized copy).
// Invariant: MatMul equals MatMulRef within the activation-quantization bound (docs/FORMATS.md).
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

#include "gguf/ggml_types.h"  // GgmlType
#include "ops/dequant.h"      // DequantizeRow
#include "util/thread_pool.h"  // ThreadPool

namespace chorus {

// A (rows, cols) weight matrix in GGUF layout, non-owning (e.g. an mmap'ed tensor):
// row r starts at data + r * row_bytes; cols (= ne0) is contiguous and blocked along.
struct WeightView {
  GgmlType type = GgmlType::kF32;
  const uint8_t* data = nullptr;  // (rows, row_bytes)
  size_t rows = 0;                // outputs (ne1)
  size_t cols = 0;                // inputs (ne0), a multiple of the type's block size
  size_t row_bytes = 0;           // bytes of one row, GgmlRowBytes(type, cols) for a dense tensor
  // Optional: the same matrix in repack.h's 16-row panels (Q4_0 / Q4_1 / Q8_0; the model repacks at load where
  // MatMulReadsPacked). Paths that do not read it use `data`, which stays valid.
  const uint8_t* packed = nullptr;
};

// y[t, r] = sum_c w[r, c] * x[t, c];  x: (n_tok, cols) f32 row-major, y: (n_tok, rows) f32 row-major.
// Quantized types quantize x per 32 columns to int8 on the way (scratch is thread-local and reused);
// float types (F32, F16, BF16) compute in f32. Rows are split over the pool's threads.
void MatMul(const WeightView& w, const float* x, size_t n_tok, float* y, ThreadPool& pool);

// Several matrices applied to the same x (e.g. Q, K, V; or gate, up): ys[j] = x · ws[j]ᵀ,
// ys[j]: (n_tok, ws[j].rows). The matrices of one type and cols (≤ 8 at a time, in list order) share
// one quantization of x and one pool dispatch (one barrier); the results are MatMul's, bit for bit.
void MatMulMany(std::span<const WeightView> ws, const float* x, size_t n_tok, std::span<float* const> ys,
                ThreadPool& pool);

// Scalar reference: dequantize one row (DequantizeRow), dot in double with the unquantized x.
void MatMulRef(const WeightView& w, const float* x, size_t n_tok, float* y);

// The int8 twin: the exact arithmetic of every quantized SIMD path (ops/int8_ref.h), in scalar C++.
// MatMul of a quantized type equals it bit for bit on the AVX2, AVX-VNNI and NEON paths.
void MatMulInt8Ref(const WeightView& w, const float* x, size_t n_tok, float* y);

// Embedding lookup: dst (cols) = row `row` of w, dequantized.
void EmbeddingRow(const WeightView& w, size_t row, float* dst);

// The kernel path MatMul uses for quantized weights now (after any --cpu-target / CHORUS_CPU_TARGET
// cap): "AVX2 int8 (maddubs)", "AVX-VNNI", "AVX-512 VNNI", "NEON dotprod" or "scalar".
const char* MatMulPath();

// True when MatMul's path now (after any --cpu-target cap) reads WeightView::packed for type t (the
// AVX-512 VNNI kernels, Q4_0 / Q4_1 / Q8_0): a model repacks those weights at load only then.
bool MatMulReadsPacked(GgmlType t);

}  // namespace chorus
