"""Memory: nbytes is the C++ accounting (turboquant_cache.hpp) and real compression."""
import numpy as np

import turbokv
from conftest import random_kv


def test_turboquant_nbytes_matches_cpp_accounting(rng):
    kv_heads, head_dim, tokens = 8, 128, 1000
    cache = turbokv.TurboQuantKVCache(bits=4, window=16, sinks=2)
    cache.update_and_fetch(*random_kv(rng, tokens=tokens, kv_heads=kv_heads, head_dim=head_dim))
    code = turbokv.TurboQuantMse(head_dim, bits=4).code_size
    assert code == head_dim * 4 // 8 + 2
    compressed = tokens - 16 - 2
    # nbytes = kv_heads * (compressed * (key + value code) + exact tokens * head_dim * 4 * 2)
    expected = kv_heads * (compressed * 2 * code + (16 + 2) * head_dim * 4 * 2)
    assert cache.nbytes == expected


def test_four_bits_at_least_3_5x_below_fp16(rng):
    kv_heads, head_dim, tokens = 8, 128, 2048
    keys, values = random_kv(rng, tokens=tokens, kv_heads=kv_heads, head_dim=head_dim)
    tq = turbokv.TurboQuantKVCache(bits=4)
    dense = turbokv.KVCache()  # fp16 storage
    tq.update_and_fetch(keys, values)
    dense.update_and_fetch(keys, values)
    assert dense.nbytes == tokens * kv_heads * head_dim * 2 * 2
    ratio = dense.nbytes / tq.nbytes
    assert ratio >= 3.5, f"4-bit cache only {ratio:.2f}x below fp16"
    # The codes, not floats, are what is held: the fetched float32 copy is 8x the fp16 bytes.
    k, v = tq.fetch()
    assert k.nbytes + v.nbytes > 7 * tq.nbytes
