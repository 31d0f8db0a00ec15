#!/usr/bin/env python3
"""Per layer and kv head: how unevenly the channels of keys and values carry their energy, from
a dense float32 prompt cache (issue 14's per-head diagnostic; standard library only).

  build/turbokv generate --prompt "$(head -c 420 models/kjv-revelation.txt | tr '\\n' ' ')" -n 1 \\
      --cache dense:dtype=f32 --save-cache /tmp/dense.safetensors --quiet
  scripts/kv-channel-stats.py /tmp/dense.safetensors

Columns (the first token, BOS, is left out): top8 = share of the mean squared magnitude in the 8
strongest channels (8/head_dim if even); mean/geo = arithmetic over geometric mean of the
channels' mean squares, i.e. how much MSE an ideal per-channel bit allocation (reverse
water-filling) could save over the rotated codec's even spread at the same bits, as a factor;
top channels = the 4 strongest.
"""
import array
import json
import math
import struct
import sys


def main(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    meta = header.pop("__metadata__")
    print("layer head part  top8  mean/geo  top channels")
    for layer in range(int(meta["n_layers"])):
        for part in ("keys", "values"):
            t = header.get(f"layers.{layer}.{part}")
            if t is None or t["dtype"] != "F32":
                sys.exit(f"layer {layer}: needs a dense f32 cache (--cache dense:dtype=f32)")
            heads, tokens, dim = t["shape"]
            begin, end = t["data_offsets"]
            x = array.array("f")
            x.frombytes(data[begin:end])
            for h in range(heads):
                ms = [0.0] * dim
                for tok in range(1, tokens):
                    base = (h * tokens + tok) * dim
                    for j in range(dim):
                        ms[j] += x[base + j] ** 2
                total = sum(ms) or 1.0
                order = sorted(range(dim), key=lambda j: -ms[j])
                top8 = sum(ms[j] for j in order[:8]) / total
                geo = math.exp(sum(math.log(max(m, 1e-30)) for m in ms) / dim)
                ratio = (total / dim) / geo
                print(f"{layer:5d} {h:4d} {part[0]:4s} {top8:5.2f} {ratio:9.2f}  {order[:4]}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
