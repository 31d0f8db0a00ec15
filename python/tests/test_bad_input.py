"""Bad input raises ValueError (shapes, dtypes, bits, NaN) or OSError (files); never a crash."""
import numpy as np
import pytest

import turbokv
from conftest import random_kv


def test_wrong_shapes_and_dtypes(rng):
    cache = turbokv.TurboQuantKVCache(bits=4)
    keys, values = random_kv(rng, tokens=4, kv_heads=2, head_dim=64)
    with pytest.raises(ValueError, match="4-D"):
        cache.update_and_fetch(keys[0], values[0])
    with pytest.raises(ValueError, match="same shape"):
        cache.update_and_fetch(keys, values[:, :, :3])
    with pytest.raises(ValueError, match="float32 or float16"):
        cache.update_and_fetch(keys.astype(np.int32), values.astype(np.int32))
    with pytest.raises(ValueError, match="float32 or float16"):
        cache.update_and_fetch(keys.astype(np.float64), values.astype(np.float64))
    with pytest.raises(ValueError, match="same dtype"):
        cache.update_and_fetch(keys, values.astype(np.float16))
    with pytest.raises(ValueError):
        cache.update_and_fetch(keys.tolist(), values.tolist())
    cache.update_and_fetch(keys, values)
    with pytest.raises(ValueError, match="kv heads"):
        cache.update_and_fetch(*random_kv(rng, tokens=1, kv_heads=3, head_dim=64))
    with pytest.raises(ValueError, match="head_dim"):
        cache.update_and_fetch(*random_kv(rng, tokens=1, kv_heads=2, head_dim=32))
    with pytest.raises(ValueError, match="batch"):
        cache.update_and_fetch(*random_kv(rng, batch=2, tokens=1, kv_heads=2, head_dim=64))
    assert cache.offset == 4


@pytest.mark.parametrize("batch", [1, 2])
def test_non_finite_rejected_and_cache_unchanged(rng, batch):
    for make in (lambda: turbokv.TurboQuantKVCache(bits=4), lambda: turbokv.KVCache()):
        cache = make()
        cache.update_and_fetch(*random_kv(rng, batch=batch, tokens=5, kv_heads=2, head_dim=64))
        before = cache.state
        keys, values = random_kv(rng, batch=batch, tokens=3, kv_heads=2, head_dim=64)
        values[-1, 1, 2, 7] = np.nan
        with pytest.raises(ValueError):
            cache.update_and_fetch(keys, values)
        keys[0, 0, 0, 0] = np.inf
        with pytest.raises(ValueError):
            cache.update_and_fetch(keys, np.zeros_like(values))
        assert cache.offset == 5
        for name, array in cache.state.items():
            np.testing.assert_array_equal(array, before[name])


def test_bad_options():
    for kwargs in ({"bits": 9}, {"bits": 0}, {"bits": 3.3}, {"key_bits": 1, "key_codec": "prod"},
                   {"key_codec": "qjl"}, {"window": -1}, {"sinks": 1.5}, {"seed": -1}):
        with pytest.raises(ValueError):
            turbokv.TurboQuantKVCache(**kwargs)
    with pytest.raises(ValueError):
        turbokv.KVCache(dtype="bf8")
    cache = turbokv.TurboQuantKVCache(bits=4, rotation="nope")
    with pytest.raises(ValueError, match="rotation"):
        cache.update_and_fetch(*random_kv(np.random.default_rng(0), tokens=1, kv_heads=1, head_dim=64))
    with pytest.raises(ValueError):
        turbokv.TurboQuantMse(128, bits=9)
    with pytest.raises(ValueError):
        turbokv.TurboQuantProd(128, bits=1)


