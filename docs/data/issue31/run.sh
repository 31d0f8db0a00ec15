#!/usr/bin/env bash
# One serve-bench run against one server (issue 31): ./run.sh NAME SERVER WORKLOAD [SERVER ARGS...]
#   SERVER: turbokv | llama (llama-server of llama.cpp, built outside the checkout)
#   WORKLOAD: w1 (4 x 2,048-token prompts + 192 generated, together) | arrivals (the same 4, then
#   2 more arriving one every 5 s once they stream)
# Writes NAME.json (serve-bench --json) next to this script. MODEL, LLAMA_SERVER, TURBOKV override.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../serve-run.sh
source "$here/../serve-run.sh"
name=$1 server=$2 workload=$3
shift 3
model=${MODEL:-/tmp/llama32-1b-q8_0.gguf}
turbokv=${TURBOKV:-$here/../../../build/turbokv}
port=${PORT:-18091}
case $server in
  turbokv) command=("$turbokv" serve --model "$model" --kv-budget 264MiB --threads 2 --no-prefix-cache --port $port "$@") ;;
  llama) command=("${LLAMA_SERVER:-/work/llama.cpp-build/bin/llama-server}" -m "$model" -c 8960 -np 4 -fa -t 2 --port $port "$@") ;;
  *) echo "unknown server $server"; exit 2 ;;
esac
start_server $port "/tmp/issue31-$name.server.log" "${command[@]}"
case $workload in
  w1) args=(--concurrency 4 --requests 4) ;;
  arrivals) args=(--concurrency 4 --requests 6 --arrive-every 5) ;;
esac
record_run "$here/runs.txt" "$here/$name.json" "$name: $server $workload $*" \
  "$turbokv" serve-bench --url "http://127.0.0.1:$port" --prompt-tokens 2048 --max-tokens 192 "${args[@]}" --json
