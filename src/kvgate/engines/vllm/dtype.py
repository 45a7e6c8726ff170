"""vLLM's ``--dtype``: the dtype it runs the model in (``vllm/config/model.py``
``_get_and_verify_dtype`` / ``_resolve_auto_dtype`` / ``_check_valid_dtype``, wheel 0.24.0).

``auto`` is the config's ``torch_dtype``, with a float32 model downcast to the platform's
first supported dtype (bfloat16 on CUDA compute capability ≥ 8.0, float16 before it), and a
dtype the GPU lacks (bfloat16 before 8.0) falling back to it; ``half``/``float16``,
``bfloat16``, ``float``/``float32`` as named. float16 is refused for ``gemma2``,
``gemma3``, ``gemma3_text``, ``plamo2``, ``glm4``: "ValueError: The model type 'gemma3'
does not support float16. Reason: Numerical instability. Please use bfloat16 or float32
instead." (and ``auto`` skips float16 for them).

``--kv-cache-dtype auto`` caches in the dtype the model runs in (``vllm/utils/torch_utils.py``
``kv_cache_dtype_str_to_dtype``: ``if kv_cache_dtype == "auto": return model_config.dtype``,
the dtype above): a float32 model under ``--dtype auto`` caches in bfloat16 (float16 before
8.0), under ``--dtype float32`` in float32 (:func:`kv_format`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kvgate.errors import KvgateError
from kvgate.fit.dtype import config_dtype, dtype_format, named_dtype

FLOAT16_NOT_SUPPORTED = ("gemma2", "gemma3", "gemma3_text", "plamo2", "glm4")
#: GPUs before compute capability 8.0 (no bfloat16): Volta, Turing, Pascal
_BEFORE_SM80 = re.compile(r"(?i)\b(v100|t4|p100|p40|titan rtx|quadro rtx|rtx[ -]?20\d0|gtx|16[56]0)")


def run_dtype(given: str, config: Mapping[str, Any], gpu_name: str | None) -> tuple[str, str]:
    """``(dtype, how)``: the dtype vLLM runs the model in on ``gpu_name`` (module docstring).

    Raises:
        KvgateError: a value vLLM does not take, or float16 for a model vLLM refuses it for
            (its message quoted).
    """
    named = named_dtype(given, "vLLM")
    cfg = config_dtype(config)
    mt = str(config.get("model_type") or "")
    if named is not None:
        dt, how = named, f"--dtype {given}"
    else:
        old_gpu = bool(gpu_name and _BEFORE_SM80.search(gpu_name))
        supported = [d for d in (("float16", "float32") if old_gpu else ("bfloat16", "float16", "float32"))
                     if not (d == "float16" and mt in FLOAT16_NOT_SUPPORTED)]
        want = cfg or "float32"
        if want == "float32":
            dt, how = supported[0], f"vLLM's auto: a float32 model is downcast to {supported[0]}"
        elif want in supported:
            dt, how = want, f"vLLM's auto: the config's {want}"
        else:
            dt, how = supported[0], f"vLLM's auto: {want} is not supported on {gpu_name}: falls back to {supported[0]}"
    if dt == "float16" and mt in FLOAT16_NOT_SUPPORTED:
        raise KvgateError(f"--dtype {given}: vLLM refuses it: ValueError: The model type {mt!r} does not support "
                          "float16. Reason: Numerical instability. Please use bfloat16 or float32 instead.",
                          hint="--dtype bfloat16 or float32")
    return dt, how


def kv_format(flag: str | None, model_dtype: str | None) -> str | None:
    """vLLM's ``--kv-cache-dtype flag`` as a kvgate KV format, the model run in
    ``model_dtype`` (:func:`run_dtype`'s answer, or the dtype a log states): ``auto`` (or
    ``None``) is that dtype's format (``None`` when it is not known);
    ``fp8``/``fp8_e4m3``/``fp8_e5m2``/``fp8_inc``/``fp8_ds_mla`` are fp8 (``vllm/config/cache.py``
    ``CacheDType``); ``bfloat16``/``float16`` as named.

    Raises:
        KvgateError: a value vLLM does not take.
    """
    f = (flag or "auto").lower()
    if f == "auto":
        return dtype_format(model_dtype)
    if f in ("fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla"):
        return "fp8"
    if f in ("bfloat16", "float16", "bf16", "fp16"):
        return "bf16" if "b" in f else "fp16"
    raise KvgateError(f"--kv-cache-dtype {flag!r} is not one of vLLM's", hint="auto, fp8, fp8_e4m3, fp8_e5m2, bfloat16")
