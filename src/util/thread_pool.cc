// ThreadPool: spin-then-sleep workers; see thread_pool.h.
#include "util/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CHORUS_PAUSE() _mm_pause()
#else
#define CHORUS_PAUSE() ((void)0)
#endif

namespace chorus {
namespace {
// pause is ~40-140 cycles. The caller waiting for the workers yields after ~50-150 us (on an
// oversubscribed machine a descheduled worker must get the core back); an idle worker spins 4x
// longer before it sleeps: a decode step's serial gaps (sampling, scheduling) outlast the shorter
// spin, and a futex wake costs more than spinning through them (docs/results/design-measurements.md,
// ThreadPool spin).
constexpr int kSpinIterations = 1 << 11;
constexpr int kIdleSpinIterations = 1 << 13;
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::Run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    // Publishing under the lock closes the race with a worker about to sleep.
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  if (sleepers_.load(std::memory_order_acquire) > 0) cv_.notify_all();
  fn(0, n_threads_);
  // Spin, then yield: on an oversubscribed machine a descheduled worker must get the core back.
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < kSpinIterations) CHORUS_PAUSE();
    else std::this_thread::yield();
  }
  job_ = nullptr;
}

void ThreadPool::ParallelFor(size_t n, size_t grain,
                             const std::function<void(size_t, size_t)>& fn) {
  if (n == 0) return;
  grain = std::max<size_t>(1, grain);
  const size_t units = (n + grain - 1) / grain;
  const int used = static_cast<int>(std::min<size_t>(units, n_threads_));
  if (used <= 1) {
    fn(0, n);
    return;
  }
  Run([&](int t, int) {
    if (t >= used) return;
    const size_t u0 = units * t / used, u1 = units * (t + 1) / used;
    const size_t b = std::min(n, u0 * grain), e = std::min(n, u1 * grain);
    if (b < e) fn(b, e);
  });
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = generation_.load(std::memory_order_acquire);
    for (int spin = 0; g == seen && spin < kIdleSpinIterations; ++spin) {
      CHORUS_PAUSE();
      g = generation_.load(std::memory_order_acquire);
    }
    if (g == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1);
      cv_.wait(lock, [&] { return generation_.load() != seen; });
      sleepers_.fetch_sub(1);
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    if (stop_.load()) return;
    (*job_)(index, n_threads_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace chorus
