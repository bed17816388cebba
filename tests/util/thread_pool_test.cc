// ThreadPool: every index runs once per job, ParallelFor covers [0,n) exactly once.
#include "util/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace chorus {

TEST(ThreadPool, RunsEveryThreadOnce) {
  for (int n : {1, 2, 3, 4}) {
    ThreadPool pool(n);
    for (int rep = 0; rep < 200; ++rep) {
      std::vector<std::atomic<int>> hits(n);
      pool.Run([&](int t, int nt) {
        EXPECT_EQ(nt, n);
        hits[t].fetch_add(1);
      });
      for (int t = 0; t < n; ++t) ASSERT_EQ(hits[t].load(), 1);
    }
  }
}

TEST(ThreadPool, ParallelForCoversRangeWithGrain) {
  ThreadPool pool(3);
  for (size_t n : {0u, 1u, 7u, 64u, 1000u}) {
    std::vector<std::atomic<int>> hits(n);
    pool.ParallelFor(n, 8, [&](size_t b, size_t e) {
      EXPECT_EQ(b % 8, 0u);
      for (size_t i = b; i < e; ++i) hits[i].fetch_add(1);
    });
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << i;
  }
}

TEST(ThreadPool, SurvivesIdleSleep) {
  ThreadPool pool(2);
  std::atomic<int> sum{0};
  pool.Run([&](int t, int) { sum += t + 1; });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // workers fall asleep
  pool.Run([&](int t, int) { sum += t + 1; });
  EXPECT_EQ(sum.load(), 6);
}

}  // namespace chorus
