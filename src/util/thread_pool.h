// ThreadPool: a fixed set of workers that spin briefly between jobs (decode issues ~200 jobs per
// token, so a condition-variable wake per job would cost more than the work); they sleep when idle.
// Invariant: Run() is called from one thread at a time; the caller takes part as thread 0.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace chorus {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // n_threads >= 1, the caller included
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn(thread_index, n_threads) once on every thread and returns when all are done.
  void Run(const std::function<void(int, int)>& fn);

  // Splits [0, n) into n_threads contiguous ranges whose bounds are multiples of grain
  // (the last may be short) and calls fn(begin, end) for each non-empty range.
  void ParallelFor(size_t n, size_t grain, const std::function<void(size_t, size_t)>& fn);

 private:
  void WorkerLoop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::atomic<int> sleepers_{0};
  std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace chorus
