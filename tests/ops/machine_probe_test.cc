// ProbeMachine: every limit is measured (positive, finite) on every thread count, and the int8 probe
// runs where the matmul kernels have an int8 path (x86 with AVX2). Catches: a probe whose loop the
// compiler removed (rate infinite or absurd), a zero from a slice bound bug, a missing dispatch, a
// read pattern skipped or a reported bandwidth that is not the best pattern's.
#include "ops/cpu_target.h"  // AmxInt8Enabled
#include "ops/machine_probe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace chorus {
namespace {

TEST(MachineProbe, EveryLimitIsMeasuredAndPlausible) {
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    const MachineLimits m = ProbeMachine(pool, {.buffer_bytes = size_t{64} << 20, .reps = 2});
    EXPECT_EQ(m.threads, threads);
    EXPECT_FALSE(m.simd.empty());
    // Bounds far outside any real machine: 10 MB/s .. 100 TB/s, 10 MFLOP/s .. 1 PFLOP/s. Timing is
    // never asserted; a value outside these means the loop did not run as written.
    EXPECT_GT(m.read_bytes_per_s, 1e7);
    EXPECT_LT(m.read_bytes_per_s, 1e14);
    // Every read pattern ran; the reported bandwidth is the best of them, and names its pattern.
    ASSERT_FALSE(m.reads.empty());
    double best = 0;
    for (const ReadRate& r : m.reads) {
      EXPECT_GT(r.bytes_per_s, 1e7) << ReadPatternName(r.streams, r.ahead);
      best = std::max(best, r.bytes_per_s);
    }
    EXPECT_EQ(m.read_bytes_per_s, best);
    EXPECT_GT(m.read_sequential_bytes_per_s, 1e7);
    EXPECT_FALSE(m.read_pattern.empty());
    EXPECT_GT(m.f32_flops_per_s, 1e7);
    EXPECT_LT(m.f32_flops_per_s, 1e15);
#if defined(__x86_64__)
    if (m.simd == "AVX2" || m.simd.rfind("AVX3", 0) == 0) {
      EXPECT_GT(m.int8_ops_per_s, 1e7);
      EXPECT_LT(m.int8_ops_per_s, 1e15);
      EXPECT_EQ(m.int8_path, "vpmaddubsw+vpmaddwd");
    }
#endif
    // AMX tile products: probed only where the engine may use them, and then far above the SIMD loop
    if (AmxInt8Enabled()) {
      EXPECT_GT(m.amx_int8_ops_per_s, 4 * m.int8_ops_per_s);
      EXPECT_LT(m.amx_int8_ops_per_s, 1e15);
    } else {
      EXPECT_EQ(m.amx_int8_ops_per_s, 0);
    }
  }
}

}  // namespace
}  // namespace chorus
