#!/usr/bin/env bash
# Issue 29's kernel and prefill figures in one quiet pass (run from the checkout root):
#   docs/data/issue29/kernels-prefill.sh OUTDIR
# Needs /tmp/llama32-1b-q8_0.gguf (context patched to 32K), /tmp/prompt1833.txt and
# /tmp/prompt7304.txt (models/kjv-revelation.txt cut to 1,833 and 7,304 tokens of that GGUF's
# tokenizer), and LLAMA_BENCH (llama.cpp's llama-bench, built outside the checkout).
set -uo pipefail
out=$1; mkdir -p "$out"
model=/tmp/llama32-1b-q8_0.gguf
llama_bench=${LLAMA_BENCH:-/work/llama.cpp-build/bin/llama-bench}
stamp() { echo "$(date -u +%H:%M:%S) $* (load $(cut -d' ' -f1-3 /proc/loadavg))" | tee -a "$out/log.txt"; }
lscpu > "$out/lscpu.txt"
stamp attention-bench 32K 3-bit
./build/turbokv attention-bench --context 32768 --key-bits 3 --value-bits 3 --threads 2 --repeats 5 \
  --dequant-repeats 1 --json > "$out/attn32k-b3.json"
stamp attention-bench 32K 4-bit
./build/turbokv attention-bench --context 32768 --key-bits 4 --value-bits 4 --threads 2 --repeats 5 \
  --dequant-repeats 1 --json > "$out/attn32k-b4.json"
stamp decode-bench 32K
./build/turbokv decode-bench --synthetic llama-3.2-1b --weights q8_0 --context 32768 --kv dense16,tq4 \
  --steps 8 --threads 2 --json > "$out/decode32k.json"
for n in 1833 7304; do
  for cache in "--cache dense16" "--kv-bits 4"; do
    tag=$(echo "$cache" | tr -d ' -')
    stamp generate $n $cache
    ./build/turbokv generate --model $model --prompt "$(cat /tmp/prompt$n.txt)" -n 1 $cache --threads 2 --json \
      > "$out/gen$n-$tag.json"
  done
done
[ -x "$llama_bench" ] && { stamp llama-bench pp2048,pp8192
"$llama_bench" -m $model -t 2 -p 2048,8192 -n 0 -fa 1 -r 1 -o json > "$out/llama-bench-pp.json"; }
stamp done
