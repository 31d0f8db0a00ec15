# Sourced by the serve-bench run scripts (docs/data/issue29/run.sh, docs/data/issue31/run.sh).
#
# start_server PORT LOG COMMAND...: waits for PORT to be free (the last run's server may still be
# exiting, and its connections linger in TIME_WAIT for up to a minute, which an older
# llama-server, without SO_REUSEADDR, cannot bind past), starts COMMAND in the background with
# its output in LOG, stops it when the calling script exits, and returns once
# http://127.0.0.1:PORT/health answers; exits 1 if the server dies or never answers.
start_server() {
  local port=$1 log=$2
  shift 2
  for _ in $(seq 120); do ss -tan | grep -q ":$port " || break; sleep 1; done
  "$@" > "$log" 2>&1 &
  server_pid=$!
  trap 'kill $server_pid 2>/dev/null; wait $server_pid 2>/dev/null || true' EXIT
  for _ in $(seq 300); do
    kill -0 "$server_pid" 2>/dev/null || { echo "the server exited ($log)" >&2; exit 1; }
    curl -sf "http://127.0.0.1:$port/health" >/dev/null && return 0
    sleep 1
  done
  echo "the server did not answer /health within 300 s ($log)" >&2
  exit 1
}

# record_run RUNS JSON LABEL COMMAND...: runs COMMAND (a serve-bench --json) into JSON, with its
# start and end times and the load average appended to the RUNS log.
record_run() {
  local runs=$1 json=$2 label=$3
  shift 3
  echo "$(date -u +%H:%M:%S) $label (load $(cut -d' ' -f1-3 /proc/loadavg))" | tee -a "$runs"
  "$@" > "$json"
  echo "$(date -u +%H:%M:%S) ${label%%:*} done (load $(cut -d' ' -f1-3 /proc/loadavg))" | tee -a "$runs"
}
