"""Basic operations: append/fetch shapes, offset, dtypes, batches, attention shapes, codecs."""
import numpy as np
import pytest

import turbokv
from conftest import random_kv


@pytest.mark.parametrize("make", [lambda: turbokv.TurboQuantKVCache(bits=4), lambda: turbokv.KVCache()])
def test_update_and_fetch_shapes_and_offset(rng, make):
    cache = make()
    assert cache.empty() and cache.offset == 0 and cache.size() == 0 and cache.nbytes == 0
    assert cache.is_trimmable()
    total = 0
    for n in (17, 1, 1, 40):
        keys, values = random_kv(rng, tokens=n, kv_heads=4, head_dim=64)
        k, v = cache.update_and_fetch(keys, values)
        total += n
        assert k.shape == v.shape == (1, 4, total, 64)
        assert k.dtype == v.dtype == np.float32
        assert cache.offset == cache.size() == total
        assert not cache.empty()


def test_dense_f32_fetch_is_exact(rng):
    cache = turbokv.KVCache(dtype="f32")
    keys, values = random_kv(rng, tokens=10)
    cache.update_and_fetch(keys, values)
    k, v = cache.update_and_fetch(keys[:, :, :3], values[:, :, :3])
    np.testing.assert_array_equal(k[:, :, :10], keys)
    np.testing.assert_array_equal(v[:, :, 10:], values[:, :, :3])


def test_float16_in_float16_out(rng):
    cache = turbokv.TurboQuantKVCache(bits=4)
    keys, values = random_kv(rng, tokens=8, dtype=np.float16)
    k, v = cache.update_and_fetch(keys, values)
    assert k.dtype == v.dtype == np.float16
    # fp16 input, 4-bit codes: every token comes back close to what went in.
    assert np.abs(k.astype(np.float32) - keys.astype(np.float32)).mean() < 0.15


def test_batch_elements_are_independent(rng):
    keys, values = random_kv(rng, batch=3, tokens=20, kv_heads=2, head_dim=64)
    batched = turbokv.TurboQuantKVCache(bits=3)
    k, v = batched.update_and_fetch(keys, values)
    assert k.shape == (3, 2, 20, 64) and batched.batch_size == 3
    for b in range(3):
        single = turbokv.TurboQuantKVCache(bits=3)
        kb, vb = single.update_and_fetch(keys[b:b + 1], values[b:b + 1])
        np.testing.assert_array_equal(kb[0], k[b])
        np.testing.assert_array_equal(vb[0], v[b])
    assert batched.nbytes == 3 * single.nbytes


def test_non_contiguous_input_is_accepted(rng):
    keys, values = random_kv(rng, tokens=12, kv_heads=2, head_dim=64)
    cache = turbokv.KVCache(dtype="f32")
    k, _ = cache.update_and_fetch(keys[:, :, ::2], values[:, :, ::2])
    np.testing.assert_array_equal(k, keys[:, :, ::2])


def test_attention_shapes_decode_and_prefill(rng):
    cache = turbokv.TurboQuantKVCache(bits=4)
    keys, values = random_kv(rng, tokens=100, kv_heads=2, head_dim=64)
    cache.update_and_fetch(keys, values)
    for n_q in (1, 7):
        queries = rng.standard_normal((1, 8, n_q, 64)).astype(np.float32)
        out = turbokv.attention(queries, cache)
        assert out.shape == queries.shape and out.dtype == np.float32
        assert np.isfinite(out).all()
    out16 = turbokv.attention(queries.astype(np.float16), cache)
    assert out16.dtype == np.float16


def test_codec_encode_decode_shapes(rng):
    for codec_type in (turbokv.TurboQuantMse, turbokv.TurboQuantProd):
        codec = codec_type(128, bits=3)
        x = rng.standard_normal((5, 128)).astype(np.float32)
        codes = codec.encode(x)
        assert codes.dtype == np.uint8 and codes.shape == (5, codec.code_size)
        y = codec.decode(codes)
        assert y.shape == (5, 128) and y.dtype == np.float32
        np.testing.assert_array_equal(codec.decode(bytes(codes)), y)  # any bytes-like object
        # One vector alone: same codes; decoding it alone may round differently in the last bit
        # (the batch goes through the SIMD transform in groups).
        np.testing.assert_array_equal(codec.encode(x[0]), codes[:1])
        np.testing.assert_allclose(codec.decode(codec.encode(x[0])), y[:1], rtol=0, atol=1e-5)
    assert turbokv.TurboQuantMse(128, bits=3).code_size == 48 + 2  # codec.hpp: 3-bit codes + fp16 norm
    assert turbokv.TurboQuantProd(128, bits=3).code_size == 52
