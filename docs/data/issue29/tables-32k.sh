#!/bin/bash
# Issue 29's two kernel bars on every integer table of one machine, the same binary, tables
# interleaved in each round (env switches pick them): decode-bench tq4-i8 / dense16 at 32K (bar
# 1.45x) and attention-bench 3-bit int8 / fp16 at 32K, head_dim 64 (bar 1.6x). Tables: native
# (the widest the CPU has), avx-vnni (TURBOKV_NO_AVX512=1; on a CPU with AVX-VNNI), avx2
# (TURBOKV_NO_VNNI=1 TURBOKV_NO_AVX512=1). Usage: tables-32k.sh TURBOKV OUTDIR ROUNDS [CACHES]
# CACHES (default 1): caches of each configuration in one decode-bench process (stepped in
# turn, A B A B ...); a configuration's step is the mean of its caches' median steps. On a
# 2-vCPU Zen 5 VM two dense16 caches of one process stepped in turn differed by up to 11% (where
# their pages landed), so one cache a round made the ratio swing more than the caches it
# compares.
set -euo pipefail
bin=$1 out=$2 rounds=${3:-3} caches=${4:-1}
kv=$(for i in $(seq 1 "$caches"); do printf 'dense16,tq4-i8,'; done)
kv=${kv%,}
mkdir -p "$out"
lscpu > "$out/lscpu.txt"
for r in $(seq 1 "$rounds"); do
  for table in native avx-vnni avx2; do
    case $table in
      native) env=() ;;
      avx-vnni) env=(TURBOKV_NO_AVX512=1) ;;
      avx2) env=(TURBOKV_NO_VNNI=1 TURBOKV_NO_AVX512=1) ;;
    esac
    env "${env[@]}" "$bin" decode-bench --synthetic llama-3.2-1b --weights q8_0 --context 32768 \
      --kv "$kv" --steps 32 --threads 2 --json --quiet > "$out/decode-$table-$r.json"
    env "${env[@]}" "$bin" attention-bench --context 32768 --head-dim 64 --key-bits 3 --value-bits 3 \
      --threads 2 --repeats 5 --dequant-repeats 1 --json > "$out/attention-$table-$r.json"
  done
done
/usr/bin/python3 - "$out" "$rounds" <<'PY' | tee "$out/summary.md"
import json, sys
from collections import defaultdict
out, rounds = sys.argv[1], int(sys.argv[2])
print("| round | table | dense16 ms/step | tq4-i8 ms/step | tq4-i8 / dense16 | int8 3-bit ms/layer | fp16 ms/layer | int8 / fp16 |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
for r in range(1, rounds + 1):
    for t in ("native", "avx-vnni", "avx2"):
        steps = defaultdict(list)
        for row in json.load(open(f"{out}/decode-{t}-{r}.json"))["rows"]:
            steps[row["config"]].append(row["step_ms"])
        d = {config: sum(ms) / len(ms) for config, ms in steps.items()}
        a = json.load(open(f"{out}/attention-{t}-{r}.json"))
        print(f"| {r} | {t} | {d['dense16']:.1f} | {d['tq4-i8']:.1f} | {d['dense16'] / d['tq4-i8']:.3f} | "
              f"{a['int8_ms']:.2f} | {a['fp16_ms']:.2f} | {a['fp16_ms'] / a['int8_ms']:.2f} |")
PY
