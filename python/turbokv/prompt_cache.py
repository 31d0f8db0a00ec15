"""Saving and loading the caches of every layer of a model as one turbokv prompt cache file
(safetensors with checksums, docs/formats.md): the files ``turbokv generate --save-cache`` writes
and ``--load-cache`` reads, and ``turbokv cache-info`` describes."""
from __future__ import annotations

import os

from . import _core
from .cache import _Cache, _wrap_layer


def save_prompt_cache(path, caches, metadata: dict | None = None) -> None:
    """Writes ``caches`` (a list of caches, one per model layer, each of batch 1) and string
    ``metadata`` to ``path`` (crash-safe). ValueError for a cache that is empty or batched;
    OSError if the file cannot be written."""
    caches = list(caches)
    if not caches:
        raise ValueError("save_prompt_cache: no caches")
    layers = []
    for i, cache in enumerate(caches):
        if not isinstance(cache, _Cache):
            raise ValueError(f"save_prompt_cache: caches[{i}] is a {type(cache).__name__}, not a turbokv cache")
        if cache.batch_size != 1:
            raise ValueError(f"save_prompt_cache: caches[{i}] has batch {cache.batch_size}; the file format holds one "
                             "sequence (batch 1; an empty cache has no shape yet)")
        layers.append(cache._layers[0])
    meta = {}
    for key, value in (metadata or {}).items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValueError(f"metadata keys and values must be str, got {key!r}: {value!r}")
        meta[key] = value
    _core.save_prompt_cache(os.fspath(path), layers, meta)


def load_prompt_cache(path, return_metadata: bool = False):
    """The caches saved in ``path`` (one per layer: TurboQuantKVCache, KVCache, or OtherCache for
    the baseline classes), and with ``return_metadata`` the user metadata too. OSError for a
    missing, truncated or corrupt file (every tensor's checksum is verified)."""
    layers, metadata = _core.load_prompt_cache(os.fspath(path))
    caches = [_wrap_layer(layer) for layer in layers]
    return (caches, metadata) if return_metadata else caches


def prompt_cache_info(path) -> dict:
    """The header of a saved prompt cache (format version, metadata, each layer's options and
    bytes) without loading the tensors: what ``turbokv cache-info`` prints."""
    return _core.prompt_cache_info(os.fspath(path))
