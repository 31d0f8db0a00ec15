"""KV caches with the API of mlx-lm's ``models/cache.py``, over turbokv's C++ caches.

Arrays are numpy, shaped ``[batch, kv_heads, tokens, head_dim]``, float32 or float16. A cache
learns ``kv_heads`` and ``head_dim`` from its first ``update_and_fetch`` and keeps one C++ cache
per batch element (a ``turbokv._core.Layer``). A TurboQuant cache stores packed codes: its
``nbytes`` is what it holds, not a float copy.
"""
from __future__ import annotations

import threading

import numpy as np

from . import _core

_FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))


def _check_kv(keys, values):
    for name, a in (("keys", keys), ("values", values)):
        if not isinstance(a, np.ndarray):
            raise ValueError(f"{name} must be a numpy array, got {type(a).__name__}")
        if a.ndim != 4:
            raise ValueError(f"{name} must be 4-D [batch, kv_heads, tokens, head_dim], got shape {a.shape}")
        if a.dtype not in _FLOAT_DTYPES:
            raise ValueError(f"{name} must be float32 or float16, got {a.dtype}")
    if keys.shape != values.shape:
        raise ValueError(f"keys and values must have the same shape, got {keys.shape} and {values.shape}")
    if keys.dtype != values.dtype:
        raise ValueError(f"keys and values must have the same dtype, got {keys.dtype} and {values.dtype}")
    if keys.shape[0] < 1 or keys.shape[1] < 1 or keys.shape[3] < 1:
        raise ValueError(f"batch, kv_heads and head_dim must be >= 1, got shape {keys.shape}")


