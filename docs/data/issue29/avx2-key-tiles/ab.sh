#!/bin/bash
# One group of eight tokens a pass in the AVX2 int8 key tiles (E) against two (A), the AVX2 table
# forced, interleaved A then E in each round: decode-bench tq4-i8 / dense16 at 32K and
# attention-bench 3-bit int8 at 32K, head_dim 64. Usage: ab.sh A_BINARY E_BINARY OUTDIR ROUNDS
# (the files here: A = b27f0f9's build "H", E = 61bbeb0's kernel "T1b"; 5 rounds).
set -euo pipefail
a=$1 e=$2 out=$3 rounds=${4:-5}
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
  for s in H T1b; do
    bin=$a
    [ "$s" = T1b ] && bin=$e
    TURBOKV_NO_VNNI=1 TURBOKV_NO_AVX512=1 "$bin" decode-bench --synthetic llama-3.2-1b --weights q8_0 --context 32768 \
      --kv dense16,tq4-i8 --steps 32 --threads 2 --json --quiet > "$out/decode-$s-$r.json"
    TURBOKV_NO_VNNI=1 TURBOKV_NO_AVX512=1 "$bin" attention-bench --context 32768 --head-dim 64 --key-bits 3 \
      --value-bits 3 --threads 2 --repeats 5 --dequant-repeats 1 --json > "$out/attention-$s-$r.json"
  done
done
/usr/bin/python3 - "$out" "$rounds" <<'PY' | tee "$out/summary.md"
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
print("| round | kernel | dense16 ms | tq4-i8 ms | ratio | int8 3-bit ms/layer | x fp16 |")
print("|---|---|---:|---:|---:|---:|---:|")
for r in range(1, rounds + 1):
    for s in ("H", "T1b"):
        d = {row["config"]: row["step_ms"] for row in json.load(open(f"{out}/decode-{s}-{r}.json"))["rows"]}
        a = json.load(open(f"{out}/attention-{s}-{r}.json"))
        print(f"| {r} | {s} | {d['dense16']:.1f} | {d['tq4-i8']:.1f} | {d['dense16'] / d['tq4-i8']:.3f} | "
              f"{a['int8_ms']:.2f} | {a['fp16_ms'] / a['int8_ms']:.2f} |")
PY
