// MatMul entry points: argument checks, the scalar reference, embedding rows, per-thread scratch.
#include "ops/matmul.h"

#include <array>
#include <vector>

#include "ops/cpu_target.h"       // EnvSwitch
#include "ops/int8_ref.h"         // MatMulInt8Scalar
#include "ops/matmul_internal.h"  // MatMulDispatch, Scratch
#include "util/check.h"           // CHORUS_CHECK

namespace chorus {
namespace ops_internal {
namespace {
// Read before main, like CHORUS_CPU_TARGET: a bad value is a clear error, not a silent default.
const bool g_weight_prefetch = EnvSwitch("CHORUS_WEIGHT_PREFETCH", "on");
}  // namespace

bool WeightPrefetch() { return g_weight_prefetch; }

Scratch& ActScratch() {
  thread_local Scratch s;
  return s;
}
Scratch& TileScratch() {
  thread_local Scratch s;
  return s;
}
}  // namespace ops_internal

namespace {
void CheckView(const WeightView& w) {
  CHORUS_CHECK(IsMatMulType(w.type));
  CHORUS_CHECK(w.data != nullptr || w.rows == 0);
  const std::optional<size_t> rb = GgmlRowBytes(w.type, w.cols);
  CHORUS_CHECK(rb.has_value() && w.row_bytes >= *rb);
}
}  // namespace

void MatMul(const WeightView& w, const float* x, size_t n_tok, float* y, ThreadPool& pool) {
  CheckView(w);
  if (n_tok == 0 || w.rows == 0) return;
  ops_internal::MatMulDispatch(&w, &y, 1, x, n_tok, pool);
}

void MatMulMany(std::span<const WeightView> ws, const float* x, size_t n_tok, std::span<float* const> ys,
                ThreadPool& pool) {
  CHORUS_CHECK(ws.size() == ys.size());
  if (ws.empty() || n_tok == 0) return;
  for (const WeightView& w : ws) CheckView(w);
  // Matrices of one type and cols (in list order, ≤ kMaxJobs a dispatch) share x's quantization
  // and one pool dispatch; each row's result is the same as MatMul's (rows are independent).
  constexpr size_t kMax = ops_internal::kMaxJobs;
  std::array<bool, 64> done{};
  const size_t n = ws.size();
  if (n > done.size()) {
    for (size_t j = 0; j < n; ++j) MatMul(ws[j], x, n_tok, ys[j], pool);
    return;
  }
  for (size_t j = 0; j < n; ++j) {
    if (done[j]) continue;
    WeightView gw[kMax];
    float* gy[kMax];
    size_t g = 0;
    for (size_t k = j; k < n && g < kMax; ++k) {
      if (done[k] || ws[k].type != ws[j].type || ws[k].cols != ws[j].cols ||
          (ws[k].packed == nullptr) != (ws[j].packed == nullptr))
        continue;
      done[k] = true;
      if (ws[k].rows == 0) continue;
      gw[g] = ws[k];
      gy[g++] = ys[k];
    }
    if (g > 0) ops_internal::MatMulDispatch(gw, gy, g, x, n_tok, pool);
  }
}

void MatMulRef(const WeightView& w, const float* x, size_t n_tok, float* y) {
  CheckView(w);
  std::vector<float> row(w.cols);
  for (size_t r = 0; r < w.rows; ++r) {
    DequantizeRow(w.type, w.data + r * w.row_bytes, row.data(), w.cols);
    for (size_t t = 0; t < n_tok; ++t) {
      double s = 0.0;
      const float* xt = x + t * w.cols;
      for (size_t c = 0; c < w.cols; ++c) s += static_cast<double>(row[c]) * xt[c];
      y[t * w.rows + r] = static_cast<float>(s);
    }
  }
}

void MatMulInt8Ref(const WeightView& w, const float* x, size_t n_tok, float* y) {
  CheckView(w);
  CHORUS_CHECK(GgmlTraitsOf(w.type).block_elems > 1);  // quantized types only
  if (n_tok == 0 || w.rows == 0) return;
  ThreadPool one(1);
  ops_internal::MatMulInt8Scalar(&w, &y, 1, x, n_tok, one);
}

void EmbeddingRow(const WeightView& w, size_t row, float* dst) {
  CheckView(w);
  CHORUS_CHECK(row < w.rows);
  DequantizeRow(w.type, w.data + row * w.row_bytes, dst, w.cols);
}

const char* MatMulPath() { return ops_internal::MatMulTargetName(); }

}  // namespace chorus
