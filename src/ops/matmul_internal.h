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

// Runs MatMul on the best target this CPU supports (HWY_DYNAMIC_DISPATCH).
void MatMulDispatch(const WeightView& w, const float* x, size_t n_tok, float* y, ThreadPool& pool);
const char* MatMulTargetName();

}  // namespace chorus::ops_internal
