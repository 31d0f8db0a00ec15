#!/usr/bin/env bash
# Draws the benchmark figures of docs/history/benchmarks-notebook.md (issue 6) as PNG files in
# docs/, with gnuplot, from the benchmarks' --json outputs saved under docs/data/:
#   docs/data/eval_kjv.json, docs/data/eval_stories.json   turbokv eval --json
#   docs/data/decode_llama-3.2-1b_q8_0.json                turbokv decode-bench --json
#   docs/data/attention_bench.jsonl                        turbokv attention-bench --json, one per line
# -> docs/quality_front.png, docs/decode_speed.png, docs/attention_speed.png
#
# Usage: scripts/plots.sh [--run-eval] [--run-decode] [--run-attention] [--run-all]
#   With no option it only draws from the saved JSON (seconds). A --run-* option first reruns
#   that benchmark and overwrites its JSON (on a 2-core machine: eval ~15 min, decode ~10 min,
#   attention ~10 min). Environment: TURBOKV (default build/turbokv), MODELS (default
#   models/), FORTUNES (default /usr/share/games/fortunes/kids), THREADS (default 0 = all).
# Needs: gnuplot (Debian gnuplot-nox), jq.
set -euo pipefail
cd "$(dirname "$0")/.."
TURBOKV=${TURBOKV:-build/turbokv}
MODELS=${MODELS:-$(dirname "$0")/../models}
FORTUNES=${FORTUNES:-/usr/share/games/fortunes/kids}
THREADS=${THREADS:-0}
DATA=${DATA:-docs/data}
mkdir -p "$DATA"

# The configurations of the quality tables (docs/history/benchmarks-notebook.md, "Quality:
# turbokv eval").
# TurboQuant names use norm correction (the default); -nonc rows show it off, -ctr rows exact
# centering on the mean of 8 exact first tokens.
EVAL_KV="dense16,tq8,tq4,tq3.5,tq3,tq2.5,tq2,k4v2,k4v3,k3v2,prod3,prod4,tq3w64,tq4w64,tq3s4,tq4s8,tq4s8-ctr,tq3s8-ctr,tq2s8-ctr,tq4-f32n,tq8-f32n,tq4-nonc,tq3.5-nonc,tq3-nonc,tq2.5-nonc,tq2-nonc,q8_0,q4_0,q8_0h,q4_0h,kivi2,kivi4,affine4,affine8"
# kjv only (saved separately as eval_kjv_extra.json, same text and token count): 2-bit affine,
# KIVI-2 without its fp16 residual.
EVAL_KV_EXTRA="affine2,kivi2r0"
KJV_TOKENS=0      # 0: the whole held-out text (32,907 tokens)
DECODE_KV="dense16,tq4,tq3"
DECODE_CONTEXTS="4096,8192,16384,32768"
ATTENTION_CONTEXTS="1024 4096 16384 32768"
ATTENTION_WIDTHS="2 3 4 8"

run_eval=0 run_decode=0 run_attention=0
for arg in "$@"; do
  case "$arg" in
    --run-eval) run_eval=1 ;;
    --run-decode) run_decode=1 ;;
    --run-attention) run_attention=1 ;;
    --run-all) run_eval=1 run_decode=1 run_attention=1 ;;
    -h|--help) sed -n 2,17p "$0"; exit 0 ;;
    *) echo "plots.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done
if (( run_eval + run_decode + run_attention > 0 )) && [[ ! -x "$TURBOKV" ]]; then
  echo "plots.sh: $TURBOKV not found (build it, or set TURBOKV)" >&2; exit 1
fi

if (( run_eval )); then
  "$TURBOKV" eval --model "$MODELS/kjv-llama-3M.bin" --text "$MODELS/kjv-revelation.txt" --max-tokens "$KJV_TOKENS" \
    --kv "$EVAL_KV" --threads "$THREADS" --json > "$DATA/eval_kjv.json.tmp"
  mv "$DATA/eval_kjv.json.tmp" "$DATA/eval_kjv.json"
  "$TURBOKV" eval --model "$MODELS/kjv-llama-3M.bin" --text "$MODELS/kjv-revelation.txt" --max-tokens "$KJV_TOKENS" \
    --kv "$EVAL_KV_EXTRA" --threads "$THREADS" --json > "$DATA/eval_kjv_extra.json.tmp"
  mv "$DATA/eval_kjv_extra.json.tmp" "$DATA/eval_kjv_extra.json"
  "$TURBOKV" eval --model "$MODELS/stories260K.bin" --tokenizer "$MODELS/tok512.bin" --text "$FORTUNES" \
    --kv "$EVAL_KV" --threads "$THREADS" --json > "$DATA/eval_stories.json.tmp"
  mv "$DATA/eval_stories.json.tmp" "$DATA/eval_stories.json"
