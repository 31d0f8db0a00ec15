#!/usr/bin/env bash
# Runs every libFuzzer target for a bounded time (default 20 s each) from its committed seed
# corpus: scripts/ci-fuzz.sh [SECONDS]. Builds build-fuzz with clang-14 (fuzz/run.sh).
# Fails on the first target that finds a crash, leak, timeout or UB report; the reproducer is
# left in build-fuzz/artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
for src in fuzz/fuzz_*.cpp; do
  name=$(basename "$src" .cpp)
  name=${name#fuzz_}
  echo "== fuzz $name for $seconds s"
  log=$(mktemp)
  status=0
  fuzz/run.sh "$name" "$seconds" >"$log" 2>&1 || status=$?
  grep -E "^(Done|INFO: Seed|stat::number_of_executed_units|==[0-9]+==ERROR|SUMMARY)|runtime error|deadly signal|Test unit written|error:" "$log" || true
  rm -f "$log"
  if [[ $status -ne 0 ]]; then
    echo "== fuzz $name FAILED (status $status; reproducer in build-fuzz/artifacts/$name/)" >&2
    exit 1
  fi
done
echo "== fuzz: all targets clean"
