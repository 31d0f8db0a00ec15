#!/usr/bin/env bash
# turbokv's logits against llama.cpp's on random-weight GGUFs, one per family (issue 27).
#
#   scripts/compare-llamacpp.sh LLAMA_CPP_BUILD [--src LLAMA_CPP_SOURCE] [--type f32|f16|q8_0]
#                               [--out DIR] [--ctx N] [--chunks N] [FAMILY...]
#
# For each family (default: all of `scripts/compare_llamacpp.py families`):
#   1. scripts/compare_llamacpp.py writes a random-weight GGUF with llama.cpp's gguf-py
#      (from LLAMA_CPP_SOURCE/gguf-py; default: the build's CMakeCache source dir);
#   2. llama-perplexity runs its perplexity protocol on models/kjv-revelation.txt (chunks of
#      --ctx tokens, BOS first, second half scored), 2 threads, f32 KV cache, and saves its
#      per-token distributions (--kl-divergence-base);
#   3. turbokv eval runs the same protocol on llama.cpp's own token ids (--ids, read from that
#      file) with the dense fp32 cache and serve's default TurboQuant cache (tq4), 2 threads, and
#      writes its dense distributions in llama.cpp's format (--logits-out);
#   4. the helper compares the two files: top-1 agreement, KL(llama.cpp || turbokv); and whether
#      turbokv's own tokenizer (`turbokv tokenize`, the whole text with BOS) gives llama.cpp's ids
#      (not needed for the comparison, which uses llama.cpp's ids; reported as a check).
# Prints one markdown table row per family; files and logs stay in --out (default a temp dir).
# The bars (issue 27): |ppl difference| <= 0.3%, top-1 agreement >= 99%; the exit status is 1 if
# a family misses one (families named in KNOWN_DIFFERENT below are reported, not judged).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
py=/usr/bin/python3

[[ $# -ge 1 ]] || { sed -n '2,20p' "$0"; exit 2; }
build="$1"; shift
src="" type=f32 out="" ctx=128 chunks=16 families=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --src) src="$2"; shift 2 ;;
    --type) type="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --ctx) ctx="$2"; shift 2 ;;
    --chunks) chunks="$2"; shift 2 ;;
    -*) echo "unknown option $1" >&2; exit 2 ;;
    *) families+=("$1"); shift ;;
  esac
done
perplexity="$build/bin/llama-perplexity"
[[ -x "$perplexity" ]] || { echo "no $perplexity (build llama.cpp's llama-perplexity target)" >&2; exit 2; }
if [[ -z "$src" ]]; then
  src="$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt" 2>/dev/null || true)"