def test_trim_and_attention_errors(rng):
    cache = turbokv.TurboQuantKVCache(bits=4)
    with pytest.raises(ValueError, match="empty"):
        turbokv.attention(np.zeros((1, 4, 1, 64), np.float32), cache)
    cache.update_and_fetch(*random_kv(rng, tokens=8, kv_heads=2, head_dim=64))
    with pytest.raises(ValueError):
        cache.trim(-1)
    with pytest.raises(ValueError):
        cache.trim(1.5)
    with pytest.raises(ValueError):  # 3 query heads over 2 kv heads: not a GQA ratio
        turbokv.attention(np.zeros((1, 3, 1, 64), np.float32), cache)
    with pytest.raises(ValueError):
        turbokv.attention(np.zeros((1, 4, 1, 32), np.float32), cache)
    with pytest.raises(ValueError):  # more queries than cached positions
        turbokv.attention(np.zeros((1, 4, 9, 64), np.float32), cache)
    with pytest.raises(ValueError):
        turbokv.attention(np.zeros((1, 4, 1, 64), np.int8), cache)
    with pytest.raises(ValueError):
        turbokv.attention(np.zeros((1, 4, 1, 64), np.float32), cache, scale=-1.0)


def test_codec_errors(rng):
    codec = turbokv.TurboQuantMse(128, bits=4)
    with pytest.raises(ValueError):
        codec.encode(rng.standard_normal((2, 64)).astype(np.float32))
    with pytest.raises(ValueError):
        codec.encode(rng.standard_normal((2, 128)))  # float64
    x = rng.standard_normal((2, 128)).astype(np.float32)
    x[1, 3] = np.nan
    with pytest.raises(ValueError):
        codec.encode(x)
    with pytest.raises(ValueError):
        codec.decode(b"\x00" * (codec.code_size + 1))
    with pytest.raises(ValueError):
        codec.decode(b"")


def test_file_errors(rng, tmp_path):
    with pytest.raises(OSError):
        turbokv.load_prompt_cache(tmp_path / "missing.safetensors")
    cache = turbokv.TurboQuantKVCache(bits=4)
    cache.update_and_fetch(*random_kv(rng, tokens=20, kv_heads=2, head_dim=64))
    path = tmp_path / "c.safetensors"
    turbokv.save_prompt_cache(path, [cache])
    data = path.read_bytes()
    for cut in (0, 7, len(data) // 2, len(data) - 1):
        (tmp_path / "cut.safetensors").write_bytes(data[:cut])
        with pytest.raises(OSError):
            turbokv.load_prompt_cache(tmp_path / "cut.safetensors")
    flipped = bytearray(data)
    flipped[-5] ^= 0x40  # inside the last tensor: its checksum no longer matches
    (tmp_path / "flip.safetensors").write_bytes(bytes(flipped))
    with pytest.raises(OSError, match="checksum"):
        turbokv.load_prompt_cache(tmp_path / "flip.safetensors")
    with pytest.raises(OSError):
        turbokv.save_prompt_cache(tmp_path / "no" / "such" / "dir" / "c.safetensors", [cache])
    with pytest.raises(ValueError):
        turbokv.save_prompt_cache(path, [turbokv.TurboQuantKVCache()])  # empty: no shape yet
    with pytest.raises(ValueError):
        turbokv.save_prompt_cache(path, [cache, cache])
    with pytest.raises(ValueError):
        turbokv.save_prompt_cache(path, [cache], {"k": 1})
    with pytest.raises(OSError):
        turbokv.Model(str(tmp_path / "missing.bin"))
    (tmp_path / "junk.bin").write_bytes(b"\x01" * 100)
    with pytest.raises(OSError):
        turbokv.Model(str(tmp_path / "junk.bin"))


def test_bad_state(rng):
    cache = turbokv.TurboQuantKVCache(bits=4)
    cache.update_and_fetch(*random_kv(rng, tokens=20, kv_heads=2, head_dim=64))
    state, meta = cache.state, cache.meta_state
    name = next(iter(state))
    broken = dict(state)
    broken[name] = state[name][:-1] if state[name].ndim == 1 else state[name][:1]
    with pytest.raises(ValueError):
        turbokv.TurboQuantKVCache.from_state(broken, meta)
    with pytest.raises(ValueError):
        turbokv.TurboQuantKVCache.from_state(state, {**meta, "class": "nonsense"})
    with pytest.raises(ValueError):
        turbokv.KVCache.from_state(state, meta)  # a TurboQuant state is not a dense cache
    with pytest.raises(ValueError):
        turbokv.TurboQuantKVCache.from_state({name: "not an array"}, meta)
