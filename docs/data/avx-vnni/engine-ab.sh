#!/bin/bash
# The engine's Q8_0 products on a CPU with AVX-VNNI and no AVX-512 (Alder Lake and later Intel
# client cores), timed on a machine that has both: the same binary, env switches picking the
# kernels, interleaved. avx2: TURBOKV_NO_VNNI=1 TURBOKV_NO_AVX512=1 (the AVX2 four-activation
# kernel: what such a CPU ran before the VEX kernel); avx-vnni: TURBOKV_NO_AVX512=1 (the VEX
# vpdpbusd kernel). Prefill of a 434-token prompt (generate, dense16 cache) and batched decode
# steps of 4 and 16 sequences at 128 tokens (decode-bench). Usage, from the checkout root:
#   engine-ab.sh TURBOKV GGUF OUTDIR ROUNDS
# GGUF: the random Llama-3.2-1B-shaped Q8_0 file models/README.md says how to write.
set -euo pipefail
bin=$1 gguf=$2 out=$3 rounds=${4:-3}
mkdir -p "$out"
lscpu > "$out/lscpu.txt"
prompt=$(head -c 480 models/kjv-revelation.txt)
for r in $(seq 1 "$rounds"); do
  for kernels in avx2 avx-vnni; do
    if [ "$kernels" = avx2 ]; then env=(TURBOKV_NO_VNNI=1 TURBOKV_NO_AVX512=1); else env=(TURBOKV_NO_AVX512=1); fi
    env "${env[@]}" "$bin" generate --model "$gguf" --prompt "$prompt" -n 1 --cache dense16 --threads 2 --json \
      > "$out/prefill-$kernels-$r.json"
    env "${env[@]}" "$bin" decode-bench --synthetic llama-3.2-1b --weights q8_0 --context 128 --kv dense16 \
      --batch 4,16 --steps 6 --threads 2 --json --quiet > "$out/batch-$kernels-$r.json"
  done
done
/usr/bin/python3 - "$out" "$rounds" <<'PY' | tee "$out/summary.md"
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
print("| round | kernels | prefill, 434 tokens (tokens/s) | step of 4 (ms) | step of 16 (ms) |")
print("|---|---|---:|---:|---:|")
for r in range(1, rounds + 1):
    for k in ("avx2", "avx-vnni"):
        p = json.load(open(f"{out}/prefill-{k}-{r}.json"))
        b = {row["batch"]: row["step_ms"] for row in json.load(open(f"{out}/batch-{k}-{r}.json"))["rows"]}
        print(f"| {r} | {k} | {p['prompt_tokens_per_s']:.1f} | {b[4]:.1f} | {b[16]:.1f} |")
PY
