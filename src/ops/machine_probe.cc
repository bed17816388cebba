// Machine probes (see machine_probe.h): three loops, each run on every thread of the pool at once.
#include "ops/machine_probe.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "util/aligned_alloc.h"  // AlignedAlloc, AlignedFree
#include "util/timer.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/machine_probe.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
#include <immintrin.h>
#endif
namespace chorus {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Sum of the floats of [p, p + n) read as kStreams equal slices side by side, one 64-byte line of
// each per step (the decode matmuls' pattern: 8 weight rows at once), with a software prefetch
// `ahead` bytes in front of every stream (0: none). kStreams = 1, ahead = 0 is a plain sequential
// read. Each stream reads n / kStreams floats rounded down to whole lines; returns their sum.
template <size_t kStreams>
float ReadStreams(const float* p, size_t n, size_t ahead) {
  const hn::CappedTag<float, 8> d;  // a line is 2 vectors or more
  const size_t N = hn::Lanes(d);
  constexpr size_t kLine = 64 / sizeof(float);
  const size_t len = n / kStreams / kLine * kLine;  // floats per stream
  hn::Vec<decltype(d)> a[2][2] = {{hn::Zero(d), hn::Zero(d)}, {hn::Zero(d), hn::Zero(d)}};  // [stream % 2][vector % 2]
  for (size_t i = 0; i < len; i += kLine) {
#pragma GCC unroll 16
    for (size_t s = 0; s < kStreams; ++s) {
      const float* x = p + s * len + i;
      if (ahead) __builtin_prefetch(x + ahead / sizeof(float));
      for (size_t k = 0; k < kLine; k += 2 * N) {
        a[s % 2][0] = hn::Add(a[s % 2][0], hn::Load(d, x + k));
        a[s % 2][1] = hn::Add(a[s % 2][1], hn::Load(d, x + k + N));
      }
    }
  }
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a[0][0], a[0][1]), hn::Add(a[1][0], a[1][1]))));
}

float ProbeReadSumImpl(const float* p, size_t n, size_t streams, size_t ahead) {
  switch (streams) {
    case 1: return ReadStreams<1>(p, n, ahead);
    case 4: return ReadStreams<4>(p, n, ahead);
    case 8: return ReadStreams<8>(p, n, ahead);
    default: return ReadStreams<16>(p, n, ahead);
  }
}

// iters × 10 independent FMA chains in named registers (an array of vectors ends up in memory, a
// store-forwarding chain, not the FMA units); returns flops done.
double ProbeFmaLoopImpl(size_t iters, float* sink) {
  const hn::ScalableTag<float> d;
  auto a0 = hn::Set(d, 0.0f), a1 = hn::Set(d, 0.1f), a2 = hn::Set(d, 0.2f), a3 = hn::Set(d, 0.3f),
       a4 = hn::Set(d, 0.4f), a5 = hn::Set(d, 0.5f), a6 = hn::Set(d, 0.6f), a7 = hn::Set(d, 0.7f),
       a8 = hn::Set(d, 0.8f), a9 = hn::Set(d, 0.9f);
  const auto m = hn::Set(d, 0.999999f), b = hn::Set(d, 1e-7f);
  for (size_t i = 0; i < iters; ++i) {
    a0 = hn::MulAdd(a0, m, b), a1 = hn::MulAdd(a1, m, b), a2 = hn::MulAdd(a2, m, b), a3 = hn::MulAdd(a3, m, b);
    a4 = hn::MulAdd(a4, m, b), a5 = hn::MulAdd(a5, m, b), a6 = hn::MulAdd(a6, m, b), a7 = hn::MulAdd(a7, m, b);
    a8 = hn::MulAdd(a8, m, b), a9 = hn::MulAdd(a9, m, b);
  }
  const auto s = hn::Add(hn::Add(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)), hn::Add(hn::Add(a4, a5), hn::Add(a6, a7))),
                         hn::Add(a8, a9));
  *sink = hn::GetLane(hn::SumOfLanes(d, s));
  return 2.0 * 10 * hn::Lanes(d) * static_cast<double>(iters);
}

