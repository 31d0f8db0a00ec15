#!/usr/bin/env bash
# One serve-bench run against one server (issue 31): ./run.sh NAME SERVER WORKLOAD [SERVER ARGS...]
#   SERVER: turbokv | llama (llama-server of llama.cpp, built outside the checkout)
#   WORKLOAD: w1 (4 x 2,048-token prompts + 192 generated, together) | arrivals (the same 4, then
#   2 more arriving one every 5 s once they stream)
# Writes NAME.json (serve-bench --json) next to this script. MODEL, LLAMA_SERVER, TURBOKV override.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
name=$1 server=$2 workload=$3
shift 3
model=${MODEL:-/tmp/llama32-1b-q8_0.gguf}
turbokv=${TURBOKV:-$here/../../../build/turbokv}
port=${PORT:-18091}
while ss -ltn | grep -q ":$port "; do sleep 1; done  # the last run's server may still be exiting
case $server in
  turbokv) "$turbokv" serve --model "$model" --kv-budget 264MiB --threads 2 --no-prefix-cache --port $port "$@" \
             > "/tmp/issue31-$name.server.log" 2>&1 & ;;
  llama) "${LLAMA_SERVER:-/work/llama.cpp-build/bin/llama-server}" -m "$model" -c 8960 -np 4 -fa -t 2 --port $port "$@" \
           > "/tmp/issue31-$name.server.log" 2>&1 & ;;
esac
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 300); do
  kill -0 $pid || { echo "$name: the server exited (/tmp/issue31-$name.server.log)"; exit 1; }
  curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
  sleep 1
done
case $workload in
  w1) args=(--concurrency 4 --requests 4) ;;
  arrivals) args=(--concurrency 4 --requests 6 --arrive-every 5) ;;
esac
echo "$(date -u +%H:%M:%S) $name: $server $workload $* (load $(cut -d' ' -f1-3 /proc/loadavg))" | tee -a "$here/runs.txt"
"$turbokv" serve-bench --url "http://127.0.0.1:$port" --prompt-tokens 2048 --max-tokens 192 "${args[@]}" --json \
  > "$here/$name.json"
echo "$(date -u +%H:%M:%S) $name done (load $(cut -d' ' -f1-3 /proc/loadavg))" | tee -a "$here/runs.txt"
