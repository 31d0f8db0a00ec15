#!/usr/bin/env bash
# Aggregate decode at equal KV memory (264 MiB), 4,096-token conversations (issue 29), run from
# the checkout root: docs/data/issue29/decode-equal-memory.sh OUTDIR
# llama.cpp holds as many sequences as its cache type fits in 264 MiB (f16 2, q8_0 3, each
# 4,096 + 128 tokens; see run.sh) and decodes them together (llama-batched-bench, flash attention);
# turbokv's default cache holds all 8 (7,000 bytes a token) and decode-bench steps 8 rows at 4K.
set -uo pipefail
out=$1; mkdir -p "$out"
bb=${LLAMA_BATCHED_BENCH:-/work/llama.cpp-build/bin/llama-batched-bench}
model=/tmp/llama32-1b-q8_0.gguf
stamp() { echo "$(date -u +%H:%M:%S) $* (load $(cut -d' ' -f1-3 /proc/loadavg))" | tee -a "$out/log.txt"; }
stamp turbokv decode-bench 4K batch 1,2,3,8
./build/turbokv decode-bench --model $model --context 4096 --kv dense16,tq4 --batch 1,2,3,8 --steps 8 --threads 2 \
  --json > "$out/tk-decode-4k.json"
stamp llama-batched-bench f16 npl 2
"$bb" -m $model -t 2 -fa on -c 8448 -ctk f16 -ctv f16 -npp 4096 -ntg 32 -npl 2 --output-format jsonl > "$out/llama-f16.jsonl" 2> "$out/llama-f16.err"
stamp llama-batched-bench q8_0 npl 3
"$bb" -m $model -t 2 -fa on -c 12672 -ctk q8_0 -ctv q8_0 -npp 4096 -ntg 32 -npl 3 --output-format jsonl > "$out/llama-q8.jsonl" 2> "$out/llama-q8.err"
stamp done