// The int8 instructions of the x86 matmul kernels (int8_x86-inl.h): vpmaddubsw (u8 × s8 pairs → s16)
// + vpmaddwd (s16 pairs → s32) + vpaddd, 32 multiply-adds per triple; 8 independent chains in named
// registers. The empty asm tells the compiler an input may change, so the products are not hoisted
// out of the loop. Returns int8 ops done (2 per multiply-add), 0 where this target has no int8 path.
double ProbeInt8LoopImpl(size_t iters, int32_t* sink) {
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  __m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0;
  __m256i x0 = _mm256_set1_epi8(3), x1 = _mm256_set1_epi8(4), x2 = _mm256_set1_epi8(5), x3 = _mm256_set1_epi8(6);
  const __m256i w = _mm256_set1_epi8(-5), ones = _mm256_set1_epi16(1);
#define CHORUS_PROBE_STEP(c, x) c = _mm256_add_epi32(c, _mm256_madd_epi16(_mm256_maddubs_epi16(x, w), ones))
  for (size_t i = 0; i < iters; ++i) {
    asm volatile("" : "+x"(x0), "+x"(x1), "+x"(x2), "+x"(x3));
    CHORUS_PROBE_STEP(c0, x0); CHORUS_PROBE_STEP(c1, x1); CHORUS_PROBE_STEP(c2, x2); CHORUS_PROBE_STEP(c3, x3);
    CHORUS_PROBE_STEP(c4, x0); CHORUS_PROBE_STEP(c5, x1); CHORUS_PROBE_STEP(c6, x2); CHORUS_PROBE_STEP(c7, x3);
  }
#undef CHORUS_PROBE_STEP
  const __m256i s = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(c0, c1), _mm256_add_epi32(c2, c3)),
                                     _mm256_add_epi32(_mm256_add_epi32(c4, c5), _mm256_add_epi32(c6, c7)));
  *sink = _mm256_extract_epi32(s, 0);
  return 2.0 * 32 * 8 * static_cast<double>(iters);
#else
  *sink = 0;
  return 0;
#endif
}

const char* ProbeTargetNameImpl() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace chorus
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "ops/cpu_target.h"  // AmxInt8Enabled, AmxEnsureTileConfig

namespace chorus {
#if defined(__x86_64__) && defined(__linux__)
// iters × 4 independent tile products (C tiles 0, 1 and 6, 7 of AmxEnsureTileConfig's shapes: 16 rows ×
// 64 bytes; A = tile 6, B = tile 7, K = 64) of data in registers; returns ops done (2 per multiply-add).
__attribute__((target("amx-tile,amx-int8"))) double ProbeAmxLoop(size_t iters) {
  AmxEnsureTileConfig();
  alignas(64) static const uint8_t ones[16 * 64] = {1};
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm6\n\ttileloadd (%0,%1,1), %%tmm7\n\ttilezero %%tmm0\n\ttilezero %%tmm1"
                   ::"r"(ones), "r"(long{64}));
  for (size_t i = 0; i < iters; ++i)
    __asm__ volatile("tdpbusd %%tmm7, %%tmm6, %%tmm0\n\ttdpbusd %%tmm7, %%tmm6, %%tmm1\n\t"
                     "tdpbusd %%tmm7, %%tmm6, %%tmm0\n\ttdpbusd %%tmm7, %%tmm6, %%tmm1" ::);
  return 2.0 * 4 * 16 * 16 * 64 * static_cast<double>(iters);
}
#else
double ProbeAmxLoop(size_t) { return 0; }
#endif
HWY_EXPORT(ProbeReadSumImpl);
HWY_EXPORT(ProbeFmaLoopImpl);
HWY_EXPORT(ProbeInt8LoopImpl);
HWY_EXPORT(ProbeTargetNameImpl);

