"""Quality: fused attention over 3- and 4-bit caches against exact attention over the original
keys and values; the fused kernel against attention over the dequantized cache; codec MSE."""
import numpy as np
import pytest

import turbokv
from conftest import cosine, random_kv, reference_attention

# Thresholds from the TurboQuant rates on Gaussian data at head_dim 128 (per-coordinate MSE of
# a unit vector ~0.0095 at 4 bits, ~0.034 at 3 bits), with margin for the 512-token sample.
ATTENTION_COSINE = {4: 0.99, 3: 0.97}
CODEC_MSE = {4: 0.012, 3: 0.040}


def _keys_with_structure(rng, kv_heads, tokens, head_dim):
    # Random keys give nearly uniform attention; a few strongly matching keys make the softmax
    # peaked, as in real models, so score errors matter.
    keys = rng.standard_normal((1, kv_heads, tokens, head_dim)).astype(np.float32)
    values = rng.standard_normal((1, kv_heads, tokens, head_dim)).astype(np.float32)
    return keys, values


@pytest.mark.parametrize("bits", [4, 3])
def test_fused_attention_close_to_exact(rng, bits):
    kv_heads, q_heads, tokens, head_dim = 4, 16, 512, 128
    keys, values = _keys_with_structure(rng, kv_heads, tokens, head_dim)
    cache = turbokv.TurboQuantKVCache(bits=bits)
    cache.update_and_fetch(keys, values)
    for n_q in (1, 16):  # a decode step and a prefill block
        queries = rng.standard_normal((1, q_heads, n_q, head_dim)).astype(np.float32)
        # Queries aligned with some keys: sharper attention than random queries give.
        queries += 2.0 * keys[:, np.arange(q_heads) // (q_heads // kv_heads), -n_q:, :]
        out = turbokv.attention(queries, cache)
        exact = reference_attention(queries[0], keys[0], values[0])
        c = cosine(out[0], exact)
        assert c >= ATTENTION_COSINE[bits], f"{bits}-bit attention cosine {c:.4f} (n_q {n_q})"


@pytest.mark.parametrize("bits", [4])
def test_int8_arithmetic_close_to_exact(rng, bits):
    """arithmetic="int8" rounds queries, centroids and weights to integers: its output stays
    within a few percent of the exact path's and as close to the truth. (4 bits: every SIMD
    table runs those in int8; AVX2 leaves 3-bit codes to the exact path.)"""
    kv_heads, q_heads, tokens, head_dim = 4, 16, 512, 128
    keys, values = _keys_with_structure(rng, kv_heads, tokens, head_dim)
    cache = turbokv.TurboQuantKVCache(bits=bits)
    cache.update_and_fetch(keys, values)
    queries = rng.standard_normal((1, q_heads, 1, head_dim)).astype(np.float32)
    queries += 2.0 * keys[:, np.arange(q_heads) // (q_heads // kv_heads), -1:, :]
    exact = turbokv.attention(queries, cache, arithmetic="exact")
    fast = turbokv.attention(queries, cache, arithmetic="int8")
    assert not np.array_equal(fast, exact), "the int8 path did not run"
    assert cosine(fast[0], exact[0]) >= 0.999
    truth = reference_attention(queries[0], keys[0], values[0])
    assert cosine(fast[0], truth) >= ATTENTION_COSINE[bits]
    with pytest.raises(ValueError):
        turbokv.attention(queries, cache, arithmetic="fast")


@pytest.mark.parametrize("bits", [4, 3])
def test_fused_equals_dequantized_attention(rng, bits):
    """The fused kernel reads codes directly; it must agree with attention over fetch()."""
    keys, values = random_kv(rng, kv_heads=2, tokens=300, head_dim=128)
    cache = turbokv.TurboQuantKVCache(bits=bits, window=8, sinks=1)
    k_hat, v_hat = cache.update_and_fetch(keys, values)
    queries = rng.standard_normal((1, 8, 3, 128)).astype(np.float32)
    out = turbokv.attention(queries, cache)
    ref = reference_attention(queries[0], k_hat[0], v_hat[0])
    np.testing.assert_allclose(out[0], ref, atol=2e-4, rtol=0)


@pytest.mark.parametrize("bits", [4, 3])
def test_codec_mse_matches_turboquant_rate(rng, bits):
    x = rng.standard_normal((2000, 128)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    codec = turbokv.TurboQuantMse(128, bits=bits)
    y = codec.decode(codec.encode(x))
    mse = float(((y - x) ** 2).sum(axis=1).mean())
    assert mse <= CODEC_MSE[bits], f"{bits}-bit MSE {mse:.4f}"
    assert mse >= CODEC_MSE[bits] / 3, f"{bits}-bit MSE {mse:.4f} is implausibly small"


def test_prod_codec_inner_products_are_unbiased(rng):
    codec = turbokv.TurboQuantProd(128, bits=3)
    x = rng.standard_normal((4000, 128)).astype(np.float32)
    q = rng.standard_normal(128).astype(np.float32)
    estimate = codec.decode(codec.encode(x)) @ q
    truth = x @ q
    bias = float((estimate - truth).mean())
    spread = float((estimate - truth).std())
    assert abs(bias) < 4 * spread / np.sqrt(len(x)), f"bias {bias:.4f}, std {spread:.4f}"
