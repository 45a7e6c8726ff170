"""Will it fit? The memory an inference engine takes at start, before launch, in the
engine's own words.

Modules, one concept each:

- ``interval``: byte intervals and named budget terms;
- ``gpus``: the GPU table (NVML totals, with sources), ``--total``, the local GPU;
- ``release``: which engine release is modelled (given, installed, newest);
- ``humanint``: vLLM's ``32k`` / ``32K`` integers;
- ``widths``: the model widths the profile run's activation peak depends on;
- ``answer``: the :class:`FitAnswer` every engine returns; ``render``: its text;
- ``whatif``: an engine's answer for other settings, from its startup log.

Each engine's own rules (flags and their defaults per release, non-KV terms with their
calibrated bands, pool, verdict and flip points; for vLLM the check of its intervals
against real startup logs) are in its package, :mod:`kvgate.engines.vllm` /
``sglang`` / ``llamacpp``, asked through :func:`kvgate.engines.registry.get_engine`.
"""

from __future__ import annotations

from kvgate.fit.answer import FitAnswer
from kvgate.fit.gpus import Gpu, gpu_from_total, gpu_names, local_gpu, lookup_gpu
from kvgate.fit.humanint import human_readable_int
from kvgate.fit.interval import Interval, Term
from kvgate.fit.release import Release, resolve_release

__all__ = [
    "FitAnswer", "Gpu", "Interval", "Release", "Term", "gpu_from_total", "gpu_names",
    "human_readable_int", "local_gpu", "lookup_gpu", "resolve_release",
]
