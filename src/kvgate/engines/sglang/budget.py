"""SGLang's default ``--mem-fraction-static`` per release, as an interval of fractions.

SGLang sizes its KV pool as ``mem_fraction_static × free − weights``
(:mod:`kvgate.engines.sglang.fit`); when ``--mem-fraction-static`` is not given the server
picks it, by a rule that changed twice (``python/sglang/srt/server_args.py``):

- **up to 0.4.6** (``ServerArgs.__post_init__``): by tensor parallelism only, 0.79
  (TP ≥ 16), 0.81 (≥ 8), 0.85 (≥ 4), 0.87 (≥ 2), 0.88 (1); a multimodal model × 0.95
  (``model_runner.py``). A point.
- **0.4.7 to 0.5.3** (the rule of 2025-06-10 to 2025-09-27): not read here at a pinned
  release. On GPUs up to 80 GiB the logs of that period match the TP table
  (``tests/data/fit_logs/sglang_2025-07_llama-3.1-8b_24gb-gpu_1.log``: 0.88 at TP 1); on
  larger GPUs the rule raised the fraction: the interval is [the TP table, 0.93].
- **from 0.5.4** (``_handle_gpu_memory_settings``, sgl-project/sglang snapshot 469c63e5):
  ``chunked_prefill_size`` and ``cuda_graph_max_bs`` from the GPU's memory ``gpu_mem`` (MiB:
  < 20 GiB 2048/8; < 35 GiB 2048/24, 80 at TP ≥ 4; < 60 GiB 4096/32, 160; < 90 GiB and
  < 160 GiB 8192/256, 512; else 16384/512), then ``reserved = 512 + 1.5 ×
  max(chunked_prefill_size, 2048) + 2 × cuda_graph_max_bs + tp × pp / 8 × 1024`` MiB, at
  least 10 GiB on GPUs above 60 GiB, and ``round((gpu_mem − reserved) / gpu_mem, 3)``. A
  multimodal model is lowered further (``adjust_mem_fraction_for_vlm``, by the vision
  tower's size: not modelled, the interval reaches 0.1 lower). Data-parallel attention and
  speculative decoding reserve more: not modelled (give the logged value).
"""

from __future__ import annotations

from fractions import Fraction

from kvgate.fit.gpus import Gpu
from kvgate.fit.release import Release
from kvgate.units import MiB

TABLE_UP_TO = (0, 4, 6)
HEURISTIC_FROM = (0, 5, 4)


def tp_table(tp: int, multimodal: bool) -> Fraction:
    """The 0.4 rule (module docstring), exact as a fraction."""
    f = Fraction(79 if tp >= 16 else 81 if tp >= 8 else 85 if tp >= 4 else 87 if tp >= 2 else 88, 100)
    return f * Fraction(95, 100) if multimodal else f


def _buckets(gpu_mib: int, tp: int) -> tuple[int, int]:
    """``(chunked_prefill_size, cuda_graph_max_bs)`` from the GPU's memory (0.5.4 rule)."""
    if gpu_mib < 20 * 1024:
        return 2048, 8
    if gpu_mib < 35 * 1024:
        return 2048, 24 if tp < 4 else 80
    if gpu_mib < 60 * 1024:
        return 4096, 32 if tp < 4 else 160
    if gpu_mib < 160 * 1024:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def heuristic(gpu_mib: int, tp: int, pp: int = 1, chunked_prefill_size: int | None = None) -> Fraction:
    """The 0.5.4 rule for a text model (module docstring), rounded to 3 decimals as SGLang does."""
    chunk, bs = _buckets(gpu_mib, tp)
    chunk = chunked_prefill_size or chunk
    reserved = 512 + Fraction(3, 2) * max(chunk, 2048) + 2 * bs + Fraction(tp * pp * 1024, 8)
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, Fraction(10 * 1024))
    return Fraction(round((gpu_mib - reserved) / gpu_mib * 1000), 1000)


def default_mem_fraction(release: Release, gpu: Gpu, tp: int, *, multimodal: bool = False, pp: int = 1,
                         chunked_prefill_size: int | None = None) -> tuple[Fraction, Fraction, str]:
    """``(low, high, source)`` of the fraction SGLang picks when ``--mem-fraction-static``
    is not given (module docstring: the rule per release)."""
    table = tp_table(tp, multimodal)
    if release.version <= TABLE_UP_TO:
        return table, table, f"SGLang ≤ 0.4.6 default for TP {tp}" + (" × 0.95 (multimodal)" if multimodal else "")
    gpu_mib = gpu.nvml_total_bytes // MiB
    if release.version < HEURISTIC_FROM:
        if gpu_mib <= 80 * 1024:
            return table, table, f"SGLang 0.4.7-0.5.3 default on a GPU ≤ 80 GiB: the TP table ({float(table)})"
        return table, max(table, Fraction(93, 100)), "SGLang 0.4.7-0.5.3 default above 80 GiB: not pinned, [TP table, 0.93]"
    f = heuristic(gpu_mib, tp, pp, chunked_prefill_size)
    if multimodal:
        return f - Fraction(1, 10), f, f"SGLang ≥ 0.5.4 default {float(f)} from {gpu_mib} MiB, lowered for the vision tower"
    return f, f, f"SGLang ≥ 0.5.4 default from {gpu_mib} MiB of GPU memory (reserved for prefill and CUDA graphs)"
