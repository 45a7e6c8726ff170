"""SGLang's ``--dtype``: the dtype it runs the model in
(``python/sglang/srt/configs/model_config.py`` ``_get_and_verify_dtype``, wheel 0.5.4).

``auto`` is the config's ``torch_dtype``; a float32 (or unstated) one becomes float16,
bfloat16 for Gemma models; the rest as named.

``--kv-cache-dtype auto`` caches in the dtype the model runs in
(``model_executor/model_runner.py`` ``configure_kv_cache_dtype``: ``self.kv_cache_dtype =
self.dtype``, the dtype above): a float32 model under ``--dtype auto`` caches in float16
(bfloat16 for Gemma), under ``--dtype float32`` in float32 (:func:`kv_format`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvgate.errors import KvgateError
from kvgate.fit.dtype import config_dtype, dtype_format, named_dtype


def run_dtype(given: str, config: Mapping[str, Any], gpu_name: str | None) -> tuple[str, str]:
    """``(dtype, how)``: the dtype SGLang runs the model in (module docstring).

    Raises:
        KvgateError: a value SGLang does not take.
    """
    named = named_dtype(given, "SGLang")
    if named is not None:
        return named, f"--dtype {given}"
    cfg = config_dtype(config)
    if cfg in (None, "float32"):
        dt = "bfloat16" if str(config.get("model_type") or "").startswith("gemma") else "float16"
        return dt, f"SGLang's auto: a {cfg or 'float32 (unstated)'} model runs in {dt}"
    return cfg, f"SGLang's auto: the config's {cfg}"


def kv_format(flag: str | None, model_dtype: str | None) -> str | None:
    """SGLang's ``--kv-cache-dtype flag`` as a kvgate KV format, the model run in
    ``model_dtype`` (:func:`run_dtype`'s answer, or the dtype a log states): ``auto`` (or
    ``None``) is that dtype's format (``None`` when it is not known). Its choices
    (``python/sglang/srt/server_args.py``): ``auto``, ``fp8_e5m2``, ``fp8_e4m3`` (0.4), and
    ``bf16``, ``bfloat16``, ``fp4_e2m1`` (0.5; fp4 not modelled); ``fp8`` is read as fp8.

    Raises:
        KvgateError: a dtype SGLang does not take, or fp4_e2m1.
    """
    f = (flag or "auto").lower()
    if f == "auto":
        return dtype_format(model_dtype)
    if f in ("fp8", "fp8_e5m2", "fp8_e4m3"):
        return "fp8"
    if f in ("bf16", "bfloat16"):
        return "bf16"
    if f == "fp4_e2m1":
        raise KvgateError("--kv-cache-dtype fp4_e2m1 (SGLang's mxfp4 KV cache) is not modelled by kvgate",
                          hint="auto, fp8_e4m3, fp8_e5m2, bf16")
    raise KvgateError(f"--kv-cache-dtype {flag!r} is not one of SGLang's", hint="auto, fp8_e4m3, fp8_e5m2, bf16, bfloat16")