class _Cache:
    """What every cache class shares: the per-batch C++ layers and the mlx-lm methods."""

    def __init__(self):
        self._layers: list = []  # one _core.Layer per batch element, made on the first update
        self._first_update = threading.Lock()  # two threads' first updates make the layers once
        self._pending_state = None
        self._pending_meta = None

    # --- construction of the C++ layers (subclasses) ---
    def _make_layer(self, kv_heads: int, head_dim: int):
        raise NotImplementedError

    @classmethod
    def _from_layers(cls, layers):
        cache = cls()
        cache._layers = list(layers)
        return cache

    # --- mlx-lm API ---
    def update_and_fetch(self, keys: np.ndarray, values: np.ndarray):
        """Appends ``keys``/``values`` ([batch, kv_heads, tokens, head_dim]) and returns the whole
        cache's keys and values (dequantized, in the input's dtype), as mlx-lm's call does.

        Returning every token means dequantizing every token on every call: for decoding, use
        ``turbokv.attention(queries, cache)`` on the packed codes instead (see
        docs/history/benchmarks-notebook.md, "Python binding").
        """
        _check_kv(keys, values)
        batch, kv_heads, _, head_dim = keys.shape
        if not self._layers:
            with self._first_update:
                if not self._layers:
                    self._layers = [self._make_layer(kv_heads, head_dim) for _ in range(batch)]
        if batch != len(self._layers):
            raise ValueError(f"this cache holds a batch of {len(self._layers)}, got keys for {batch}")
        return _core.update_and_fetch(self._layers, keys, values, keys.dtype)

    def fetch(self, dtype=np.float32):
        """The whole cache's keys and values without appending anything."""
        if not self._layers:
            raise ValueError("the cache is empty")
        return _core.update_and_fetch(self._layers, None, None, np.dtype(dtype))

    @property
    def offset(self) -> int:
        """Tokens held (per batch element)."""
        return self._layers[0].size() if self._layers else 0

    def size(self) -> int:
        return self.offset

    def empty(self) -> bool:
        return self.offset == 0

    def is_trimmable(self) -> bool:
        return True

    def trim(self, n: int) -> int:
        """Drops the newest ``n`` tokens; returns how many were dropped."""
        if not isinstance(n, (int, np.integer)) or isinstance(n, bool):
            raise ValueError(f"trim count must be an int, got {type(n).__name__}")
        if n < 0:
            raise ValueError(f"trim count must be >= 0, got {n}")
        dropped = 0
        for layer in self._layers:
            dropped = layer.trim(int(n))
        return dropped

    @property
    def nbytes(self) -> int:
        """Exact bytes of the stored data over the batch (codes, norms, exact windows)."""
        return sum(layer.nbytes for layer in self._layers)

    @property
    def batch_size(self) -> int:
        return len(self._layers)

    # --- state: the C++ save_state, round-trip exact ---
    @property
    def state(self) -> dict:
        """The stored tensors as numpy arrays (names as in the C++ CacheState; with a batch > 1
        each name is prefixed with ``"<b>/"``). Setting ``state`` and then ``meta_state`` (in
        either order) rebuilds the cache bit-exactly."""
        if self._pending_state is not None:
            return self._pending_state
        out = {}
        for b, layer in enumerate(self._layers):
            _, tensors = layer.save_state()
            for name, array in tensors.items():
                out[self._key(b, name)] = array
        return out

    @state.setter
    def state(self, value: dict):
        self._pending_state = dict(value)
        self._apply_pending()

    @property
    def meta_state(self) -> dict:
        """The cache's metadata strings (class, options, sizes; ``"batch"`` when > 1)."""
        if self._pending_meta is not None:
            return self._pending_meta
        out = {}
        for b, layer in enumerate(self._layers):
            metadata, _ = layer.save_state()
            for key, text in metadata.items():
                out[self._key(b, key)] = text
        if len(self._layers) > 1:
            out["batch"] = str(len(self._layers))
        return out

    @meta_state.setter
    def meta_state(self, value: dict):
        self._pending_meta = {str(k): str(v) for k, v in dict(value).items()}
        self._apply_pending()

    @classmethod
    def from_state(cls, state: dict, meta_state: dict):
        cache = cls._from_layers([])
        cache.state = state
        cache.meta_state = meta_state
        return cache

    def _key(self, b: int, name: str) -> str:
        return name if len(self._layers) == 1 else f"{b}/{name}"

    def _apply_pending(self):
        if self._pending_state is None or self._pending_meta is None:
            return
        state, meta = self._pending_state, self._pending_meta
        self._pending_state = self._pending_meta = None
        if not state and not meta:
            self._layers = []
            return
        if "batch" in meta:
            try:
                batch = int(meta["batch"])
            except ValueError:
                raise ValueError(f"meta_state['batch'] is not an integer: {meta['batch']!r}") from None
            if batch < 2:
                raise ValueError(f"meta_state['batch'] must be >= 2 when given, got {batch}")
            per_meta = [{} for _ in range(batch)]
            per_state = [{} for _ in range(batch)]
            for target, source in ((per_meta, {k: v for k, v in meta.items() if k != "batch"}), (per_state, state)):
                for key, item in source.items():
                    b, sep, name = key.partition("/")
                    if not sep or not b.isdigit() or int(b) >= batch:
                        raise ValueError(f"state key {key!r} does not name a batch element (expected '<b>/<name>')")
                    target[int(b)][name] = item
            layers = [_core.Layer.from_state(m, s) for m, s in zip(per_meta, per_state)]
        else:
            layers = [_core.Layer.from_state(meta, state)]
        expected = _CLASS_OF_NAME.get(layers[0].class_name, _Cache)
        if not isinstance(self, expected) and type(self) is not _Cache:
            raise ValueError(f"the state is a {layers[0].class_name!r} cache, not a {type(self).__name__}")
        self._layers = layers

    def __repr__(self):
        kind = self._layers[0].class_name if self._layers else "empty"
        return f"<{type(self).__name__} {kind} batch={len(self._layers)} offset={self.offset} nbytes={self.nbytes}>"


