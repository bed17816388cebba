// The scalar int8 arithmetic (int8_ref.h): activation quantization, row unpacking, the row sum, and
// the threaded scalar path for targets without an int8 SIMD kernel.
#include "ops/int8_ref.h"

#include <cmath>
#include <cstring>

#include "ops/matmul_internal.h"  // Scratch, JobList, ParallelRanges
#include "ops/unpack-inl.h"       // UnpackBlocks (this file's static target)
#include "util/fp16.h"            // F16ToF32

namespace chorus::ops_internal {

void QuantizeActsRef(const float* x, size_t cols, size_t n_tok, int sub, uint8_t* act) {
  const Int8ActLayout l = Int8ActLayoutOf(cols, sub);
  for (size_t t = 0; t < n_tok; ++t) {
    const float* xt = x + t * cols;
    uint8_t* base = act + t * l.stride;
    auto* q = reinterpret_cast<int8_t*>(base);
    auto* dx = reinterpret_cast<float*>(base + l.dx_off);
    auto* s = reinterpret_cast<float*>(base + l.s_off);
    for (size_t b = 0; b < cols / 32; ++b) {
      float amax = 0.0f;
      for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(xt[32 * b + i]));
      const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
      int sum[2] = {0, 0};
      for (int i = 0; i < 32; ++i) {
        const int v = static_cast<int>(std::nearbyint(xt[32 * b + i] * id));  // default mode: half to even
        q[32 * b + i] = static_cast<int8_t>(v);
        sum[i / 16] += v;
      }
      dx[b] = amax / 127.0f;
      if (sub == 32) {
        s[b] = dx[b] * static_cast<float>(sum[0] + sum[1]);
      } else {
        s[2 * b] = dx[b] * static_cast<float>(sum[0]);
        s[2 * b + 1] = dx[b] * static_cast<float>(sum[1]);
      }
    }
  }
}

void UnpackRowInt8(GgmlType type, const uint8_t* row, size_t cols, uint8_t* q, float* dw, float* m) {
  if (type == GgmlType::kQ8_0) {  // signed codes as they are; m unused
    for (size_t b = 0; b < cols / 32; ++b, row += sizeof(BlockQ8_0)) {
      uint16_t h;
      std::memcpy(&h, row, 2);
      dw[b] = F16ToF32(h);
      m[b] = 0.0f;
      std::memcpy(q + 32 * b, row + offsetof(BlockQ8_0, qs), 32);
    }
    return;
  }
  HWY_NAMESPACE::mm::UnpackBlocks(type, row, cols / GgmlTraitsOf(type).block_elems, q, dw, m);
}

float RowDotInt8Ref(GgmlType type, const uint8_t* q, const float* dw, const float* m, size_t cols,
                    const uint8_t* act) {
  const int sub = Int8SubOf(type);
  const bool is_signed = Int8SignedCodes(type);
  const Int8ActLayout l = Int8ActLayoutOf(cols, sub);
  const auto* xq = reinterpret_cast<const int8_t*>(act);
  const auto* dx = reinterpret_cast<const float*>(act + l.dx_off);
  const auto* s = reinterpret_cast<const float*>(act + l.s_off);
  float acc = 0.0f;
  for (size_t j = 0; j < cols / sub; ++j) {
    int32_t isum = 0;
    for (int i = 0; i < sub; ++i) {
      const size_t c = j * sub + i;
      const int w = is_signed ? static_cast<int8_t>(q[c]) : q[c];
      isum += w * xq[c];
    }
    acc = std::fma(static_cast<float>(isum), dw[j] * dx[j * sub / 32], acc);
    if (!is_signed) acc = std::fma(m[j], s[j], acc);
  }
  return acc;
}

void MatMulInt8Scalar(const WeightView* ws, float* const* ys, size_t n, const float* x, size_t n_tok,
                      ThreadPool& pool) {
  const GgmlType type = ws[0].type;
  const size_t cols = ws[0].cols;
  const int sub = Int8SubOf(type);
  const Int8ActLayout l = Int8ActLayoutOf(cols, sub);
  uint8_t* act = ActScratch().Get(l.stride * n_tok);
  QuantizeActsRef(x, cols, n_tok, sub, act);
  const JobList jobs(ws, ys, n, 1);
  ParallelRanges(pool, jobs.total(), 8, [&](size_t g0, size_t g1) {
    const size_t nsub = cols / sub;
    uint8_t* scratch = TileScratch().Get(Align64(cols) + 2 * nsub * sizeof(float));
    uint8_t* q = scratch;
    float* dw = reinterpret_cast<float*>(scratch + Align64(cols));
    float* m = dw + nsub;
    jobs.ForRange(g0, g1, [&](size_t j, size_t r0, size_t r1) {
      const WeightView& w = ws[j];
      for (size_t r = r0; r < r1; ++r) {
        UnpackRowInt8(type, w.data + r * w.row_bytes, cols, q, dw, m);
        for (size_t t = 0; t < n_tok; ++t) ys[j][t * w.rows + r] = RowDotInt8Ref(type, q, dw, m, cols, act + t * l.stride);
      }
    });
  });
}

}  // namespace chorus::ops_internal
