"""What ``kvgate tier`` does around the analysis: read the trace while the curve is built
(so that neither the ids nor, under SHARDS, the unsampled blocks are kept), show progress,
and say how a host capacity is shared by the GPUs.

**Host capacity units.** The replay is of one GPU's (one rank's) pool, at the bytes per
token of one rank. A host tier is given for the node or the engine, so it is divided by
the ranks that share it:

- vLLM ``--kv-offloading-size`` (vllm/config/cache.py, ``CacheConfig.kv_offloading_size``):
  "Size of the KV cache offloading buffer in GiB. When TP > 1, this is the total buffer
  size summed across all TP ranks." One rank holds ``size / TP``.
- ``--host-capacity``: the host memory of the node given to the tier; the GPUs of one
  replica (its TP ranks) share it evenly, and the output says the per-GPU share.
- SGLang ``--hicache-ratio`` / ``--hicache-size`` GB: per rank already (SGLang 0.5.23,
  ``sglang/srt/mem_cache/pool_host/base.py`` sizes each rank's host pool as
  ``int(host_size * 1e9 // size_per_token)`` tokens, else ``device tokens × ratio``:
  :func:`kvgate.engines.sglang.cache.host_pool_tokens`); not divided by TP.
- llama.cpp ``--cache-ram``: per server process (one per model; no TP ranks).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvgate.tier import progress
from kvgate.tier.stack import LruCurve, curve_builder
from kvgate.tier.stream import TraceStream
from kvgate.tier.traces import HashedTrace


def read_trace(path: str | Path, *, block_tokens: int | None, time_unit: str | None, limit: int | None,
               sample_rate: float, keep_ids: bool) -> tuple[HashedTrace, LruCurve | None]:
    """The trace and, when its block size is known before reading, its LRU curve built
    as it streams (``None`` otherwise: the caller builds it from the kept ids). The
    reading is a stage of the run's progress bar (:mod:`kvgate.tier.progress`).

    Raises:
        TraceError: as :meth:`TraceStream.read`.
    """
    stream = TraceStream(path, block_tokens=block_tokens, time_unit=time_unit, limit=limit)
    builder = curve_builder(stream.block_tokens, sample_rate) if stream.block_tokens is not None else None
    progress.stage(f"reading {Path(path).name}", stream.size, "B")
    trace: HashedTrace = stream.read(on_batch=None if builder is None else builder.add,
                                     keep_ids=keep_ids or builder is None, progress=progress.advance,
                                     lean=sample_rate < 1.0)  # fmt: skip
    return trace, (None if builder is None else builder.result())


def host_share(host_bytes: int, gpus: int, flag: str, *, size_gb: int | None = None) -> dict[str, Any]:
    """What the output says of a host capacity shared by ``gpus`` ranks (module docstring)."""
    from kvgate.units import fmt_human

    if flag == "--hicache-ratio":
        basis = "SGLang's --hicache-ratio: a multiple of one rank's device pool (each TP rank has its own)"
        return {"capacity_basis": basis, "gpus_sharing": 1, "capacity_bytes_given": host_bytes}
    if flag == "--hicache-size":
        basis = (f"SGLang's --hicache-size {size_gb} GB: per rank (each TP rank allocates it), "
                 f"{fmt_human(host_bytes)} of whole tokens")
        return {"capacity_basis": basis, "gpus_sharing": 1, "capacity_bytes_given": (size_gb or 0) * 10**9}
    what = ("vLLM's --kv-offloading-size is the TP ranks' total" if flag == "--kv-offloading-size"
            else "--host-capacity is per node")  # fmt: skip
    basis = f"{what}: {fmt_human(host_bytes)} for {gpus} GPU(s), {fmt_human(host_bytes // gpus)} per GPU replayed"
    return {"capacity_basis": basis, "gpus_sharing": gpus, "capacity_bytes_given": host_bytes}
