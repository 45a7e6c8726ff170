"""``--dtype``: the dtype vLLM and SGLang run the model in, which the KV cache follows under
``--kv-cache-dtype auto`` and the loaded weights take.

**vLLM** (``vllm/config/model.py`` ``_get_and_verify_dtype`` / ``_resolve_auto_dtype`` /
``_check_valid_dtype``, wheel 0.24.0): ``auto`` is the config's ``torch_dtype``, with a
float32 model downcast to the platform's first supported dtype (bfloat16 on CUDA compute
capability ≥ 8.0, float16 before it), and a dtype the GPU lacks (bfloat16 before 8.0)
falling back to it; ``half``/``float16``, ``bfloat16``, ``float``/``float32`` as named.
float16 is refused for ``gemma2``, ``gemma3``, ``gemma3_text``, ``plamo2``, ``glm4``:
"ValueError: The model type 'gemma3' does not support float16. Reason: Numerical
instability. Please use bfloat16 or float32 instead." (and ``auto`` skips float16 for them).

**SGLang** (``python/sglang/srt/configs/model_config.py`` ``_get_and_verify_dtype``, wheel
0.5.4): ``auto`` is the config's ``torch_dtype``; a float32 (or unstated) one becomes
float16, bfloat16 for Gemma models; the rest as named.

The weights: an unquantized checkpoint is cast to that dtype at load, so its bytes scale
by the ratio of the dtypes' sizes (a bfloat16 checkpoint under ``--dtype float32`` takes
twice its file size). A checkpoint with a ``quantization_config`` is not scaled (its
packed weights keep their format).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kvgate.errors import KvgateError

CHOICES = ("auto", "half", "float16", "bfloat16", "float", "float32")
_NAMED = {"half": "float16", "float16": "float16", "bfloat16": "bfloat16", "float": "float32", "float32": "float32"}
_SIZE = {"float16": 2, "bfloat16": 2, "float32": 4}
FLOAT16_NOT_SUPPORTED = ("gemma2", "gemma3", "gemma3_text", "plamo2", "glm4")
#: GPUs before compute capability 8.0 (no bfloat16): Volta, Turing, Pascal
_BEFORE_SM80 = re.compile(r"(?i)\b(v100|t4|p100|p40|titan rtx|quadro rtx|rtx[ -]?20\d0|gtx|16[56]0)")


def _config_dtype(config: Mapping[str, Any]) -> str | None:
    tc = config.get("text_config")
    for where in (config, tc if isinstance(tc, dict) else {}):
        for k in ("torch_dtype", "dtype"):
            v = where.get(k)
            if isinstance(v, str) and v.lower() in _NAMED:
                return _NAMED[v.lower()]
    return None


def resolve_dtype(given: str, config: Mapping[str, Any], engine: str, gpu_name: str | None) -> tuple[str, str]:
    """``(dtype, how)``: the dtype ``engine`` runs the model in (module docstring).

    Raises:
        KvgateError: a value the engine does not take, or float16 for a model vLLM refuses
            it for (its message quoted).
    """
    g = given.strip().lower()
    if g not in CHOICES:
        raise KvgateError(f"--dtype {given!r} is not one of {'vLLM' if engine == 'vllm' else 'SGLang'}'s",
                          hint=", ".join(CHOICES))
    cfg = _config_dtype(config)
    mt = str(config.get("model_type") or "")
    if g != "auto":
        dt, how = _NAMED[g], f"--dtype {given}"
    elif engine == "sglang":
        if cfg in (None, "float32"):
            dt = "bfloat16" if mt.startswith("gemma") else "float16"
            how = f"SGLang's auto: a {cfg or 'float32 (unstated)'} model runs in {dt}"
        else:
            dt, how = cfg, f"SGLang's auto: the config's {cfg}"
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
    if engine == "vllm" and dt == "float16" and mt in FLOAT16_NOT_SUPPORTED:
        raise KvgateError(f"--dtype {given}: vLLM refuses it: ValueError: The model type {mt!r} does not support "
                          "float16. Reason: Numerical instability. Please use bfloat16 or float32 instead.",
                          hint="--dtype bfloat16 or float32")
    return dt, how


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
