"""Heavy calls release the GIL; the per-cache lock keeps concurrent Python threads on the same
cache safe (one writer or many readers), and distinct caches independent."""
import threading

import numpy as np

import turbokv
from conftest import random_kv


def test_threads_share_one_cache():
    rng = np.random.default_rng(5)
    cache = turbokv.TurboQuantKVCache(bits=4)
    cache.update_and_fetch(*random_kv(rng, tokens=256, kv_heads=2, head_dim=64))
    steps, errors = 20, []

    def worker(seed):
        r = np.random.default_rng(seed)
        try:
            for _ in range(steps):
                k, v = cache.update_and_fetch(*random_kv(r, tokens=1, kv_heads=2, head_dim=64))
                assert k.shape[2] >= 257 and np.isfinite(k).all()
                out = turbokv.attention(r.standard_normal((1, 4, 1, 64)).astype(np.float32), cache)
                assert np.isfinite(out).all()
        except Exception as e:  # reported to the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert cache.offset == 256 + 4 * steps


def test_gil_is_released_during_attention():
    """A Python thread keeps running while another is inside a long attention call."""
    rng = np.random.default_rng(6)
    cache = turbokv.TurboQuantKVCache(bits=4)
    cache.update_and_fetch(*random_kv(rng, tokens=4096, kv_heads=8, head_dim=128))
    queries = rng.standard_normal((1, 32, 64, 128)).astype(np.float32)
    done = threading.Event()
    ticks = 0

    def attend():
        for _ in range(3):
            turbokv.attention(queries, cache, threads=1)
        done.set()

    t = threading.Thread(target=attend)
    t.start()
    while not done.is_set():
        ticks += 1
        done.wait(0.001)
    t.join()
    assert ticks > 5, f"the main thread ran only {ticks} times while attention ran"
