#include "turbokv/thread_pool.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace turbokv {

namespace {

// How long a thread polls for the next job (a worker) or for the other threads' tasks (the
// caller) before it sleeps on a condition variable. A decode step hands the pool a hundred or
// more jobs of 10-100 us (the matvecs), a few microseconds apart; a thread asleep on a futex
// takes microseconds to tens of microseconds to run again, on the critical path of every job.
constexpr auto kPollTime = std::chrono::microseconds(50);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// Jobs posted to any pool of the process. Attention keeps pools of its own beside the engine's;
// an idle worker stops polling once another pool has work, so that it does not take a core
// from that pool's threads (each pool has workers of its own, and the cores are few).
std::atomic<uint64_t> g_jobs_posted{0};

// Polls ready() until it holds or kPollTime has passed; the caller then waits on its condition
// variable as before (at once if ready() holds). A worker (until_other_job) gives up early when
// another pool posts a job. Yields the core between rounds of polls.
template <typename Ready>
void poll_until(Ready ready, bool until_other_job) {
  const auto deadline = std::chrono::steady_clock::now() + kPollTime;
  const uint64_t posted = g_jobs_posted.load(std::memory_order_relaxed);
  while (true) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return;
      if (until_other_job && g_jobs_posted.load(std::memory_order_relaxed) != posted) return;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return;
    std::this_thread::yield();
  }
}

// Returns, holding `lock` (held on entry), once ready() holds: polls without the lock first,
// then sleeps on `cv` as a plain wait would.
template <typename Ready>
void poll_then_wait(std::unique_lock<std::mutex>& lock, std::condition_variable& cv, Ready ready,
                    bool until_other_job) {
  if (ready()) return;
  lock.unlock();
  poll_until(ready, until_other_job);
  lock.lock();
  cv.wait(lock, ready);
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_.store(true);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool(0);
  return pool;
}

// Takes tasks of the current job until none are left; `lock` holds mutex_ on entry and exit.
void ThreadPool::run_job(std::unique_lock<std::mutex>& lock) {
  while (job_ != nullptr && next_task_ < job_tasks_) {
    const size_t task = next_task_++;
    const auto* job = job_;
    lock.unlock();
    std::exception_ptr error;
    try {
      (*job)(task);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (error && !error_) error_ = error;
    if (++finished_tasks_ == job_tasks_) done_.notify_all();
  }
}

void ThreadPool::worker_loop() {
  size_t seen_generation = 0;
  std::unique_lock lock(mutex_);
  while (true) {
    // Until the pool stops or a job newer than the last one is posted.
    poll_then_wait(lock, wake_, [&] { return stopping_.load() || generation_.load() != seen_generation; }, true);
    if (stopping_.load()) return;
    seen_generation = generation_.load();
    run_job(lock);
  }
}

void ThreadPool::run_tasks(size_t n_tasks, const std::function<void(size_t)>& fn) {
  if (n_tasks == 0) return;
  if (workers_.empty() || n_tasks == 1) {
    for (size_t i = 0; i < n_tasks; ++i) fn(i);
    return;
  }
  std::unique_lock lock(mutex_);
  job_ = &fn;
  job_tasks_ = n_tasks;
  next_task_ = 0;
  finished_tasks_.store(0);
  error_ = nullptr;
  generation_.fetch_add(1);
  g_jobs_posted.fetch_add(1, std::memory_order_relaxed);
  wake_.notify_all();
  run_job(lock);
  poll_then_wait(lock, done_, [&] { return finished_tasks_.load() == n_tasks; }, false);
  job_ = nullptr;
  std::exception_ptr error = error_;
  error_ = nullptr;
  lock.unlock();
  if (error) std::rethrow_exception(error);
}

void ThreadPool::parallel_for(size_t n, const std::function<void(size_t, size_t)>& fn,
                              size_t min_chunk) {
  if (n == 0) return;
  min_chunk = std::max<size_t>(1, min_chunk);
  const size_t max_chunks = std::max<size_t>(1, n / min_chunk);
  const size_t chunks = std::min<size_t>(static_cast<size_t>(size()), max_chunks);
  // Balanced chunks (sizes differ by at most one), so each holds at least n / chunks >= min_chunk
  // items; ceil(n / chunks) per chunk would leave a short last one (10 in 3: 4, 4, 2).
  const size_t base = n / chunks, extra = n % chunks;
  run_tasks(chunks, [&](size_t c) {
    const size_t begin = c * base + std::min(c, extra);
    const size_t end = begin + base + (c < extra ? 1 : 0);
    fn(begin, end);
  });
}

}  // namespace turbokv
