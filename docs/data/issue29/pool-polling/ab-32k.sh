#!/bin/bash
# AVX2 table, 32K: decode-bench with two caches of each configuration, the binaries given interleaved.
# usage (from a folder holding the binaries): ab-32k.sh ROUNDS CONTEXT BIN...; prints tokens/s and tq4-i8 / dense16.
# usage: run32.sh ROUNDS CONTEXT VARIANTS...
rounds=$1; ctx=$2; shift 2
for i in $(seq $rounds); do for v in "$@"; do echo -n "$v "; TURBOKV_NO_VNNI=1 TURBOKV_NO_AVX512=1 ./$v decode-bench --synthetic llama-3.2-1b --weights q8_0 --context $ctx --kv dense16,tq4-i8,dense16,tq4-i8 --steps 32 --threads 2 2>&1 | grep -E '^(dense16|tq4-i8) ' | awk '{v[NR]=$4} END {printf "d %s %s  t %s %s  ratio %.3f\n", v[1], v[3], v[2], v[4], (v[2]+v[4])/(v[1]+v[3])}'; done; done
