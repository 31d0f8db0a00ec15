"""Smoke test of an installed turbokv wheel (.ci/run): run with the venv's python from outside the
checkout, as `python installed_smoke.py VENV`. Checks that the package imported is the installed
one, a cache round trip, the fused attention against exact attention, and Model.default()
generating from the model the wheel carries. Not collected by pytest (no test_ prefix): the
build-tree suite in this folder covers the same calls in depth."""
import sys
from pathlib import Path

import numpy as np

import turbokv


def main(venv):
    package = Path(turbokv.__file__).resolve().parent
    assert package.is_relative_to(Path(venv).resolve()), f"imported {package}, not the venv's package"

    # Cache round trip: 4-bit codes, state out and back in, same tensors.
    rng = np.random.default_rng(7)
    keys = rng.standard_normal((1, 2, 96, 64), dtype=np.float32)
    values = rng.standard_normal((1, 2, 96, 64), dtype=np.float32)
    cache = turbokv.TurboQuantKVCache(bits=4)
    k_hat, v_hat = cache.update_and_fetch(keys, values)
    restored = turbokv.TurboQuantKVCache.from_state(cache.state, cache.meta_state)
    assert restored.offset == 96 and restored.nbytes == cache.nbytes
    for name, array in cache.state.items():
        assert np.array_equal(array, restored.state[name]), f"state round trip changed {name}"
    rel = np.linalg.norm(k_hat - keys) / np.linalg.norm(keys)
    assert rel < 0.15, f"4-bit keys off by {rel:.3f} (relative)"
    assert cache.nbytes * 3 < keys.nbytes, f"{cache.nbytes} bytes of codes for {keys.nbytes} of float32 keys"

    # Fused attention over the codes against exact attention over the float tensors (GQA 2:1).
    queries = rng.standard_normal((1, 4, 1, 64), dtype=np.float32)
    out = turbokv.attention(queries, cache)[0]
    k, v = np.repeat(keys[0], 2, axis=0), np.repeat(values[0], 2, axis=0)
    scores = np.einsum("hqd,htd->hqt", queries[0], k) / 8.0
    p = np.exp(scores - scores.max(-1, keepdims=True))
    exact = np.einsum("hqt,htd->hqd", p / p.sum(-1, keepdims=True), v)
    cos = float((out * exact).sum() / (np.linalg.norm(out) * np.linalg.norm(exact)))
    assert cos > 0.98, f"fused attention cosine {cos:.4f} against exact"

    # The shipped model, found in the package itself.
    found = Path(turbokv.find_model("kjv-llama-3M.bin")).resolve()
    assert found == package / "models" / "kjv-llama-3M.bin", f"default model resolved to {found}"
    model = turbokv.Model.default()
    assert model.config["head_dim"] == 64, model.config
    text = model.generate("In the beginning", max_tokens=24, kv_bits=4)
    assert len(text.strip()) > 20, f"generated {text!r}"
    print(f"installed turbokv {turbokv.__version__} at {package}: cache, attention (cosine {cos:.4f}) and "
          f"Model.default() ok: {text.strip()[:60]!r}")


if __name__ == "__main__":
    main(sys.argv[1])
