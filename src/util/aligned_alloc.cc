// AlignedAlloc: std::aligned_alloc behind relaxed atomic counters (a statistic, read by tests).
#include "util/aligned_alloc.h"

#include <atomic>
#include <cstdlib>

namespace chorus {
namespace {

std::atomic<size_t> g_live{0}, g_peak{0}, g_calls{0};

}  // namespace

void* AlignedAlloc(size_t bytes) {
  const size_t n = AlignedBytes(bytes);
  if (n == 0) return nullptr;
  void* p = std::aligned_alloc(64, n);
  if (!p) return nullptr;
  const size_t live = g_live.fetch_add(n, std::memory_order_relaxed) + n;
  g_calls.fetch_add(1, std::memory_order_relaxed);
  for (size_t peak = g_peak.load(std::memory_order_relaxed);
       live > peak && !g_peak.compare_exchange_weak(peak, live, std::memory_order_relaxed);) {
  }
  return p;
}

void AlignedFree(void* p, size_t bytes) {
  if (!p) return;
  g_live.fetch_sub(AlignedBytes(bytes), std::memory_order_relaxed);
  std::free(p);
}

AlignedAllocStats GetAlignedAllocStats() {
  return {.live = g_live.load(std::memory_order_relaxed), .peak = g_peak.load(std::memory_order_relaxed),
          .calls = g_calls.load(std::memory_order_relaxed)};
}

void ResetAlignedAllocPeak() { g_peak.store(g_live.load(std::memory_order_relaxed), std::memory_order_relaxed); }

}  // namespace chorus
