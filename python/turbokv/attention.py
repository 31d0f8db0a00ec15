"""Attention over a cache's stored form: the fused TurboQuant kernel reads the packed codes
(queries rotated once, scores from codes, values accumulated in the rotated basis), so nothing
is dequantized; dense caches use the SIMD fp16/f32 kernel."""
from __future__ import annotations

import numpy as np

from . import _core
from .cache import _Cache


def attention(queries: np.ndarray, cache: _Cache, scale: float | None = None, causal: bool = True,
              softcap: float = 0.0, threads: int = 0, arithmetic: str = "exact") -> np.ndarray:
    """Attention of ``queries`` ([batch, n_q_heads, n_queries, head_dim], float32/float16) over
    ``cache``. The queries are the cache's newest ``n_queries`` positions (append their keys and
    values first); with ``causal`` each sees the keys up to its own position. ``n_q_heads`` must
    be a multiple of the cache's kv_heads (grouped-query attention). ``scale`` defaults to
    1/sqrt(head_dim). ``arithmetic``: "exact" (float centroids, as dequantize-then-attend) or
    "int8" (TurboQuant codes of 2-4 bits multiplied in integer arithmetic: several times cheaper,
    within ~2% of the exact path's KL on kjv-llama-3M; other caches ignore it). Returns the same
    shape, in the queries' dtype. The GIL is released."""
    if not isinstance(cache, _Cache):
        raise ValueError(f"cache must be a turbokv cache, got {type(cache).__name__}")
    if not isinstance(queries, np.ndarray):
        raise ValueError(f"queries must be a numpy array, got {type(queries).__name__}")
    if queries.ndim != 4:
        raise ValueError(f"queries must be 4-D [batch, n_q_heads, n_queries, head_dim], got shape {queries.shape}")
    if queries.dtype not in (np.float32, np.float16):
        raise ValueError(f"queries must be float32 or float16, got {queries.dtype}")
    if cache.empty():
        raise ValueError("attention over an empty cache")
    if queries.shape[0] != cache.batch_size:
        raise ValueError(f"queries have batch {queries.shape[0]}, the cache {cache.batch_size}")
    if arithmetic not in ("exact", "int8"):
        raise ValueError(f"arithmetic must be 'exact' or 'int8', got {arithmetic!r}")
    outs = [_core.attend(queries[b], layer, scale=scale, causal=causal, softcap=softcap, threads=threads,
                         arithmetic=arithmetic)
            for b, layer in enumerate(cache._layers)]
    out = outs[0][None] if len(outs) == 1 else np.stack(outs)
    return out if out.dtype == queries.dtype else out.astype(queries.dtype)