namespace {

// The read patterns probed: the plain sequential read, and the decode matmuls' shape (8 rows side
// by side, the next rows prefetched ahead) with fewer and more streams.
struct ReadPattern {
  size_t streams, ahead;
};
constexpr ReadPattern kReadPatterns[] = {{1, 0}, {1, 1024}, {4, 1024}, {8, 0}, {8, 1024}, {16, 1024}};

// Best (highest) rate over reps of fn run on every thread at once; fn(thread, n_threads) returns the
// work it did (bytes, flops or ops).
template <typename Fn>
double BestRate(ThreadPool& pool, int reps, Fn fn) {
  double best = 0;
  std::vector<double> work(pool.size());
  for (int r = 0; r < reps; ++r) {
    Timer t;
    pool.Run([&](int i, int n) { work[i] = fn(i, n); });
    const double s = t.Seconds();
    double total = 0;
    for (double w : work) total += w;
    if (s > 0) best = std::max(best, total / s);
  }
  return best;
}

}  // namespace

std::string ReadPatternName(size_t streams, size_t ahead) {
  std::string s = std::to_string(streams) + (streams == 1 ? " stream" : " streams") + "/thread";
  return ahead ? s + ", prefetch " + std::to_string(ahead) + " B ahead" : s;
}

MachineLimits ProbeMachine(ThreadPool& pool, const MachineProbeOptions& o) {
  MachineLimits m;
  m.threads = pool.size();
  m.simd = HWY_DYNAMIC_DISPATCH(ProbeTargetNameImpl)();
  {
    const size_t n = o.buffer_bytes / sizeof(float) / 64 * 64;
    auto* buf = static_cast<float*>(AlignedAlloc(n * sizeof(float)));
    // First touch on the thread that will read the slice (NUMA placement; pages faulted in now).
    pool.Run([&](int i, int t) {
      const size_t b = n / t / 64 * 64 * i, e = i + 1 == t ? n : n / t / 64 * 64 * (i + 1);
      std::fill(buf + b, buf + e, 1.0f);
    });
    std::vector<float> sinks(pool.size());
    for (const ReadPattern& pat : kReadPatterns) {
      const double rate = BestRate(pool, o.reps, [&](int i, int t) {
        const size_t b = n / t / 64 * 64 * i, e = i + 1 == t ? n : n / t / 64 * 64 * (i + 1);
        sinks[i] = HWY_DYNAMIC_DISPATCH(ProbeReadSumImpl)(buf + b, e - b, pat.streams, pat.ahead);
        return static_cast<double>((e - b) / pat.streams / 16 * 16 * pat.streams * sizeof(float));
      });
      m.reads.push_back({pat.streams, pat.ahead, rate});
      if (pat.streams == 1 && pat.ahead == 0) m.read_sequential_bytes_per_s = rate;
      if (rate > m.read_bytes_per_s) {
        m.read_bytes_per_s = rate;
        m.read_pattern = ReadPatternName(pat.streams, pat.ahead);
      }
    }
    AlignedFree(buf, n * sizeof(float));
  }
  std::vector<float> fsink(pool.size());
  m.f32_flops_per_s = BestRate(pool, 8 * o.reps, [&](int i, int) {
    return HWY_DYNAMIC_DISPATCH(ProbeFmaLoopImpl)(size_t{1} << 18, &fsink[i]);
  });
  std::vector<int32_t> isink(pool.size());
  m.int8_ops_per_s = BestRate(pool, 8 * o.reps, [&](int i, int) {
    return HWY_DYNAMIC_DISPATCH(ProbeInt8LoopImpl)(size_t{1} << 18, &isink[i]);
  });
  m.int8_path = m.int8_ops_per_s > 0 ? "vpmaddubsw+vpmaddwd" : "";
  if (AmxInt8Enabled())
    m.amx_int8_ops_per_s = BestRate(pool, 8 * o.reps, [&](int, int) { return ProbeAmxLoop(size_t{1} << 16); });
  return m;
}

}  // namespace chorus
#endif  // HWY_ONCE
