#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time:  fuzz/run.sh NAME SECONDS [extra libFuzzer args]
#   NAME: cache | cache_roundtrip | codec | gguf | llama2c | tokenizer_bin | bpe | prefix_value | jinja
#         (fuzz/fuzz_NAME.cpp)
# Configures and builds build-fuzz (clang-14, ASan+UBSan, libFuzzer) if needed, then fuzzes from
# the committed seeds fuzz/corpus/NAME plus a scratch corpus build-fuzz/corpus/NAME (new inputs
# go there, never into the repository). Crash reproducers land in build-fuzz/artifacts/NAME/.
# Exit status: 0 when the run ended clean, non-zero when libFuzzer found a problem.
# Environment: TURBOKV_FUZZ_BUILD (build dir, default build-fuzz), CXX (default clang++-14),
#              TURBOKV_FUZZ_JOBS (build parallelism, default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:?usage: fuzz/run.sh NAME SECONDS [libFuzzer args]}
seconds=${2:?usage: fuzz/run.sh NAME SECONDS [libFuzzer args]}
shift 2
build=${TURBOKV_FUZZ_BUILD:-build-fuzz}

case "$name" in
  cache) max_len=65536 ;;
  cache_roundtrip) max_len=1024 ;;  # an original's index and up to 255 byte flips
  codec) max_len=4096 ;;
  gguf | bpe) max_len=65536 ;;
  llama2c) max_len=32768 ;;
  tokenizer_bin) max_len=16384 ;;
  prefix_value) max_len=65536 ;;
  jinja) max_len=8192 ;;  # a template source
  *) echo "fuzz/run.sh: unknown target '$name'" >&2; exit 2 ;;
esac

if [[ ! -f "$build/build.ninja" ]]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="${CXX:-clang++-14}" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g1" \
    -DTURBOKV_SANITIZE=address,undefined -DTURBOKV_BUILD_FUZZERS=ON \
    -DTURBOKV_BUILD_TESTS=OFF -DTURBOKV_BUILD_BENCH=OFF -DTURBOKV_BUILD_TOOLS=OFF >/dev/null
fi
cmake --build "$build" -j"${TURBOKV_FUZZ_JOBS:-2}" --target "fuzz_$name"

mkdir -p "$build/corpus/$name" "$build/artifacts/$name"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
exec "$build/fuzz/fuzz_$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -max_len="$max_len" -print_final_stats=1 -artifact_prefix="$build/artifacts/$name/" "$@" \
  "$build/corpus/$name" "fuzz/corpus/$name"
