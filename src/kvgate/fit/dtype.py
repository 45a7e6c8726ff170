"""``--dtype``: the dtype vLLM and SGLang run the model in, which the KV cache follows under
``--kv-cache-dtype auto`` and the loaded weights take. ``half``/``float16``, ``bfloat16``,
``float``/``float32`` are taken as named; ``auto`` is each engine's own rule, in its package
(``kvgate/engines/vllm/dtype.py``, ``kvgate/engines/sglang/dtype.py``).

The weights: an unquantized checkpoint is cast to that dtype at load, so its bytes scale
by the ratio of the dtypes' sizes (a bfloat16 checkpoint under ``--dtype float32`` takes
twice its file size). A checkpoint with a ``quantization_config`` is not scaled (its
packed weights keep their format).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvgate.errors import KvgateError

CHOICES = ("auto", "half", "float16", "bfloat16", "float", "float32")
_NAMED = {"half": "float16", "float16": "float16", "bfloat16": "bfloat16", "float": "float32", "float32": "float32"}
_SIZE = {"float16": 2, "bfloat16": 2, "float32": 4}


def _config_dtype(config: Mapping[str, Any]) -> str | None:
    tc = config.get("text_config")
    for where in (config, tc if isinstance(tc, dict) else {}):
        for k in ("torch_dtype", "dtype"):
            v = where.get(k)
            if isinstance(v, str) and v.lower() in _NAMED:
                return _NAMED[v.lower()]
    return None


def named_dtype(given: str, display: str) -> str | None:
    """The dtype ``--dtype given`` names (``None``: ``auto``, the engine's own rule).

    Raises:
        KvgateError: a value the engine (its ``display`` name) does not take.
    """
    g = given.strip().lower()
    if g not in CHOICES:
        raise KvgateError(f"--dtype {given!r} is not one of {display}'s", hint=", ".join(CHOICES))
    return None if g == "auto" else _NAMED[g]


def config_dtype(config: Mapping[str, Any]) -> str | None:
    """The checkpoint's dtype as its config states it (``torch_dtype`` / ``dtype``, also in
    ``text_config``), ``None`` when unstated."""
    return _config_dtype(config)


def dtype_format(dtype: str | None) -> str | None:
    """kvgate's KV format of a dtype a model runs in (``bfloat16``, ``half``, a log's
    ``torch.float16``): what an engine's ``--kv-cache-dtype auto`` caches in. ``None`` when
    the dtype is not known.

    Raises:
        FormatError: a dtype kvgate has no format for.
    """
    if dtype is None:
        return None
    from kvgate.geometry.formats import get_format  # noqa: PLC0415

    return get_format(str(dtype).replace("torch.", "")).name


def model_config(model: Any) -> dict[str, Any]:
    """The config an engine's :meth:`~kvgate.engines.base.Engine.run_dtype` reads for
    ``model`` (:class:`kvgate.model.ModelSpec`): its config.json, with the model's own dtype
    where the config states none (a preset, a GGUF)."""
    cfg = dict(getattr(model, "config", None) or {})
    dtype = getattr(model, "dtype", None)
    if dtype and _config_dtype(cfg) is None and str(dtype).lower() in _NAMED:
        cfg["torch_dtype"] = str(dtype).lower()
    return cfg


def weight_ratio(config: Mapping[str, Any], dtype: str) -> tuple[int, int] | None:
    """``(num, den)``: the loaded weights' bytes over the checkpoint's under ``dtype``;
    ``None`` when not scaled (quantized, or the checkpoint's dtype unstated or the same)."""
    tc = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    if config.get("quantization_config") or (tc or {}).get("quantization_config"):
        return None
    cfg = _config_dtype(config)
    if cfg is None or _SIZE[cfg] == _SIZE[dtype]:
        return None
    return _SIZE[dtype], _SIZE[cfg]
