// The machine's limits, measured (not looked up): main-memory read bandwidth, f32 FMA peak and int8
// dot-product peak, for a given number of threads. The roofline of every benchmark row is drawn
// against these: a decode step that must read B bytes cannot run faster than bandwidth / B.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "util/thread_pool.h"

namespace chorus {

struct MachineProbeOptions {
  size_t buffer_bytes = size_t{512} << 20;  // read-bandwidth buffer: far larger than any L3
  int reps = 5;                             // the best of reps is reported (least disturbed)
};

// One read pattern of the bandwidth probe: each thread reads its slice of the buffer as `streams`
// sub-slices side by side, one 64-byte line of each per step, prefetching `ahead` bytes in front.
struct ReadRate {
  size_t streams = 1;
  size_t ahead = 0;  // software prefetch distance in bytes, 0: none
  double bytes_per_s = 0;
};

struct MachineLimits {
  int threads = 0;
  double read_bytes_per_s = 0;  // streaming reads of buffer_bytes, all threads together: the best
                                // pattern (the roof's bandwidth; a decode step's matmuls read 8
                                // weight rows side by side with software prefetch)
  std::string read_pattern;     // the pattern that gave read_bytes_per_s (ReadPatternName)
  double read_sequential_bytes_per_s = 0;  // one plain sequential stream per thread (the probe
                                           // before 2026-12-02: under-measures what prefetching
                                           // multi-stream readers get)
  std::vector<ReadRate> reads;  // every pattern probed
  double f32_flops_per_s = 0;   // fused multiply-adds in registers (2 flops each)
  double int8_ops_per_s = 0;    // int8 multiply-adds of the matmul kernels' instructions (2 ops
                                // each); 0 where this build has no int8 path for the CPU
  double amx_int8_ops_per_s = 0;  // int8 multiply-adds of AMX tile products (tdpbusd, 16x16x64 in
                                  // registers; 2 ops each); 0 where AmxInt8Enabled() is false. The
                                  // int8 matmuls from 12 tokens and the integer KV kernels from 16
                                  // queries run on it, so the roof takes the larger of the two peaks.
  std::string simd;             // the SIMD target the loops ran on (e.g. "AVX2")
  std::string int8_path;        // e.g. "vpmaddubsw+vpmaddwd", "vpdpbusd", "" (none)
};

// "8 streams/thread, prefetch 1024 B ahead".
std::string ReadPatternName(size_t streams, size_t ahead);

// Runs the three probes on the pool's threads (each thread its share); takes about a second.
MachineLimits ProbeMachine(ThreadPool& pool, const MachineProbeOptions& options = {});

}  // namespace chorus
