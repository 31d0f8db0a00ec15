#!/usr/bin/env bash
# The key prefetch (0ef10fd) against its parent (22e6339) where it could cost: prefill of the
# 4-bit cache at 1,833 and 7,304 prompt tokens, and decode steps at short contexts. ROUNDS rounds,
# A then B in each, so the machine's drift touches both alike. Run from the checkout root:
#   docs/data/issue29/key-prefetch/ab-short.sh A_BINARY B_BINARY OUTDIR [ROUNDS]
# Needs /tmp/llama32-1b-q8_0.gguf (context patched to 32K) and /tmp/prompt{1833,7304}.txt
# (docs/data/issue29/kernels-prefill.sh).
set -euo pipefail
a=$1 b=$2 out=$3 rounds=${4:-2}
mkdir -p "$out"
: > "$out/prefill.jsonl"
for round in $(seq "$rounds"); do
  for side in A B; do
    bin=$a
    [ "$side" = B ] && bin=$b
    for n in 1833 7304; do
      tps=$("$bin" generate --model /tmp/llama32-1b-q8_0.gguf --prompt "$(cat /tmp/prompt$n.txt)" -n 1 --kv-bits 4 \
        --threads 2 --json | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["prompt_tokens_per_s"])')
      printf '{"round": %d, "side": "%s", "prompt": %d, "prompt_tokens_per_s": %s, "load": "%s"}\n' \
        "$round" "$side" "$n" "$tps" "$(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/prefill.jsonl"
    done
    "$bin" decode-bench --synthetic llama-3.2-1b --weights q8_0 --context 128,2048 --kv dense16,tq4-i8 \
      --steps 16 --threads 2 --json > "$out/decode-$side-$round.json" 2>/dev/null
  done
done
