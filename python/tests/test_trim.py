"""trim: counts, offsets, and trim-then-append equal to never having appended."""
import numpy as np
import pytest

import turbokv
from conftest import random_kv


@pytest.mark.parametrize("make", [lambda: turbokv.TurboQuantKVCache(bits=4, sinks=2),
                                  lambda: turbokv.KVCache()])
def test_trim_then_append_equals_never_appended(rng, make):
    keys, values = random_kv(rng, tokens=50, kv_heads=2, head_dim=64)
    a, b = make(), make()
    a.update_and_fetch(keys[:, :, :30], values[:, :, :30])
    a.update_and_fetch(keys[:, :, 30:45], values[:, :, 30:45])
    assert a.trim(15) == 15 and a.offset == 30
    ka, va = a.update_and_fetch(keys[:, :, 30:], values[:, :, 30:])
    kb, vb = b.update_and_fetch(keys, values)
    np.testing.assert_array_equal(ka, kb)
    np.testing.assert_array_equal(va, vb)
    assert a.nbytes == b.nbytes
    for name, array in b.state.items():
        np.testing.assert_array_equal(a.state[name], array)


def test_trim_more_than_held_and_zero(rng):
    cache = turbokv.TurboQuantKVCache(bits=3)
    keys, values = random_kv(rng, tokens=10, kv_heads=1, head_dim=64)
    cache.update_and_fetch(keys, values)
    assert cache.trim(0) == 0 and cache.offset == 10
    assert cache.trim(25) == 10
    assert cache.offset == 0 and cache.empty() and cache.nbytes == 0


def test_trim_frees_memory(rng):
    cache = turbokv.TurboQuantKVCache(bits=4)
    keys, values = random_kv(rng, tokens=600, kv_heads=2, head_dim=128)
    cache.update_and_fetch(keys, values)
    full = cache.nbytes
    cache.trim(300)
    assert cache.nbytes == full // 2
