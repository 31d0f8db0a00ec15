#include "turbokv/thread_pool.hpp"

#include <algorithm>

namespace turbokv {

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
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
    wake_.wait(lock, [&] { return stopping_ || generation_ != seen_generation; });
    if (stopping_) return;
    seen_generation = generation_;
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
  finished_tasks_ = 0;
  error_ = nullptr;
  ++generation_;
  wake_.notify_all();
  run_job(lock);
  done_.wait(lock, [&] { return finished_tasks_ == job_tasks_; });
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
