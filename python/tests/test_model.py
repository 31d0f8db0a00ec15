"""Model integration: greedy text equals the CLI's; compressed caches keep the logits close."""
import numpy as np
import pytest

import turbokv
from conftest import cosine, model_path, run_tool_json

PROMPT = "And God said"


@pytest.fixture(scope="module")
def model():
    return turbokv.Model(str(model_path("kjv-llama-3M.bin")))


# The same request from both front ends builds the same cache (one function,
# kv_request_config), so the greedy text is the same far past the 32 exact window tokens: 120
# generated tokens. Issue 28 found Python's kv_bits=4 building 4/4-bit codes with exact attention
# where the CLI's --kv-bits 4 is the tq4 scheme (3/3 bits, fp16 exact tokens) in int8; at 40
# tokens the window hid it.
@pytest.mark.parametrize("kv", [[], ["--kv-bits", "4"], ["--kv-bits", "3.5"], ["--kv-bits", "3", "--kv-window", "0", "--kv-sinks", "0"],
                                ["--key-bits", "4", "--value-bits", "2"], ["--cache", "turboquant:bits=3,window=8,sinks=1"]])
def test_greedy_text_equals_cli(model, kv):
    cli = run_tool_json("generate", "--model", model_path("kjv-llama-3M.bin"), "--prompt", PROMPT, "-n", "120", *kv)
    flags = dict(zip(kv[::2], kv[1::2]))
    kwargs = {name: float(flags[flag]) for flag, name in (("--kv-bits", "kv_bits"), ("--key-bits", "key_bits"),
                                                          ("--value-bits", "value_bits")) if flag in flags}
    kwargs.update({name: int(flags[flag]) for flag, name in (("--kv-window", "kv_window"), ("--kv-sinks", "kv_sinks"))
                   if flag in flags})
    if "--cache" in flags:
        kwargs["cache"] = flags["--cache"]
    text = model.generate(PROMPT, max_tokens=120, echo=True, **kwargs)
    assert text == cli["text"]
    continuation = model.generate(PROMPT, max_tokens=120, **kwargs)
    assert cli["text"].endswith(continuation) and len(continuation) > 150


def test_logits_under_compression(model):
    tokens = model.encode("In the beginning God created the heaven and the earth. And the earth was without form")
    dense = model.logits(tokens)
    assert dense.shape == (len(tokens), model.config["vocab_size"])
    for bits, threshold in ((4, 0.995), (3, 0.99)):  # measured 0.9991, 0.9985
        compressed = model.logits(tokens, kv_bits=bits, kv_window=0, kv_sinks=1)
        worst = min(cosine(dense[i], compressed[i]) for i in range(len(tokens)))
        assert worst >= threshold, f"{bits}-bit worst logit cosine {worst:.4f}"
        assert not np.array_equal(dense, compressed)  # the cache really was compressed


def test_model_errors(model):
    with pytest.raises(ValueError):
        model.generate(PROMPT, max_tokens=-1)
    with pytest.raises(ValueError):
        model.generate(PROMPT, kv_bits=4, cache="dense")
    with pytest.raises(ValueError):
        model.logits([model.config["vocab_size"] + 5])
    with pytest.raises(ValueError):
        model.logits([])
    with pytest.raises(ValueError):
        model.generate("word " * 5000, max_tokens=1)  # longer than the context


def test_default_model_and_bare_names_resolve_as_the_cli_does(model):
    # In the build tree the package has no models/ of its own, so the checkout's models/ serves.
    found = turbokv.find_model("kjv-llama-3M.bin")
    assert found.endswith("/models/kjv-llama-3M.bin")
    assert open(found, "rb").read(64) == open(model_path("kjv-llama-3M.bin"), "rb").read(64)
    default = turbokv.Model.default()
    assert default.config == model.config
    assert default.generate(PROMPT, max_tokens=20) == model.generate(PROMPT, max_tokens=20)
    assert turbokv.Model("stories260K.bin").config["head_dim"] == 8


def test_missing_model_names_the_folders_it_searched():
    with pytest.raises(OSError) as err:
        turbokv.Model("no-such-model.bin")
    message = str(err.value)
    assert "no-such-model.bin" in message and "share/turbokv/models" in message and "TURBOKV_MODELS_DIR" in message
    with pytest.raises(OSError):
        turbokv.find_model("no-such-model.bin")
