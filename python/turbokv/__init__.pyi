# Type stubs of the turbokv package (editors complete the API from these).
from os import PathLike
from typing import Any, Literal, overload

import numpy as np
import numpy.typing as npt

__version__: str

_Array = npt.NDArray[np.float32] | npt.NDArray[np.float16]
_Path = str | PathLike[str]

class _Cache:
    def update_and_fetch(self, keys: _Array, values: _Array) -> tuple[_Array, _Array]: ...
    def fetch(self, dtype: Any = ...) -> tuple[_Array, _Array]: ...
    @property
    def offset(self) -> int: ...
    def size(self) -> int: ...
    def empty(self) -> bool: ...
    def is_trimmable(self) -> bool: ...
    def trim(self, n: int) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def state(self) -> dict[str, np.ndarray]: ...
    @state.setter
    def state(self, value: dict[str, np.ndarray]) -> None: ...
    @property
    def meta_state(self) -> dict[str, str]: ...
    @meta_state.setter
    def meta_state(self, value: dict[str, str]) -> None: ...
    @classmethod
    def from_state(cls, state: dict[str, np.ndarray], meta_state: dict[str, str]) -> Any: ...

class KVCache(_Cache):
    def __init__(self, dtype: Literal["f16", "f32"] = "f16", page_tokens: int = 256) -> None: ...
    def to_turboquant(self, bits: float = 4, **options: Any) -> TurboQuantKVCache: ...

class TurboQuantKVCache(_Cache):
    def __init__(
        self,
        bits: float = 4,
        key_bits: float | None = None,
        value_bits: float | None = None,
        window: int = 0,
        sinks: int = 0,
        seed: int | None = None,
        key_codec: Literal["mse", "prod"] = "mse",
        rotation: Literal["hadamard", "haar"] = "hadamard",
        norm_correction: bool = True,
        fp32_norm: bool = False,
        center: bool = False,
        exact_dtype: Literal["f16", "f32"] = "f32",
        page_tokens: int = 256,
    ) -> None: ...
    @property
    def bits(self) -> tuple[float, float]: ...

class OtherCache(_Cache): ...

def attention(
    queries: _Array,
    cache: _Cache,
    scale: float | None = None,
    causal: bool = True,
    softcap: float = 0.0,
    threads: int = 0,
    arithmetic: Literal["exact", "int8"] = "exact",
) -> _Array: ...
def save_prompt_cache(path: _Path, caches: list[_Cache], metadata: dict[str, str] | None = None) -> None: ...
@overload
def load_prompt_cache(path: _Path, return_metadata: Literal[False] = False) -> list[_Cache]: ...
@overload
def load_prompt_cache(path: _Path, return_metadata: Literal[True]) -> tuple[list[_Cache], dict[str, str]]: ...
def prompt_cache_info(path: _Path) -> dict[str, Any]: ...

class TurboQuantMse:
    def __init__(
        self,
        dim: int,
        bits: float = 4.0,
        rotation: str = "hadamard",
        seed: int | None = None,
        fp32_norm: bool = False,
        norm_correction: bool = False,
    ) -> None: ...
    @property
    def dim(self) -> int: ...
    @property
    def bits(self) -> float: ...
    @property
    def code_size(self) -> int: ...
    def encode(self, x: npt.NDArray[np.float32]) -> npt.NDArray[np.uint8]: ...
    def decode(self, codes: bytes | bytearray | memoryview | npt.NDArray[np.uint8]) -> npt.NDArray[np.float32]: ...

class TurboQuantProd(TurboQuantMse): ...

def find_model(name: str) -> str: ...

class Model:
    def __init__(self, path: str, tokenizer: str = "", threads: int = 0) -> None: ...
    @staticmethod
    def default(threads: int = 0) -> Model: ...
    @property
    def config(self) -> dict[str, Any]: ...
    def encode(self, text: str, bos: bool = True) -> list[int]: ...
    def decode(self, ids: list[int]) -> str: ...
    def generate(
        self,
        prompt: str,
        max_tokens: int = 128,
        kv_bits: float | None = None,
        key_bits: float | None = None,
        value_bits: float | None = None,
        kv_window: int | None = None,
        kv_sinks: int | None = None,
        cache: str | None = None,
        temperature: float = 0.0,
        top_p: float = 0.9,
        seed: int = 42,
        echo: bool = False,
    ) -> str: ...
    def logits(
        self,
        tokens: list[int],
        kv_bits: float | None = None,
        key_bits: float | None = None,
        value_bits: float | None = None,
        kv_window: int | None = None,
        kv_sinks: int | None = None,
        cache: str | None = None,
    ) -> npt.NDArray[np.float32]: ...
    def cache_config(
        self,
        kv_bits: float | None = None,
        key_bits: float | None = None,
        value_bits: float | None = None,
        kv_window: int | None = None,
        kv_sinks: int | None = None,
        cache: str | None = None,
    ) -> str: ...
