"""Python overhead of a decode step (docs/benchmarks.md, "Python binding overhead").

One decode token into a TurboQuant cache of TOKENS tokens (8 kv heads, head_dim 128, 32 query
heads, 4 bits): ``update_and_fetch`` (append + dequantize the whole cache into new numpy
arrays, as mlx-lm's call returns) and ``turbokv.attention`` (the fused kernel on the codes),
against the same C++ calls (python/bench/decode_step_cpp.cpp, fetch into reused buffers).
Rounds alternate C++ and Python so a loaded machine slows both alike; the ratio of medians is
what counts.

    PYTHONPATH=build/python /usr/bin/python3 python/bench/overhead.py build/python/turbokv_decode_step_cpp
"""
import json
import statistics
import subprocess
import sys
import time

import numpy as np

import turbokv

TOKENS, KV_HEADS, Q_HEADS, HEAD_DIM, BITS = 4096, 8, 32, 128, 4
REPS, ROUNDS = 30, 5


def python_round(cache, rng):
    k1 = rng.standard_normal((1, KV_HEADS, 1, HEAD_DIM)).astype(np.float32)
    v1 = rng.standard_normal((1, KV_HEADS, 1, HEAD_DIM)).astype(np.float32)
    q = rng.standard_normal((1, Q_HEADS, 1, HEAD_DIM)).astype(np.float32)
    step, attend = [], []
    for _ in range(REPS):
        t0 = time.perf_counter()
        keys, values = cache.update_and_fetch(k1, v1)
        t1 = time.perf_counter()
        out = turbokv.attention(q, cache)
        t2 = time.perf_counter()
        cache.trim(1)
        step.append(t1 - t0)
        attend.append(t2 - t1)
        del keys, values, out
    return 1e3 * statistics.median(step), 1e3 * statistics.median(attend)


def main():
    cpp_tool = sys.argv[1]
    rng = np.random.default_rng(7)
    cache = turbokv.TurboQuantKVCache(bits=BITS)
    k = rng.standard_normal((1, KV_HEADS, TOKENS - 1, HEAD_DIM)).astype(np.float32)
    cache.update_and_fetch(k, rng.standard_normal(k.shape).astype(np.float32))
    rows = []
    for _ in range(ROUNDS):
        cpp = json.loads(subprocess.run([cpp_tool, str(TOKENS), str(KV_HEADS), str(Q_HEADS), str(HEAD_DIM), str(BITS),
                                         str(REPS)], check=True, capture_output=True, text=True).stdout)
        py_step, py_attend = python_round(cache, rng)
        rows.append((cpp["update_and_fetch_ms"], py_step, cpp["attention_ms"], py_attend))
    med = [statistics.median(r[i] for r in rows) for i in range(4)]
    print(json.dumps({"tokens": TOKENS, "kv_heads": KV_HEADS, "q_heads": Q_HEADS, "head_dim": HEAD_DIM, "bits": BITS,
                      "cpp_update_and_fetch_ms": round(med[0], 3), "py_update_and_fetch_ms": round(med[1], 3),
                      "update_and_fetch_ratio": round(med[1] / med[0], 3),
                      "cpp_attention_ms": round(med[2], 3), "py_attention_ms": round(med[3], 3),
                      "attention_ratio": round(med[3] / med[2], 3),
                      "rounds": [[round(x, 3) for x in r] for r in rows]}))


if __name__ == "__main__":
    main()
