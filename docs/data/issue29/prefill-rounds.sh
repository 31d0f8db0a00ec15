#!/usr/bin/env bash
# Issue 29's prefill bars, interleaved: ROUNDS rounds, each running every (prompt, cache) pair
# once, so a drift of the machine's speed (10-30% between minutes on these VMs) touches every
# configuration alike; prints each pair's prompt tokens/s per round, the medians and the ratios
# the bars name (7.3K / 1.8K per cache, 4-bit / dense per prompt). Run from the checkout root:
#   docs/data/issue29/prefill-rounds.sh OUTDIR [ROUNDS]
# Needs /tmp/llama32-1b-q8_0.gguf (context patched to 32K) and /tmp/prompt1833.txt,
# /tmp/prompt7304.txt (see kernels-prefill.sh).
set -euo pipefail
out=$1
rounds=${2:-3}
mkdir -p "$out"
model=/tmp/llama32-1b-q8_0.gguf
lscpu > "$out/lscpu.txt"
git rev-parse HEAD > "$out/commit.txt"
: > "$out/rounds.jsonl"
for round in $(seq "$rounds"); do
  for n in 1833 7304; do
    for cache in dense16 tq4; do
      case $cache in dense16) flags="--cache dense16" ;; tq4) flags="--kv-bits 4" ;; esac
      start=$(date -u +%H:%M:%S)
      # shellcheck disable=SC2086  # flags are two words
      tps=$(./build/turbokv generate --model $model --prompt "$(cat /tmp/prompt$n.txt)" -n 1 $flags --threads 2 \
        --json | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["prompt_tokens_per_s"])')
      printf '{"round": %d, "prompt": %d, "cache": "%s", "prompt_tokens_per_s": %s, "start": "%s", "load": "%s"}\n' \
        "$round" "$n" "$cache" "$tps" "$start" "$(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/rounds.jsonl"
    done
  done
done
/usr/bin/python3 - "$out/rounds.jsonl" <<'EOF' | tee "$out/summary.txt"
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
def runs(n, cache): return [r["prompt_tokens_per_s"] for r in rows if r["prompt"] == n and r["cache"] == cache]
def med(n, cache): return statistics.median(runs(n, cache))
print("| prompt | cache | rounds (tokens/s) | median |")
print("|---|---|---|---:|")
for n in (1833, 7304):
    for cache in ("dense16", "tq4"):
        print(f"| {n} | {cache} | {', '.join(f'{x:.1f}' for x in runs(n, cache))} | {med(n, cache):.1f} |")
for cache in ("dense16", "tq4"):
    print(f"{cache}: 7,304 / 1,833 = {med(7304, cache) / med(1833, cache):.2f} (bar 0.75)")
for n in (1833, 7304):
    per_round = [t / d for t, d in zip(runs(n, "tq4"), runs(n, "dense16"))]
    print(f"{n} tokens: tq4 / dense16 = {med(n, 'tq4') / med(n, 'dense16'):.2f} of medians, "
          f"per round {', '.join(f'{x:.2f}' for x in per_round)} (bar 0.95)")
EOF
