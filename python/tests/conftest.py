"""Shared helpers of the turbokv Python tests. ctest sets PYTHONPATH to the build tree's
package, TURBOKV_TOOL to the same build's CLI and TURBOKV_MODELS_DIR to the checkout's models/."""
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

TOOL = os.environ.get("TURBOKV_TOOL", "")
MODELS_DIR = Path(os.environ.get("TURBOKV_MODELS_DIR", Path(__file__).resolve().parents[2] / "models"))


def random_kv(rng, batch=1, kv_heads=8, tokens=64, head_dim=128, dtype=np.float32):
    keys = rng.standard_normal((batch, kv_heads, tokens, head_dim)).astype(dtype)
    values = rng.standard_normal((batch, kv_heads, tokens, head_dim)).astype(dtype)
    return keys, values


def reference_attention(queries, keys, values, scale=None):
    """Exact causal attention in float64: queries [Hq, L, D] are the last L positions of keys/
    values [Hkv, T, D]; GQA by head groups."""
    hq, n_q, d = queries.shape
    hkv, t, _ = keys.shape
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    out = np.empty((hq, n_q, d))
    for h in range(hq):
        k = keys[h // (hq // hkv)].astype(np.float64)
        v = values[h // (hq // hkv)].astype(np.float64)
        for i in range(n_q):
            visible = t - n_q + i + 1
            s = (k[:visible] @ queries[h, i].astype(np.float64)) * scale
            p = np.exp(s - s.max())
            out[h, i] = (p / p.sum()) @ v[:visible]
    return out


def cosine(a, b):
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def run_tool(*args, timeout=300):
    """Runs this build's turbokv CLI; returns its stdout (fails the test on a non-zero exit)."""
    if not TOOL or not os.path.exists(TOOL):
        pytest.fail(f"turbokv CLI not found (TURBOKV_TOOL={TOOL!r}); run the tests through ctest")
    result = subprocess.run([TOOL, *map(str, args)], capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"turbokv {' '.join(map(str, args))} failed:\n{result.stderr}"
    return result.stdout


def run_tool_json(*args, timeout=300):
    return json.loads(run_tool(*args, "--json", timeout=timeout))


def model_path(name):
    path = MODELS_DIR / name
    if not path.exists():
        pytest.fail(f"model {path} not found (set TURBOKV_MODELS_DIR; see README, 'Models')")
    return path


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
