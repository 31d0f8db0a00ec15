#!/bin/bash
# The block loop's page lookups and exp skip (4600d04) and the spill-free 3-bit value block
# (c0a063d), E, against 053bfbf, A, on the AVX2 table and the native one, interleaved A then E
# in each round: decode-bench tq4-i8 / dense16 at 32K. Usage: ab.sh A_BINARY E_BINARY OUTDIR ROUNDS
set -euo pipefail
a=$1 e=$2 out=$3 rounds=${4:-5}
mkdir -p "$out"
lscpu > "$out/lscpu.txt"
for r in $(seq 1 "$rounds"); do
  for table in avx2 native; do
    env=()
    [ "$table" = avx2 ] && env=(TURBOKV_NO_VNNI=1 TURBOKV_NO_AVX512=1)
    for s in A E; do
      bin=$a
      [ "$s" = E ] && bin=$e
      env "${env[@]}" "$bin" decode-bench --synthetic llama-3.2-1b --weights q8_0 --context 32768 \
        --kv dense16,tq4-i8 --steps 32 --threads 2 --json --quiet > "$out/decode-$table-$s-$r.json"
    done
  done
done
/usr/bin/python3 - "$out" "$rounds" <<'PY' | tee "$out/summary.md"
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
print("| round | table | A dense16 ms | A tq4-i8 ms | A ratio | E dense16 ms | E tq4-i8 ms | E ratio |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
for r in range(1, rounds + 1):
    for t in ("avx2", "native"):
        cells = []
        for s in ("A", "E"):
            d = {row["config"]: row["step_ms"] for row in json.load(open(f"{out}/decode-{t}-{s}-{r}.json"))["rows"]}
            cells += [f"{d['dense16']:.1f}", f"{d['tq4-i8']:.1f}", f"{d['dense16'] / d['tq4-i8']:.3f}"]
        print(f"| {r} | {t} | " + " | ".join(cells) + " |")
PY
