#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>
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

// parallel_for's contract: at most size() contiguous chunks covering [0, n) once, each of at
// least min_chunk items (or all n when n < min_chunk).
TEST(ThreadPool, ParallelForHonoursMinChunk) {
  turbokv::ThreadPool pool(3);
  for (size_t n : {1u, 3u, 10u, 17u, 100u}) {
    for (size_t min_chunk : {0u, 1u, 3u, 4u, 50u, 1000u}) {
      std::mutex m;
      std::vector<std::pair<size_t, size_t>> chunks;
      pool.parallel_for(n, [&](size_t b, size_t e) {
        std::lock_guard lock(m);
        chunks.emplace_back(b, e);
      }, min_chunk);
      std::sort(chunks.begin(), chunks.end());
      ASSERT_FALSE(chunks.empty());
      EXPECT_LE(chunks.size(), 3u) << n << " " << min_chunk;
      EXPECT_EQ(chunks.front().first, 0u);
      EXPECT_EQ(chunks.back().second, n);
      for (size_t i = 0; i < chunks.size(); ++i) {
        if (i > 0) {
          EXPECT_EQ(chunks[i].first, chunks[i - 1].second);  // contiguous, no overlap
        }
        EXPECT_GE(chunks[i].second - chunks[i].first, std::min(std::max<size_t>(min_chunk, 1), n))
            << n << " " << min_chunk;
      }
      // As many chunks as the threads and min_chunk allow.
      EXPECT_EQ(chunks.size(), std::min<size_t>(3, std::max<size_t>(1, n / std::max<size_t>(min_chunk, 1))))
          << n << " " << min_chunk;
    }
  }
}

// A chunk that throws: every other chunk still runs, then parallel_for rethrows that exception
// (one of them if several throw), and the pool stays usable.
TEST(ThreadPool, ParallelForRethrowsAfterAllChunksRan) {
  turbokv::ThreadPool pool(3);
  std::atomic<size_t> covered{0};
  try {
    pool.parallel_for(90, [&](size_t b, size_t e) {
      if (b == 0) throw std::runtime_error("first chunk");
      covered += e - b;
    });
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "first chunk");
  }
  EXPECT_EQ(covered.load(), 60u);  // the two other chunks of 30
  EXPECT_THROW(pool.parallel_for(90, [](size_t, size_t) { throw std::logic_error("all"); }),
               std::logic_error);
  std::atomic<size_t> again{0};
  pool.parallel_for(90, [&](size_t b, size_t e) { again += e - b; });
  EXPECT_EQ(again.load(), 90u);
}

// global(): one pool for the process, sized to the hardware, the same from every thread.
TEST(ThreadPool, GlobalIsOneHardwareSizedPool) {
  turbokv::ThreadPool& g = turbokv::ThreadPool::global();
  const unsigned hw = std::thread::hardware_concurrency();
  if (hw > 0) {
    EXPECT_EQ(g.size(), static_cast<int>(hw));
  }
  EXPECT_GE(g.size(), 1);
  std::vector<turbokv::ThreadPool*> seen(4, nullptr);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < seen.size(); ++i) {
    threads.emplace_back([&seen, i] { seen[i] = &turbokv::ThreadPool::global(); });
  }
  for (auto& t : threads) t.join();
  for (auto* p : seen) EXPECT_EQ(p, &g);
  std::atomic<size_t> sum{0};
  g.parallel_for(1000, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) sum += i;
  });
  EXPECT_EQ(sum.load(), 999u * 1000u / 2);
}

namespace {

// A job of two tasks that each wait (up to 10 s) for the other to start: it completes only if
// the pool's worker takes one while the calling thread runs the other. False on a timeout.
bool rendezvous(turbokv::ThreadPool& pool) {
  std::atomic<int> arrived{0};
  std::atomic<bool> timed_out{false};
  pool.run_tasks(2, [&](size_t) {
    arrived++;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (arrived.load() < 2) {
      if (std::chrono::steady_clock::now() > deadline) {
        timed_out = true;
        return;
      }
      std::this_thread::yield();
    }
  });
  return !timed_out.load();
}

}  // namespace

// Workers poll for the next job a while (~50 us) before sleeping: a job must reach a worker
// that is still polling (back to back), one that gave up and sleeps (after a pause), and one
// that stopped polling because another pool posted work (two pools used in turn, as the engine
// and attention do).
TEST(ThreadPool, JobsReachPollingAndSleepingWorkers) {
  turbokv::ThreadPool a(2), b(2);
  for (auto pause : {std::chrono::microseconds(0), std::chrono::microseconds(20), std::chrono::microseconds(2000)}) {
    for (int round = 0; round < 20; ++round) {
      ASSERT_TRUE(rendezvous(a)) << "pause " << pause.count() << " us, round " << round;
      ASSERT_TRUE(rendezvous(b)) << "pause " << pause.count() << " us, round " << round;
      std::this_thread::sleep_for(pause);
    }
  }
}

// A pool destroyed right after a job (its worker still polling) or while idle stops cleanly.
TEST(ThreadPool, DestroyedWhilePollingOrAsleep) {
  for (int round = 0; round < 50; ++round) {
    turbokv::ThreadPool pool(3);
    std::atomic<int> count{0};
    pool.run_tasks(6, [&](size_t) { count++; });
    EXPECT_EQ(count.load(), 6);
    if (round % 2 == 1) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}
