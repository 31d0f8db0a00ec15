"""Python overhead of a decode step (docs/history/benchmarks-notebook.md, "Python binding").

One decode token into a TurboQuant cache of TOKENS tokens (8 kv heads, head_dim 128, 32 query
heads, 4 bits): ``update_and_fetch`` (append + dequantize the whole cache into new numpy
arrays, as mlx-lm's call returns) and ``turbokv.attention`` (the fused kernel on the codes),
against the same C++ calls (python/bench/decode_step_cpp.cpp, fetch into reused buffers).
Rounds alternate C++ and Python so a loaded machine slows both alike; the ratio of medians is
what counts.

    PYTHONPATH=build/python /usr/bin/python3 python/bench/overhead.py build/python/turbokv_decode_step_cpp [THREADS]
"""
import json
import statistics
import subprocess
import sys
import time

import numpy as np

import turbokv

TOKENS, KV_HEADS, Q_HEADS, HEAD_DIM, BITS = 4096, 8, 32, 128, 4
# One attention thread on both sides: the split over cores is the same code either way, and on
# a shared machine a second thread mostly measures the scheduler.
THREADS = int(sys.argv[2]) if len(sys.argv) > 2 else 1
REPS, ROUNDS = 20, 9


def python_round(cache, rng):
    """Medians (ms) of wall and thread-CPU time of update_and_fetch and attention."""
    k1 = rng.standard_normal((1, KV_HEADS, 1, HEAD_DIM)).astype(np.float32)
    v1 = rng.standard_normal((1, KV_HEADS, 1, HEAD_DIM)).astype(np.float32)
    q = rng.standard_normal((1, Q_HEADS, 1, HEAD_DIM)).astype(np.float32)
    times = {name: [] for name in ("update_and_fetch_ms", "attention_ms", "update_and_fetch_cpu_ms", "attention_cpu_ms")}
    for _ in range(REPS):
        t0, c0 = time.perf_counter(), time.thread_time()
        keys, values = cache.update_and_fetch(k1, v1)
        t1, c1 = time.perf_counter(), time.thread_time()
        out = turbokv.attention(q, cache, threads=THREADS)
        t2, c2 = time.perf_counter(), time.thread_time()
        cache.trim(1)
        times["update_and_fetch_ms"].append(t1 - t0)
        times["attention_ms"].append(t2 - t1)
        times["update_and_fetch_cpu_ms"].append(c1 - c0)
        times["attention_cpu_ms"].append(c2 - c1)
        del keys, values, out
    return {name: 1e3 * statistics.median(values) for name, values in times.items()}


def main():
    cpp_tool = sys.argv[1]
    rng = np.random.default_rng(7)
    cache = turbokv.TurboQuantKVCache(bits=BITS)
    k = rng.standard_normal((1, KV_HEADS, TOKENS - 1, HEAD_DIM)).astype(np.float32)
    cache.update_and_fetch(k, rng.standard_normal(k.shape).astype(np.float32))
    cpp_rounds, py_rounds = [], []
    for _ in range(ROUNDS):
        cpp_rounds.append(json.loads(subprocess.run(
            [cpp_tool, str(TOKENS), str(KV_HEADS), str(Q_HEADS), str(HEAD_DIM), str(BITS), str(REPS), str(THREADS)],
            check=True, capture_output=True, text=True).stdout))
        py_rounds.append(python_round(cache, rng))
    result = {"tokens": TOKENS, "kv_heads": KV_HEADS, "q_heads": Q_HEADS, "head_dim": HEAD_DIM, "bits": BITS,
              "threads": THREADS, "rounds": ROUNDS, "reps": REPS}
    for name in cpp_rounds[0]:
        cpp = statistics.median(r[name] for r in cpp_rounds)
        py = statistics.median(r[name] for r in py_rounds)
        result[name] = {"cpp": round(cpp, 3), "python": round(py, 3), "ratio": round(py / cpp, 3)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
