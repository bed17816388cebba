// Internals shared by matmul.cc and the per-target kernels (matmul_kernels.cc): scratch + dispatch.
// Invariant: nothing here is visible outside src/ops.
#pragma once
#include <cstddef>
#include <cstdint>

#include "ops/matmul.h"            // WeightView
#include "util/aligned_buffer.h"  // AlignedBuffer
#include "util/thread_pool.h"     // ThreadPool

namespace chorus::ops_internal {

// A growable 64-byte aligned byte arena; grows geometrically, never shrinks (no steady-state malloc).
class Scratch {
 public:
  uint8_t* Get(size_t bytes) {
    if (buf_.size() < bytes) buf_.Resize(bytes + bytes / 2 + 4096);
    return buf_.data();
  }

 private:
  AlignedBuffer<uint8_t> buf_;
};

// Per-thread scratch (activations live in the calling thread's; panels/rows in each worker's).
Scratch& ActScratch();
Scratch& TileScratch();

// The most matrices one MatMulMany call takes at once.
inline constexpr size_t kMaxJobs = 8;

// Runs MatMul for ws[0, n) (one type, one cols, n ≤ kMaxJobs) on the best target this CPU
// supports (HWY_DYNAMIC_DISPATCH); ys[j]: (n_tok, ws[j].rows).
void MatMulDispatch(const WeightView* ws, float* const* ys, size_t n, const float* x, size_t n_tok,
                    ThreadPool& pool);
const char* MatMulTargetName();

}  // namespace chorus::ops_internal
