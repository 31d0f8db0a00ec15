"""turbokv: TurboQuant KV-cache compression (Zandieh et al., ICLR 2026) for Python.

The cache API of mlx-lm (``TurboQuantKVCache``, ``KVCache``, ``update_and_fetch``, ``trim``,
``state``, ``save_prompt_cache``/``load_prompt_cache``) over turbokv's C++ caches, which store
packed codes; ``attention`` runs the fused kernel on those codes; ``TurboQuantMse`` /
``TurboQuantProd`` are the vector codecs; ``Model`` runs a Llama-family model
(``Model.default()``: the small model the package ships; ``find_model`` says where a name is
found).

Errors are exceptions: ValueError for shapes, bits, dtypes and non-finite input, OSError for
files. Heavy calls release the GIL.
"""
from ._core import __version__, Model, TurboQuantMse, TurboQuantProd, find_model
from .attention import attention
from .cache import KVCache, OtherCache, TurboQuantKVCache
from .prompt_cache import load_prompt_cache, prompt_cache_info, save_prompt_cache

__all__ = [
    "__version__", "KVCache", "TurboQuantKVCache", "OtherCache", "attention", "save_prompt_cache",
    "load_prompt_cache", "prompt_cache_info", "TurboQuantMse", "TurboQuantProd", "Model", "find_model",
]
