#!/bin/bash
# The AVX-VNNI integer table against the AVX2 one, the same binary on one machine with AVX-VNNI
# (env switches pick the table), interleaved: attention-bench int8 at 32K (head_dim 64, 3 and 4
# bits) and decode-bench tq4-i8 / dense16 at 32K. Usage: ab.sh TURBOKV OUTDIR ROUNDS
set -euo pipefail
bin=$1 out=$2 rounds=${3:-3}
mkdir -p "$out"
lscpu > "$out/lscpu.txt"
for r in $(seq 1 "$rounds"); do
  for table in avx2 avx-vnni; do
    if [ "$table" = avx2 ]; then env=(TURBOKV_NO_VNNI=1 TURBOKV_NO_AVX512=1); else env=(TURBOKV_NO_AVX512=1); fi
    for bits in 3 4; do
      env "${env[@]}" "$bin" attention-bench --context 32768 --head-dim 64 --key-bits $bits --value-bits $bits \
        --threads 2 --repeats 5 --dequant-repeats 1 --json > "$out/attention-$table-$bits-$r.json"
    done
    env "${env[@]}" "$bin" decode-bench --synthetic llama-3.2-1b --weights q8_0 --context 32768 \
      --kv dense16,tq4-i8 --steps 16 --threads 2 --json --quiet > "$out/decode-$table-$r.json"
  done
done
python3 - "$out" "$rounds" <<'PY'
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
print("| round | table | int8 3-bit ms/layer (x fp16) | int8 4-bit ms/layer (x fp16) | decode dense16 ms | tq4-i8 ms | ratio |")
print("|---|---|---:|---:|---:|---:|---:|")
for r in range(1, rounds + 1):
    for table in ("avx2", "avx-vnni"):
        a = [json.load(open(f"{out}/attention-{table}-{b}-{r}.json")) for b in (3, 4)]
        d = {row["config"]: row["step_ms"] for row in json.load(open(f"{out}/decode-{table}-{r}.json"))["rows"]}
        cells = [f"{x['int8_ms']:.2f} ({x['fp16_ms'] / x['int8_ms']:.2f}x)" for x in a]
        print(f"| {r} | {table} | {cells[0]} | {cells[1]} | {d['dense16']:.1f} | {d['tq4-i8']:.1f} | {d['dense16'] / d['tq4-i8']:.3f} |")
PY
