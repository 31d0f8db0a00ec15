#!/usr/bin/env bash
# Where a TurboQuant cache's logit KL comes from (issue 14): for each layer, keys and values
# separately, quantize only that layer's keys (values at 8 bits, about exact) or only its values,
# every other layer dense, and print the KL of `turbokv eval` per width. The contributions add
# up (to within ~10%) to the KL of quantizing everything, so the table drives the per-layer
# widths of the tq3.5 / tq4 schemes (docs/history/benchmarks-notebook.md, "Where the KL comes
# from").
#   scripts/kl-sources.sh [BUILD_DIR] [EXTRA]   EXTRA: options of every configuration,
#   default sinks=1,window=4,exact=f16 (the schemes' exact regions); "" for none.
set -euo pipefail
build=${1:-build}
extra=${2-sinks=1,window=4,exact=f16}
models=${TURBOKV_MODELS_DIR:-$(dirname "$0")/../models}
model=$models/kjv-llama-3M.bin
text=$models/kjv-revelation.txt
layers=${LAYERS:-4}
widths=${WIDTHS:-2 2.5 3 3.5 4 4.5 5}
printf '%-6s %-6s' layer part; for b in $widths; do printf ' %8s' "${b}b"; done; echo
for ((l = 0; l < layers; ++l)); do
  others=$(seq 0 $((layers - 1)) | grep -vx "$l" | paste -sd';')
  for part in keys values; do
    list=""
    for b in $widths; do
      if [[ $part == keys ]]; then kb=$b vb=8; else kb=8 vb=$b; fi
      list+=",turboquant:key_bits=$kb,value_bits=$vb,${extra:+$extra,}dense_layers=$others"
    done
    json=$("$build/turbokv" eval --model "$model" --text "$text" --max-tokens 2040 --threads 2 --no-progress --json --kv "${list#,}")
    printf '%-6s %-6s' "$l" "$part"
    python3 -c 'import json,sys; print("".join(" %8.2e" % r["kl"] for r in json.load(sys.stdin)["rows"]))' <<<"$json"
  done
done
