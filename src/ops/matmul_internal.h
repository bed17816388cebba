// Internals shared by matmul.cc and the per-target kernels (matmul_kernels.cc): scratch + dispatch.
// Invariant: nothing here is visible outside src/ops.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>

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

// The packed kernels' prefetch of the next weight panel (int8_packed-inl.h): CHORUS_WEIGHT_PREFETCH=0
// turns it off, 1 (the default) on; another value stops the program before main with a message.
bool WeightPrefetch();

// ThreadPool::ParallelFor without its per-call std::function allocations: [0, n) in contiguous
// ranges whose bounds are multiples of grain, fn(begin, end) per non-empty range.
template <class Fn>
void ParallelRanges(ThreadPool& pool, size_t n, size_t grain, const Fn& fn) {
  if (n == 0) return;
  grain = grain ? grain : 1;
  const size_t units = (n + grain - 1) / grain;
  const size_t used = units < static_cast<size_t>(pool.size()) ? units : static_cast<size_t>(pool.size());
  if (used <= 1) return fn(size_t{0}, n);
  auto body = [&](int t, int) {
    if (static_cast<size_t>(t) >= used) return;
    const size_t u0 = units * t / used, u1 = units * (t + 1) / used;
    const size_t b = u0 * grain < n ? u0 * grain : n, e = u1 * grain < n ? u1 * grain : n;
    if (b < e) fn(b, e);
  };
  pool.Run(std::ref(body));  // a reference_wrapper fits std::function's inline storage
}

// Tokens [0, n_tok) in balanced passes of at most kMax; fn(t0, nt) per pass.
template <size_t kMax, class Fn>
inline void TokenPasses(size_t n_tok, const Fn& fn) {
  const size_t passes = (n_tok + kMax - 1) / kMax;
  for (size_t i = 0; i < passes; ++i) {
    const size_t t0 = n_tok * i / passes;
    fn(t0, n_tok * (i + 1) / passes - t0);
  }
}

// The most matrices one MatMulMany call takes at once.
inline constexpr size_t kMaxJobs = 8;

// Matrices of one type and width sharing x, cut into units of `unit` rows (a row group, a panel);
// global unit g of the list is unit g - start[j] of ws[j].
struct JobList {
  const WeightView* ws;
  float* const* ys;
  size_t n;
  size_t unit;
  size_t start[kMaxJobs + 1];  // prefix sums of the units per matrix

  JobList(const WeightView* w, float* const* y, size_t count, size_t unit_rows)
      : ws(w), ys(y), n(count), unit(unit_rows) {
    start[0] = 0;
    for (size_t j = 0; j < n; ++j) start[j + 1] = start[j] + (ws[j].rows + unit - 1) / unit;
  }
  size_t total() const { return start[n]; }
  // Calls fn(j, local_begin, local_end) for every matrix overlapping global units [g0, g1).
  template <class Fn>
  void ForRange(size_t g0, size_t g1, const Fn& fn) const {
    for (size_t j = 0; j < n; ++j) {
      const size_t b = g0 > start[j] ? g0 : start[j], e = g1 < start[j + 1] ? g1 : start[j + 1];
      if (b < e) fn(j, b - start[j], e - start[j]);
    }
  }
};

// Tokens per pass over a packed panel (their int8 activations stay in L2 meanwhile).
inline constexpr size_t kPanelTokChunk = 64;

// The loop of the panel kernels (int8_x86, int8_neon): global panels [g0, g1) of jobs (units of
// `jobs.unit` rows) × all tokens, in chunks of `chunk` tokens (their activations stay in L2):
// pack(w, r0) once per panel and chunk, then run(j, r0, n_rows, t, nt) for passes of ≤ 4 tokens.
template <class Pack, class Run>
void ForPanelTokens(const JobList& jobs, size_t n_tok, size_t chunk, size_t g0, size_t g1, const Pack& pack,
                    const Run& run) {
  for (size_t c0 = 0; c0 < n_tok; c0 += chunk) {
    const size_t nc = n_tok - c0 < chunk ? n_tok - c0 : chunk;
    jobs.ForRange(g0, g1, [&](size_t j, size_t p0, size_t p1) {
      const WeightView& w = jobs.ws[j];
      for (size_t p = p0; p < p1; ++p) {
        const size_t r0 = p * jobs.unit, n_rows = w.rows - r0 < jobs.unit ? w.rows - r0 : jobs.unit;
        pack(w, r0);
        TokenPasses<4>(nc, [&](size_t t0, size_t nt) { run(j, r0, n_rows, c0 + t0, nt); });
      }
    });
  }
}

// Runs MatMul for ws[0, n) (one type, one cols, n ≤ kMaxJobs) on the best target this CPU
// supports (HWY_DYNAMIC_DISPATCH); ys[j]: (n_tok, ws[j].rows).
void MatMulDispatch(const WeightView* ws, float* const* ys, size_t n, const float* x, size_t n_tok,
                    ThreadPool& pool);
const char* MatMulTargetName();
// Highway's targets matmul_kernels.cc compiled (HWY_TARGETS there: it adds AVX3_DL, and the
// sanitizer builds drop the AVX-512 ones).
int64_t MatMulCompiledTargets();

}  // namespace chorus::ops_internal
