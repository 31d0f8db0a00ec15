#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "turbokv/thread_pool.hpp"

TEST(ThreadPool, ParallelForCoversEveryIndexOnce) {
  for (int threads : {1, 2, 3}) {
    turbokv::ThreadPool pool(threads);
    for (size_t n : {1u, 2u, 7u, 1000u}) {
      std::vector<std::atomic<int>> hits(n);
      pool.parallel_for(n, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) hits[i]++;
      });
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
    }
  }
}

TEST(ThreadPool, RunTasksManyTimesAndRethrows) {
  turbokv::ThreadPool pool(2);
  std::atomic<long> sum{0};
  for (int round = 0; round < 200; ++round) {
    pool.run_tasks(5, [&](size_t t) { sum += static_cast<long>(t); });
  }
  EXPECT_EQ(sum.load(), 200 * 10);
  EXPECT_THROW(pool.run_tasks(4, [](size_t t) { if (t == 2) throw std::runtime_error("x"); }),
               std::runtime_error);
  // The pool is still usable after a failed job.
  std::atomic<int> count{0};
  pool.run_tasks(3, [&](size_t) { count++; });
  EXPECT_EQ(count.load(), 3);
}
