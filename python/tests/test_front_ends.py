"""One KV-cache request, four front ends, one cache (issue 28): `turbokv generate` flags, `turbokv
serve` flags, the Python keyword arguments and a `--cache` / `cache=` string (a short name or
the canonical kind:key=value form) must build the same configuration and the same logits.
Before kv_request_config they did not: Python's kv_bits=4 built 4/4-bit codes with exact
attention where the CLI built the tq4 scheme, and serve stored the exact window in fp16 where
generate and Python stored it in f32."""
import json
import re
import socket
import subprocess
import time
import urllib.request

import numpy as np
import pytest

import turbokv
from conftest import TOOL, model_path, run_tool_json

MODEL = "kjv-llama-3M.bin"
PROMPT = "And God said, Let there be light"

# (CLI/serve flags, Python keyword arguments, a short name that means the same where one exists)
REQUESTS = [
    # The budgets take the schemes' codes (tq4 = k3v3s1w18-x16, tq3.5 = k3v2s1w12-x16) with the
    # flags' own window (32) and int8 attention.
    (["--kv-bits", "4"], {"kv_bits": 4}, "k3v3s1w32-x16-i8"),
    (["--kv-bits", "3.5"], {"kv_bits": 3.5}, "k3v2s1w32-x16-i8"),
    (["--kv-bits", "3"], {"kv_bits": 3}, "tq3s1w32-x16-i8"),
    (["--kv-bits", "3", "--kv-window", "0", "--kv-sinks", "0"], {"kv_bits": 3, "kv_window": 0, "kv_sinks": 0},
     "tq3-x16-i8"),  # -x16 even without exact tokens: an fp16 cache rounds every input to fp16 first
    (["--key-bits", "4", "--value-bits", "2"], {"key_bits": 4, "value_bits": 2}, "k4v2s1w32-x16-i8"),
    (["--cache", "turboquant:bits=3,window=8,sinks=1"], {"cache": "turboquant:bits=3,window=8,sinks=1"}, None),
]


def without_pages(config):
    """The server pages its caches by --page-tokens (a storage layout, not a value): compare the
    rest."""
    return re.sub(r",?page_tokens=\d+", "", config)


@pytest.fixture(scope="module")
def model():
    return turbokv.Model(str(model_path(MODEL)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def served_config(flags):
    """Starts `turbokv serve` with these cache flags, reads the configuration /v1/models reports,
    stops it. Bounded: 60 s to come up."""
    port = free_port()
    proc = subprocess.Popen([TOOL, "serve", "--model", str(model_path(MODEL)), "--port", str(port), "--threads", "1",
                             *flags], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, f"serve exited: {proc.stderr.read()}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5) as r:
                    return json.load(r)["data"][0]["meta"]["kv_cache"]
            except OSError:
                assert time.monotonic() < deadline, "serve did not answer within 60 s"
                time.sleep(0.1)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("flags,kwargs,name", REQUESTS, ids=[" ".join(r[0]) for r in REQUESTS])
def test_every_front_end_builds_the_same_cache(model, flags, kwargs, name):
    python = model.cache_config(**kwargs)
    cli = run_tool_json("generate", "--model", model_path(MODEL), "--prompt", PROMPT, "-n", "1", *flags)
    assert cli["cache_config"] == python
    assert without_pages(served_config(flags)) == without_pages(python)
    # The canonical string reads back to itself through every spelling that takes a string.
    assert model.cache_config(cache=python) == python
    assert run_tool_json("generate", "--model", model_path(MODEL), "--prompt", PROMPT, "-n", "1",
                         "--cache", python)["cache_config"] == python
    if name is not None:
        assert model.cache_config(cache=name) == python, f"the name {name} means another cache"

    tokens = model.encode(PROMPT + ". And there was light. And God saw the light, that it was good")
    logits = model.logits(tokens, **kwargs)
    assert np.array_equal(logits, model.logits(tokens, cache=python))
    if name is not None:
        assert np.array_equal(logits, model.logits(tokens, cache=name))
    assert not np.array_equal(logits, model.logits(tokens))  # compressed: not the dense cache's


def test_short_names_and_class_names_are_one_grammar(model):
    assert model.cache_config(cache="dense") == model.cache_config()
    assert model.cache_config(cache="dense16") == model.cache_config()
    assert "dtype=f32" in model.cache_config(cache="dense32")
    assert model.cache_config(cache="q8_0").startswith("q8_0")
    with pytest.raises(ValueError, match="configuration 'tq4x'"):
        model.cache_config(cache="tq4x")