class KVCache(_Cache):
    """The dense cache (fp16 storage by default, like an mlx-lm KVCache of float16 arrays)."""

    def __init__(self, dtype: str = "f16", page_tokens: int = 256):
        super().__init__()
        if dtype not in ("f16", "f32"):
            raise ValueError(f"dtype must be 'f16' or 'f32', got {dtype!r}")
        self._dtype = dtype
        self._page_tokens = page_tokens

    def _make_layer(self, kv_heads, head_dim):
        return _core.make_dense(kv_heads, head_dim, dtype=self._dtype, page_tokens=self._page_tokens)

    def to_turboquant(self, bits: float = 4, **options) -> "TurboQuantKVCache":
        """A TurboQuantKVCache holding this cache's tokens (codes identical to appending them);
        ``options`` as for ``TurboQuantKVCache``."""
        target = TurboQuantKVCache(bits, **options)
        target._layers = [layer.to_turboquant(**target._options) for layer in self._layers]
        return target


class TurboQuantKVCache(_Cache):
    """Keys and values as TurboQuant codes (packed Lloyd-Max indices of rotated coordinates plus
    a norm), with optional exact ``sinks`` (first tokens) and ``window`` (newest tokens).

    ``bits`` applies to keys and values unless ``key_bits``/``value_bits`` say otherwise (1..8,
    half widths like 3.5 allowed). ``key_codec="prod"`` uses the unbiased inner-product codec
    for keys. ``exact_dtype`` stores the sinks and window as "f32" or "f16".
    """

    def __init__(self, bits: float = 4, key_bits: float | None = None, value_bits: float | None = None,
                 window: int = 0, sinks: int = 0, seed: int | None = None, key_codec: str = "mse",
                 rotation: str = "hadamard", norm_correction: bool = True, fp32_norm: bool = False,
                 center: bool = False, exact_dtype: str = "f32", page_tokens: int = 256):
        super().__init__()
        key_bits = bits if key_bits is None else key_bits
        value_bits = bits if value_bits is None else value_bits
        for name, b in (("key_bits", key_bits), ("value_bits", value_bits)):
            if isinstance(b, bool) or not isinstance(b, (int, float)) or not 1 <= b <= 8 or (2 * b) != int(2 * b):
                raise ValueError(f"{name} must be in [1, 8] in steps of 0.5, got {b!r}")
        if key_codec not in ("mse", "prod"):
            raise ValueError(f"key_codec must be 'mse' or 'prod', got {key_codec!r}")
        if key_codec == "prod" and key_bits < 2:
            raise ValueError(f"key_codec='prod' needs key_bits >= 2, got {key_bits}")
        for name, n in (("window", window), ("sinks", sinks), ("page_tokens", page_tokens)):
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise ValueError(f"{name} must be an int >= 0, got {n!r}")
        if seed is not None and (not isinstance(seed, int) or not 0 <= seed < 2**64):
            raise ValueError(f"seed must be an int in [0, 2**64), got {seed!r}")
        self._options = dict(key_bits=float(key_bits), value_bits=float(value_bits), key_codec=key_codec,
                             rotation=rotation, seed=seed, window=window, sinks=sinks,
                             norm_correction=norm_correction, fp32_norm=fp32_norm, center=center,
                             exact_dtype=exact_dtype, page_tokens=page_tokens)

    def _make_layer(self, kv_heads, head_dim):
        return _core.make_turboquant(kv_heads, head_dim, **self._options)

    @property
    def bits(self) -> tuple:
        """(key_bits, value_bits)."""
        if self._layers:
            info = self._layers[0].turboquant_info()
            return info["key_bits"], info["value_bits"]
        return self._options["key_bits"], self._options["value_bits"]


class OtherCache(_Cache):
    """A loaded cache of another C++ class (q8_0, q4_0, kivi, affine): the same API; it grows
    only through ``update_and_fetch`` once loaded."""

    def _make_layer(self, kv_heads, head_dim):
        raise ValueError("an OtherCache is only made by load_prompt_cache")


_CLASS_OF_NAME = {"dense": KVCache, "turboquant": TurboQuantKVCache}


def _wrap_layer(layer) -> _Cache:
    """The Python cache object for one loaded C++ layer."""
    return _CLASS_OF_NAME.get(layer.class_name, OtherCache)._from_layers([layer])
