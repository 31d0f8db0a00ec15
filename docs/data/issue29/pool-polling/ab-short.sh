#!/bin/bash
# Short-context decode and prefill, binaries A and B interleaved (issue 29, pool polling).
# usage: ab-short.sh A B ROUNDS GGUF > OUT
# Per round and binary: decode-bench at 256 tokens (dense16, tq4-i8) on the native and the AVX2
# tables, then `generate` with a 164-token prompt and 32 new tokens (prefill and decode tokens/s).
set -euo pipefail
a=$1 b=$2 rounds=$3 gguf=$4
prompt=$(python3 -c "print(' '.join(['The quick brown fox jumps over the lazy dog.']*4))")
bench() {
  "$1" decode-bench --synthetic llama-3.2-1b --weights q8_0 --context 256 --kv dense16,tq4-i8 --steps 64 \
    --threads 2 --quiet 2>&1 | awk '$1 == "dense16" || $1 == "tq4-i8" {printf " %s %s", $1, $4}'
}
for r in $(seq "$rounds"); do
  for v in "$a" "$b"; do
    name=$(basename "$v")
    echo "round $r $name native$(bench "$v")"
    echo "round $r $name avx2$(TURBOKV_NO_VNNI=1 TURBOKV_NO_AVX512=1 bench "$v")"
    "$v" generate --model "$gguf" --prompt "$prompt" -n 32 --threads 2 --json 2>/dev/null |
      python3 -c "import json,sys; d=json.load(sys.stdin); print('round $r $name generate prefill %.2f decode %.2f' % (d['prompt_tokens_per_s'], d['decode_tokens_per_s']))"
  done
done
