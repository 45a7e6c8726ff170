"""Will it fit? The memory an inference engine takes at start, before launch, in the
engine's own words.

Modules, one concept each:

- ``interval``: byte intervals and named budget terms;
- ``gpus``: the GPU table (NVML totals, with sources), ``--total``, the local GPU;
- ``release``: which engine release is modelled (given, installed, newest);
- ``humanint``: vLLM's ``32k`` / ``32K`` integers;
- ``widths``: the model widths the profile run's activation peak depends on;
- ``vllm_flags``: vLLM's memory flags and their defaults per release;
- ``vllm_budget``: vLLM's non-KV terms with their calibrated bands (the calibration rule
  and its data are in that module's docstring);
- ``vllm_fit``: pool, log lines, verdict and flip points under vLLM;
- ``sglang_flags``, ``sglang_fit``: the same under SGLang (``max_total_num_tokens``);
- ``llamacpp_fit``: llama.cpp's buffers, ``-c`` and ``-ngl`` flip points;
- ``answer``: the :class:`FitAnswer` every engine returns; ``render``: its text;
- ``logcheck``: the check of the intervals against real startup logs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from kvgate.fit.answer import FitAnswer
from kvgate.fit.gpus import Gpu, gpu_from_total, gpu_names, local_gpu, lookup_gpu
from kvgate.fit.humanint import human_readable_int
from kvgate.fit.interval import Interval, Term
from kvgate.fit.release import Release, resolve_release

if TYPE_CHECKING:
    from kvgate.engines.vllm.budget import weights_term
    from kvgate.engines.vllm.fit import fit_vllm
    from kvgate.engines.vllm.flags import VllmFlags

# vLLM's rules live in kvgate.engines.vllm, which imports this package: loaded on first use.
_LAZY = {"weights_term": "kvgate.engines.vllm.budget", "fit_vllm": "kvgate.engines.vllm.fit",
         "VllmFlags": "kvgate.engines.vllm.flags"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "FitAnswer", "Gpu", "Interval", "Release", "Term", "VllmFlags", "fit_vllm", "gpu_from_total", "gpu_names",
    "human_readable_int", "local_gpu", "lookup_gpu", "resolve_release", "weights_term",
]
