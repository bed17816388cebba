// The machine's limits, measured (not looked up): main-memory read bandwidth, f32 FMA peak and int8
// dot-product peak, for a given number of threads. The roofline of every benchmark row is drawn
// against these: a decode step that must read B bytes cannot run faster than bandwidth / B.
#pragma once
#include <cstddef>
#include <string>

#include "util/thread_pool.h"

namespace chorus {

struct MachineProbeOptions {
  size_t buffer_bytes = size_t{512} << 20;  // read-bandwidth buffer: far larger than any L3
  int reps = 5;                             // the best of reps is reported (least disturbed)
};

struct MachineLimits {
  int threads = 0;
  double read_bytes_per_s = 0;  // streaming reads of buffer_bytes, all threads together
  double f32_flops_per_s = 0;   // fused multiply-adds in registers (2 flops each)
  double int8_ops_per_s = 0;    // int8 multiply-adds of the matmul kernels' instructions (2 ops
                                // each); 0 where this build has no int8 path for the CPU
  std::string simd;             // the SIMD target the loops ran on (e.g. "AVX2")
  std::string int8_path;        // e.g. "vpmaddubsw+vpmaddwd", "vpdpbusd", "" (none)
};

// Runs the three probes on the pool's threads (each thread its share); takes about a second.
MachineLimits ProbeMachine(ThreadPool& pool, const MachineProbeOptions& options = {});

}  // namespace chorus
