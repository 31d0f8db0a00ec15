#!/usr/bin/env bash
# The key prefetch (E) against the commit before it (A) at 32K, interleaved A then E in each round
# so the machine's drift touches both alike: decode-bench tq4-i8 vs dense16 with the CPU's widest
# kernels and with the AVX2 table, and attention-bench's 3-bit int8 vs fp16. Run from anywhere:
#   ab-32k.sh A_BINARY E_BINARY OUTDIR [ROUNDS]
set -euo pipefail
a=$1 e=$2 out=$3 rounds=${4:-3}
mkdir -p "$out"
lscpu > "$out/lscpu.txt"
decode() { "$1" decode-bench --synthetic llama-3.2-1b --weights q8_0 --context 32768 --kv dense16,tq4-i8 \
  --steps 32 --threads 2 --json; }
attention() { "$1" attention-bench --context 32768 --key-bits 3 --value-bits 3 --threads 2 --repeats 5 \
  --dequant-repeats 1 --json; }
for round in $(seq "$rounds"); do
  for side in A E; do
    bin=$a
    [ "$side" = E ] && bin=$e
    decode "$bin" > "$out/native-$side-$round.json" 2>/dev/null
    TURBOKV_NO_VNNI=1 TURBOKV_NO_AVX512=1 decode "$bin" > "$out/avx2-$side-$round.json" 2>/dev/null
    attention "$bin" > "$out/attention-$side-$round.json" 2>/dev/null
    TURBOKV_NO_VNNI=1 TURBOKV_NO_AVX512=1 attention "$bin" > "$out/attention-avx2-$side-$round.json" 2>/dev/null
    echo "round $round $side done $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  done
done