fi
if (( run_decode )); then
  "$TURBOKV" decode-bench --synthetic llama-3.2-1b --weights q8_0 --context "$DECODE_CONTEXTS" \
    --kv "$DECODE_KV" --threads "$THREADS" --json > "$DATA/decode_llama-3.2-1b_q8_0.json.tmp"
  mv "$DATA/decode_llama-3.2-1b_q8_0.json.tmp" "$DATA/decode_llama-3.2-1b_q8_0.json"
fi
if (( run_attention )); then
  : > "$DATA/attention_bench.jsonl.tmp"
  for bits in $ATTENTION_WIDTHS; do
    for ctx in $ATTENTION_CONTEXTS; do
      "$TURBOKV" attention-bench --context "$ctx" --head-dim 128 --q-heads 32 --kv-heads 8 \
        --key-bits "$bits" --value-bits "$bits" --threads "$THREADS" --json >> "$DATA/attention_bench.jsonl.tmp"
    done
  done
  mv "$DATA/attention_bench.jsonl.tmp" "$DATA/attention_bench.jsonl"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
drawn=()

# family: 0 dense, 1 TurboQuant (tq*, k<A>v<B>*, prod*), 2 baselines.
eval_tsv() {
  jq -r '.rows[] | select(.bits_per_value != null and .kl > 0)
         | [.config, .bits_per_value, .kl, .logit_cosine,
            (if (.config | startswith("dense")) then 0
             elif (.config | test("^(tq|prod|k[0-9])")) then 1 else 2 end)] | @tsv' "$1"
}
model_title() {
  jq -r '"\(.model | split("/") | last), \(.tokens) tokens"' "$1"
}
if [[ -f "$DATA/eval_kjv.json" && -f "$DATA/eval_stories.json" ]]; then
  eval_tsv "$DATA/eval_kjv.json" > "$tmp/kjv.tsv"
  [[ -f "$DATA/eval_kjv_extra.json" ]] && eval_tsv "$DATA/eval_kjv_extra.json" >> "$tmp/kjv.tsv"
  eval_tsv "$DATA/eval_stories.json" > "$tmp/stories.tsv"
  gnuplot -e "left='$tmp/kjv.tsv'; left_title='$(model_title "$DATA/eval_kjv.json") (head_dim 64), Revelation (held out)'; \
              right='$tmp/stories.tsv'; right_title='$(model_title "$DATA/eval_stories.json") (head_dim 8), fortunes kids'; \
              out='docs/quality_front.png'" scripts/quality_front.gp
  drawn+=(docs/quality_front.png)
else
  echo "plots.sh: no eval JSON in $DATA (run with --run-eval); skipping quality_front.png" >&2
fi

decode_json="$DATA/decode_llama-3.2-1b_q8_0.json"
if [[ -f "$decode_json" ]]; then
  configs=$(jq -r '[.rows[].config] | unique | join(" ")' "$decode_json")
  # One data block per configuration (gnuplot "index"), two blank lines apart.
  for c in $configs; do
    jq -r --arg c "$c" '.rows[] | select(.config == $c and .tokens_per_s != null)
                        | [.config, .context, .tokens_per_s, .kv_bytes] | @tsv' "$decode_json"
    printf '\n\n'
  done > "$tmp/decode.tsv"
  gnuplot -e "data='$tmp/decode.tsv'; configs='$configs'; \
              model_title='decode, $(jq -r .model "$decode_json") (random weights, real shape), caches of synthetic K/V'; \
              out='docs/decode_speed.png'" scripts/decode_speed.gp
  drawn+=(docs/decode_speed.png)
else
  echo "plots.sh: no $decode_json (run with --run-decode); skipping decode_speed.png" >&2
fi

if [[ -f "$DATA/attention_bench.jsonl" ]]; then
  # CPU time / threads when the bench gives it (the wall clock of a loaded machine measures the
  # scheduler; see the fused-attention section of docs/history/benchmarks-notebook.md), else
  # wall time.
  jq -r '(.cpu // .) as $t | [(.key_bits | tostring), .context, $t.fp16_ms, $t.dequant_ms, $t.fused_ms] | @tsv' \
    "$DATA/attention_bench.jsonl" > "$tmp/attention.tsv"
  widths=$(jq -rs '[.[].key_bits | tostring] | unique | join(" ")' "$DATA/attention_bench.jsonl")
  shape=$(jq -rs '.[0] | "head_dim \(.head_dim), \(.q_heads) query / \(.kv_heads) KV heads, \(.threads) threads, \(if .cpu then "CPU time / threads" else "wall time" end)"' \
    "$DATA/attention_bench.jsonl")
  gnuplot -e "data='$tmp/attention.tsv'; widths='$widths'; shape_title='decode attention, $shape'; \
              out='docs/attention_speed.png'" scripts/attention_speed.gp
  drawn+=(docs/attention_speed.png)
else
  echo "plots.sh: no $DATA/attention_bench.jsonl (run with --run-attention); skipping attention_speed.png" >&2
fi

echo "plots.sh: drew ${drawn[*]:-nothing}"