fi
[[ -d "$src/gguf-py/gguf" ]] || { echo "no gguf-py under '$src' (pass --src LLAMA_CPP_SOURCE)" >&2; exit 2; }
turbokv="${TURBOKV:-$root/build/turbokv}"
[[ -x "$turbokv" ]] || { echo "no $turbokv (run scripts/build.sh)" >&2; exit 2; }
[[ ${#families[@]} -gt 0 ]] || mapfile -t families < <("$py" "$here/compare_llamacpp.py" families)
[[ -n "$out" ]] || out="$(mktemp -d /tmp/turbokv-vs-llamacpp.XXXXXX)"
mkdir -p "$out"
text="$root/models/kjv-revelation.txt"
# Families whose difference from llama.cpp is by design, reported but not held to the bars:
# llama.cpp's `llama` graph ignores attention.sliding_window, turbokv honours it.
KNOWN_DIFFERENT=" mistral-w32 "

commit="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
llama_commit="$(git -C "$src" rev-parse --short=12 HEAD 2>/dev/null || head -c 12 "$src/COMMIT" 2>/dev/null || echo unknown)"
echo "turbokv $commit, llama.cpp $llama_commit ($build), weights $type, ctx $ctx, $chunks chunks, 2 threads; files in $out"
echo
echo "| family | ppl llama.cpp | ppl turbokv | difference | top-1 agreement (positions) | KL(llama.cpp ‖ turbokv) mean / max | entropy / log V | turbokv tq4 vs dense: KL mean / max, top-1 | same ids | verdict |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---|---|"
failed=0
for fam in "${families[@]}"; do
  base="$out/$fam-$type"
  PYTHONPATH="$src/gguf-py" "$py" "$here/compare_llamacpp.py" write "$fam" "$base.gguf" --type "$type"
  # The distributions from one run, the perplexity from plain ones: at this commit llama-perplexity
  # sometimes exits before its asynchronous log prints the last lines (always, with
  # --kl-divergence-base), so a plain run is repeated (6 tries) until "Final estimate" is there.
  llama_args=(-m "$base.gguf" -f "$text" -c "$ctx" -b "$ctx" --chunks "$chunks" -t 2 -tb 2 -ctk f32 -ctv f32)
  "$perplexity" "${llama_args[@]}" --kl-divergence-base "$base.llama.kld" >"$base.llama-kld.log" 2>&1 \
    || { echo "| $fam | llama-perplexity failed: see $base.llama-kld.log |"; failed=1; continue; }
  ppl_llama=""
  for _ in 1 2 3 4 5 6; do
    "$perplexity" "${llama_args[@]}" >"$base.llama.log" 2>&1 || break
    ppl_llama="$(sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p' "$base.llama.log")"
    [[ -z "$ppl_llama" ]] || break
  done
  [[ -n "$ppl_llama" ]] || { echo "| $fam | no final estimate in $base.llama.log |"; failed=1; continue; }
  "$py" "$here/compare_llamacpp.py" ids "$base.llama.kld" "$base.ids"
  "$turbokv" eval --model "$base.gguf" --ids "$base.ids" --ctx "$ctx" --windows llama-perplexity \
      --kv tq4 --threads 2 --no-progress --json --logits-out "$base.turbokv.kld" >"$base.turbokv.json" 2>"$base.turbokv.log" \
    || { echo "| $fam | turbokv eval failed: $(tail -1 "$base.turbokv.log") |"; failed=1; continue; }
  "$py" "$here/compare_llamacpp.py" compare "$base.llama.kld" "$base.turbokv.kld" >"$base.compare.json"
  "$turbokv" tokenize --tokenizer "$base.gguf" --text "$(cat "$text")" >"$base.turbokv.ids"
  "$py" - "$fam" "$ppl_llama" "$base.turbokv.json" "$base.compare.json" "$KNOWN_DIFFERENT" "$base.ids" "$base.turbokv.ids" <<'EOF' || failed=1
import json, sys
fam, ppl_llama, tk, cmp, known = sys.argv[1], float(sys.argv[2]), json.load(open(sys.argv[3])), json.load(open(sys.argv[4])), sys.argv[5]
llama_ids, own_ids = open(sys.argv[6]).read().split(), open(sys.argv[7]).read().split()
same = "yes" if own_ids[:len(llama_ids)] == llama_ids else "no"
ppl = tk["ppl_reference"]
tq = tk["rows"][0]
rel = ppl / ppl_llama - 1
ok = abs(rel) <= 0.003 and cmp["top1_agreement"] >= 0.99
verdict = "different by design" if f" {fam} " in known else ("within the bars" if ok else "**outside the bars**")
print(f"| {fam} | {ppl_llama:.4f} | {ppl:.4f} | {100 * rel:+.4f}% | {100 * cmp['top1_agreement']:.2f}% "
      f"({cmp['positions']}) | {cmp['kl_mean']:.2e} / {cmp['kl_max']:.2e} | "
      f"{cmp['entropy_mean']:.2f} / {cmp['log_vocab']:.2f} | {tq['kl']:.2e} / {tq['kl_max']:.2e}, "
      f"{100 * tq['top1_agreement']:.1f}% | {same} | {verdict} |")
sys.exit(0 if ok or f" {fam} " in known else 1)
EOF
done
exit "$failed"
