"""state / meta_state and prompt cache files: bit-exact round trips, and the same files as the
C++ side (`turbokv cache-info`, `generate --save-cache/--load-cache`)."""
import numpy as np
import pytest

import turbokv
from conftest import model_path, random_kv, run_tool, run_tool_json


def _assert_same_cache(a, b):
    assert a.meta_state == b.meta_state
    sa, sb = a.state, b.state
    assert sa.keys() == sb.keys()
    for name in sa:
        assert sa[name].dtype == sb[name].dtype
        np.testing.assert_array_equal(sa[name], sb[name])


@pytest.mark.parametrize("make", [lambda: turbokv.TurboQuantKVCache(bits=3.5, window=5, sinks=1),
                                  lambda: turbokv.TurboQuantKVCache(key_bits=4, value_bits=2, key_codec="prod"),
                                  lambda: turbokv.KVCache()])
def test_state_round_trip_is_exact(rng, make):
    cache = make()
    keys, values = random_kv(rng, tokens=300, kv_heads=2, head_dim=128)
    cache.update_and_fetch(keys, values)
    restored = type(cache).from_state(cache.state, cache.meta_state)
    _assert_same_cache(cache, restored)
    # Setters in mlx-lm's order, and the restored cache behaves identically afterwards.
    other = type(cache)()
    other.meta_state = cache.meta_state
    other.state = cache.state
    _assert_same_cache(cache, other)
    more_k, more_v = random_kv(rng, tokens=3, kv_heads=2, head_dim=128)
    k1, v1 = cache.update_and_fetch(more_k, more_v)
    k2, v2 = other.update_and_fetch(more_k, more_v)
    np.testing.assert_array_equal(k1, k2)
    np.testing.assert_array_equal(v1, v2)


def test_batched_state_round_trip(rng):
    cache = turbokv.TurboQuantKVCache(bits=4)
    cache.update_and_fetch(*random_kv(rng, batch=2, tokens=20, kv_heads=2, head_dim=64))
    assert cache.meta_state["batch"] == "2"
    _assert_same_cache(cache, turbokv.TurboQuantKVCache.from_state(cache.state, cache.meta_state))


def test_file_round_trip_is_exact(rng, tmp_path):
    caches = [turbokv.TurboQuantKVCache(bits=4, window=4), turbokv.KVCache(), turbokv.TurboQuantKVCache(bits=2.5)]
    for c in caches:
        c.update_and_fetch(*random_kv(rng, tokens=37, kv_heads=2, head_dim=64))
    path = tmp_path / "p.safetensors"
    turbokv.save_prompt_cache(path, caches, {"note": "from python"})
    loaded, metadata = turbokv.load_prompt_cache(path, return_metadata=True)
    assert metadata == {"note": "from python"}
    assert [type(c) for c in loaded] == [type(c) for c in caches]
    for a, b in zip(caches, loaded):
        _assert_same_cache(a, b)
    assert isinstance(turbokv.load_prompt_cache(str(path)), list)
    # The caches lent to the save are intact and usable afterwards.
    k, _ = caches[0].update_and_fetch(*random_kv(rng, tokens=1, kv_heads=2, head_dim=64))
    assert k.shape[2] == 38


def test_cli_reads_python_file(rng, tmp_path):
    caches = [turbokv.TurboQuantKVCache(bits=3, sinks=1) for _ in range(2)]
    for c in caches:
        c.update_and_fetch(*random_kv(rng, tokens=90, kv_heads=4, head_dim=128))
    path = tmp_path / "py.safetensors"
    turbokv.save_prompt_cache(path, caches, {"who": "pytest"})
    info = run_tool_json("cache-info", path)
    assert info["n_layers"] == 2 and info["tokens"] == 90 and info["checksums"]
    assert info["nbytes"] == sum(c.nbytes for c in caches)
    assert info["metadata"] == {"who": "pytest"}
    assert [layer["class"] for layer in info["layers"]] == ["turboquant", "turboquant"]
    assert turbokv.prompt_cache_info(path)["user_metadata"] == {"who": "pytest"}


def test_generate_cache_through_python_and_back(tmp_path):
    """A cache `generate --save-cache` wrote, loaded and saved again from Python, continues in
    `generate --load-cache` exactly as the original file does."""
    model = model_path("kjv-llama-3M.bin")
    original = tmp_path / "cli.safetensors"
    run_tool("generate", "--model", model, "--prompt", "And God said", "--kv-bits", "4", "-n", "0",
             "--save-cache", original, "--quiet")
    caches, metadata = turbokv.load_prompt_cache(original, return_metadata=True)
    assert all(isinstance(c, turbokv.TurboQuantKVCache) for c in caches)
    assert "engine.tokens" in metadata
    resaved = tmp_path / "py.safetensors"
    turbokv.save_prompt_cache(resaved, caches, metadata)
    a = run_tool_json("generate", "--model", model, "--load-cache", original, "-n", "24")
    b = run_tool_json("generate", "--model", model, "--load-cache", resaved, "-n", "24")
    assert a["text"] == b["text"] and a["tokens"] == b["tokens"]
    assert a["generated_tokens"] == 24 or a["generated_tokens"] > 0
    assert original.read_bytes() == resaved.read_bytes()
