"""llama.cpp's KV cache types: ``-ctk`` / ``-ctv`` default to f16 whatever the model's tensor
types (``common/common.h``: ``ggml_type cache_type_k = GGML_TYPE_F16; // KV cache data type
for the K``, the same for V), and it has no ``--dtype``: it runs the GGUF's tensor types.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvgate.errors import KvgateError

#: ``-ctk`` / ``-ctv`` when not given (``common_params.cache_type_k/v``), in llama.cpp's spelling
DEFAULT_CACHE_TYPE = "f16"


def kv_format(flag: str | None, model_dtype: str | None) -> str:
    """llama.cpp's ``-ctk``/``-ctv flag`` as a kvgate KV format: not given (``None``, or
    ``auto`` from a command line that spells vLLM's default), f16 whatever ``model_dtype``.

    Raises:
        FormatError: a cache type kvgate has no format for.
    """
    from kvgate.geometry.formats import get_format  # noqa: PLC0415

    f = flag if flag and flag.strip().lower() != "auto" else DEFAULT_CACHE_TYPE
    return get_format(f).name


def run_dtype(given: str, config: Mapping[str, Any], gpu_name: str | None) -> tuple[str, str]:
    """``(dtype, how)``: llama.cpp runs the GGUF's tensor types; the config's dtype stands for
    them (float16 when unstated), which its KV cache does not follow (:func:`kv_format`).

    Raises:
        KvgateError: a ``--dtype`` other than ``auto``: llama.cpp has no such flag.
    """
    if given.strip().lower() != "auto":
        raise KvgateError("--dtype is vLLM's and SGLang's flag: llama.cpp runs the GGUF's tensor types",
                          hint="leave --dtype out for llama.cpp (its KV types are -ctk / -ctv)")
    from kvgate.fit.dtype import config_dtype  # noqa: PLC0415

    return config_dtype(config) or "float16", "llama.cpp runs the GGUF's tensor types"
