// Clocks and a median for the benchmark commands (attention-bench, codec-bench, decode-bench).
// CPU time matters on a shared machine: there a step's wall time mostly measures the scheduler,
// while process CPU time / threads is what it would take on otherwise idle cores (the thread
// pools' waiting threads sleep, they do not spin).
#pragma once

#include <time.h>

#include <algorithm>
#include <vector>

namespace turbokv {

inline double clock_seconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// CPU seconds used by the whole process (all threads) / by the calling thread.
inline double process_cpu_seconds() { return clock_seconds(CLOCK_PROCESS_CPUTIME_ID); }
inline double thread_cpu_seconds() { return clock_seconds(CLOCK_THREAD_CPUTIME_ID); }
// Wall-clock seconds on a monotonic clock.
inline double monotonic_seconds() { return clock_seconds(CLOCK_MONOTONIC); }

// The median (mean of the middle two for an even count); 0 for no values.
inline double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const size_t m = values.size() / 2;
  return values.size() % 2 ? values[m] : 0.5 * (values[m - 1] + values[m]);
}

}  // namespace turbokv
