// A small fork-join thread pool: the project's own threads (not OpenMP), so concurrency tests
// run clean under ThreadSanitizer.
//
// Contract: parallel_for() may be called from one thread at a time per pool (it blocks until
// all chunks ran); it runs chunks on the calling thread too. Distinct pools are independent.
// A task that throws: the first exception is rethrown by parallel_for after all chunks finish.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace turbokv {

class ThreadPool {
 public:
  // n_threads <= 0: one thread per hardware core. n_threads == 1: no worker threads.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) over [0, n) split into at most size() contiguous chunks, at least
  // min_chunk items each.
  void parallel_for(size_t n, const std::function<void(size_t, size_t)>& fn, size_t min_chunk = 1);

  // Calls fn(task) for task in [0, n_tasks), tasks handed out dynamically.
  void run_tasks(size_t n_tasks, const std::function<void(size_t)>& fn);

  // A process-wide pool sized to the hardware, created on first use.
  static ThreadPool& global();

 private:
  void worker_loop();
  void run_job(std::unique_lock<std::mutex>& lock);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(size_t)>* job_ = nullptr;
  size_t job_tasks_ = 0;
  size_t next_task_ = 0;
  // Written under mutex_; atomic so that a waiting thread can poll them without it.
  std::atomic<size_t> finished_tasks_{0};
  std::atomic<size_t> generation_{0};
  std::atomic<bool> stopping_{false};
  std::exception_ptr error_;
};

}  // namespace turbokv
