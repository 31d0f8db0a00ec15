#!/usr/bin/env bash
# Superseded-first eviction (E) against plain LRU (A) on the disk tier: prefix-disk-bench with
# four of twelve conversations idle after their first turn, at disk budgets that cannot hold
# every turn written. The figures compared are token counts (deterministic), not times.
#   ab.sh A_BINARY E_BINARY OUTDIR
set -euo pipefail
a=$1 e=$2 out=$3
mkdir -p "$out"
lscpu > "$out/lscpu.txt"
for budget in 2MiB 3MiB 4MiB 6MiB 64GiB; do
  for side in A E; do
    bin=$a
    [ "$side" = E ] && bin=$e
    "$bin" prefix-disk-bench --conversations 12 --idle 4 --turns 4 --first-tokens 128 --turn-tokens 32 \
      --answer-tokens 8 --resident 2 --threads 1 --prefix-disk-budget "$budget" --json > "$out/$side-$budget.json"
  done
done
