#!/usr/bin/env bash
# CI's sanitizer pass (docs/reliability.md):
#   1. build-asan: the whole tree with -DTURBOKV_SANITIZE=address,undefined at -O1, then ctest;
#   2. build-tsan: -DTURBOKV_SANITIZE=thread, the concurrency tests only (test_concurrency,
#      test_thread_pool, the HTTP transport, the server scheduler's threaded tests), run directly;
#      (skipped with TURBOKV_CI_TSAN=0);
#   3. unless TURBOKV_CI_FUZZ_SECONDS=0: every fuzz target for TURBOKV_CI_FUZZ_SECONDS (default 20)
#      seconds from its seed corpus (scripts/ci-fuzz.sh; needs clang-14 + libclang-rt-14-dev).
# Exit status non-zero if any build, test or fuzz run fails. Environment: TURBOKV_CI_JOBS (build
# and ctest parallelism, default 2), CXX for steps 1-2 (default: the system c++).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${TURBOKV_CI_JOBS:-2}
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# -g1 (line tables only): reports still name file:line, and the build is cheaper than with full
# debug info (CI keeps under 45 minutes).
common=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1"
        -DTURBOKV_BUILD_BENCH=OFF)
start=$SECONDS

echo "== ASan+UBSan: build-asan"
cmake -S . -B build-asan "${generator[@]}" "${common[@]}" -DTURBOKV_SANITIZE=address,undefined >/dev/null
cmake --build build-asan -j"$jobs"
# halt_on_error: a UBSan report fails the test (the build also has -fno-sanitize-recover=all).
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
TURBOKV_SLOWLORIS_SECONDS=${TURBOKV_SLOWLORIS_SECONDS:-15} \
  ctest --test-dir build-asan --output-on-failure -j"$jobs"
echo "== ASan+UBSan done after $((SECONDS - start)) s"

if [[ "${TURBOKV_CI_TSAN:-1}" == 0 ]]; then
  echo "== TSan skipped (TURBOKV_CI_TSAN=0)"
else
echo "== TSan: build-tsan (concurrency tests)"
cmake -S . -B build-tsan "${generator[@]}" "${common[@]}" -DTURBOKV_SANITIZE=thread \
  -DTURBOKV_BUILD_TOOLS=OFF >/dev/null
cmake --build build-tsan -j"$jobs" --target test_concurrency test_thread_pool test_server_scheduler test_server_http
# Kernels with 32 bits of mmap randomness break TSan's memory layout ("unexpected memory
# mapping"); running without address randomization avoids it.
tsan_run=()
if command -v setarch >/dev/null && setarch "$(uname -m)" -R true 2>/dev/null; then
  tsan_run=(setarch "$(uname -m)" -R)
fi
for t in test_concurrency test_thread_pool; do
  TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1} "${tsan_run[@]}" "build-tsan/tests/$t"
done
# The HTTP transport's threads (libmicrohttpd's polling threads, the deadline sweeper, wakes from
# other threads resuming suspended connections, stop() against all of them).
TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1} "${tsan_run[@]}" build-tsan/tests/test_server_http
# The scheduler's threads (HTTP side submitting and cancelling, engine loop stepping); the
# prefix-reuse and batch-invariance tests are single-threaded logic and slow under TSan.
TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1} "${tsan_run[@]}" build-tsan/tests/test_server_scheduler \
  --gtest_filter='ServerScheduler.Budget*:ServerScheduler.Refuses*:ServerScheduler.Cancel*'
echo "== TSan done after $((SECONDS - start)) s"
fi

if [[ "${TURBOKV_CI_FUZZ_SECONDS:-20}" != 0 ]]; then
  scripts/ci-fuzz.sh "${TURBOKV_CI_FUZZ_SECONDS:-20}"
fi
echo "== ci-sanitize: all passed in $((SECONDS - start)) s"
