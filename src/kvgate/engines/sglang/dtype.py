"""SGLang's ``--dtype``: the dtype it runs the model in
(``python/sglang/srt/configs/model_config.py`` ``_get_and_verify_dtype``, wheel 0.5.4).

``auto`` is the config's ``torch_dtype``; a float32 (or unstated) one becomes float16,
bfloat16 for Gemma models; the rest as named.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvgate.fit.dtype import config_dtype, named_dtype


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
