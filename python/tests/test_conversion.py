"""KVCache.to_turboquant: the same codes as appending the tokens to a TurboQuant cache."""
import numpy as np

import turbokv
from conftest import random_kv


def test_dense_to_turboquant_equals_direct_append(rng):
    keys, values = random_kv(rng, batch=2, tokens=70, kv_heads=2, head_dim=128)
    dense = turbokv.KVCache(dtype="f32")
    dense.update_and_fetch(keys, values)
    converted = dense.to_turboquant(bits=3, window=4, sinks=1)
    direct = turbokv.TurboQuantKVCache(bits=3, window=4, sinks=1)
    direct.update_and_fetch(keys, values)
    assert isinstance(converted, turbokv.TurboQuantKVCache)
    assert converted.offset == 70 and converted.batch_size == 2
    assert converted.meta_state == direct.meta_state
    for name, array in direct.state.items():
        np.testing.assert_array_equal(converted.state[name], array)
    assert converted.nbytes < dense.nbytes / 4  # 3-bit codes vs f32 storage
    assert dense.offset == 70  # the dense cache is left as it was


def test_converted_cache_keeps_growing(rng):
    keys, values = random_kv(rng, tokens=40, kv_heads=2, head_dim=64)
    dense = turbokv.KVCache()
    dense.update_and_fetch(keys[:, :, :30], values[:, :, :30])
    tq = dense.to_turboquant(bits=4)
    k, _ = tq.update_and_fetch(keys[:, :, 30:], values[:, :, 30:])
    assert k.shape == (1, 2, 40, 64)
    assert np.abs(k[:, :, 30:] - keys[:, :, 30:]).mean() < 0.1
