#!/usr/bin/env bash
# Issue 29's serving workload against llama-server, interleaved: ROUNDS rounds of turbokv (default
# cache), llama-server f16 and llama-server q8_0 at equal KV memory (run.sh), one after another:
#   docs/data/issue29/head-to-head.sh PREFIX WORKLOAD ROUNDS
# writes PREFIX-r<round>-{tk,llf16,llq8}.json next to run.sh (WORKLOAD: 8x4k | 16x2k); the
# environment of run.sh (MODEL, LLAMA_SERVER, TURBOKV, PORT, LLAMA_FA) passes through.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
prefix=$1 workload=$2 rounds=$3
for r in $(seq "$rounds"); do
  "$here/run.sh" "$prefix-r$r-tk" turbokv "$workload"
  "$here/run.sh" "$prefix-r$r-llf16" llama-f16 "$workload"
  "$here/run.sh" "$prefix-r$r-llq8" llama-q8_0 "$workload"
done
