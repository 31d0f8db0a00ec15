#!/usr/bin/env bash
# One serve-bench run of issue 29's long-context workloads against one server, at equal KV memory:
#   ./run.sh NAME SERVER WORKLOAD [SERVER ARGS...]
#   SERVER: turbokv (default cache; more args e.g. --cache tq3.5) | llama-f16 | llama-q8_0
#     (llama-server of llama.cpp, built outside the checkout: LLAMA_SERVER)
#   WORKLOAD: 8x4k (8 clients, 4,096-token prompts, 128 generated) | 16x2k (16 clients, 2,048)
# The KV memory is 264 MiB: turbokv --kv-budget 264MiB; llama-server gets as many slots of one
# conversation (prompt + 128) as that many bytes of its cache type hold (f16: 32 KiB a token in the
# 1B shape, 16 layers x K,V x 8 heads x 64 x 2 bytes; q8_0: 17 KiB, 34 bytes per 32 values):
#   8x4k: 4,224 tokens a slot: f16 2 slots (-c 8448), q8_0 3 (-c 12672)
#   16x2k: 2,176 tokens a slot: f16 3 slots (-c 6528), q8_0 7 (-c 15232)
# Writes NAME.json (serve-bench --json) next to this script (NAME may name a folder there); MODEL, LLAMA_SERVER, TURBOKV, PORT override;
# --read-timeout 3600: with fewer slots than clients llama-server sends a queued request no byte
# until a slot frees, which took over serve-bench's default 600 s for q8_0's third slot (runs
# before 2026-12-07 used 600 s and counted those requests as failed).
# LLAMA_FA is llama-server's flash-attention flag (default "-fa on"; builds before mid-2025 take a bare "-fa").
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../serve-run.sh
source "$here/../serve-run.sh"
name=$1 server=$2 workload=$3
shift 3
model=${MODEL:-/tmp/llama32-1b-q8_0.gguf}
turbokv=${TURBOKV:-$here/../../../build/turbokv}
llama=${LLAMA_SERVER:-/work/llama.cpp-build/bin/llama-server}
port=${PORT:-18092}
read -ra fa <<< "${LLAMA_FA:--fa on}"
case $workload in
  8x4k) clients=8 prompt=4096 f16=2 q8=3 ;;
  16x2k) clients=16 prompt=2048 f16=3 q8=7 ;;
  *) echo "unknown workload $workload"; exit 2 ;;
esac
slot=$((prompt + 128))
case $server in
  turbokv) command=("$turbokv" serve --model "$model" --kv-budget 264MiB --threads 2 --no-prefix-cache --port $port "$@") ;;
  llama-f16) command=("$llama" -m "$model" -c $((f16 * slot)) -np $f16 "${fa[@]}" -ctk f16 -ctv f16 -t 2 --port $port "$@") ;;
  llama-q8_0) command=("$llama" -m "$model" -c $((q8 * slot)) -np $q8 "${fa[@]}" -ctk q8_0 -ctv q8_0 -t 2 --port $port "$@") ;;
  *) echo "unknown server $server"; exit 2 ;;
esac
start_server $port "/tmp/issue29-${name//\//-}.server.log" "${command[@]}"
record_run "$here/runs.txt" "$here/$name.json" "$name: $server $workload $*" \
  "$turbokv" serve-bench --url "http://127.0.0.1:$port" --prompt-tokens $prompt --max-tokens 128 \
  --concurrency $clients --requests $clients --read-timeout 3600 --json
