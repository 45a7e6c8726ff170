"""The plain LRU prefix cache's hit curve for every capacity: which builder computes it.

The one-pass rule (Mattson et al. 1970, with SHARDS sampling) and its numpy builder are in
:mod:`kvgate.tier.curve`; the compiled builder in :mod:`kvgate.tier.kernel`, the sampled one
in :mod:`kvgate.tier.shards`. This module picks among them (:func:`curve_builder`) and
builds a trace's curve (:func:`lru_curve`).
"""

from __future__ import annotations

from typing import Any

from kvgate.tier.curve import LruCurve, LruCurveBuilder, count_greater_before, spatial_hash24
from kvgate.tier.traces import HashedTrace

__all__ = ["LruCurve", "LruCurveBuilder", "count_greater_before", "curve_builder", "lru_curve", "spatial_hash24"]


def curve_builder(block_tokens: int, sample_rate: float = 1.0, *, compiled: bool | None = None) -> Any:
    """A curve builder (``add``, ``result``): under SHARDS (``sample_rate`` < 1)
    :class:`kvgate.tier.shards.SampledCurveBuilder` (numpy, without numba's memory);
    exact, the compiled one (:class:`kvgate.tier.kernel.CompiledCurveBuilder`) when numba
    imports, else :class:`LruCurveBuilder`; ``compiled`` forces one (tests compare them).

    Raises:
        ValueError: ``sample_rate`` outside (0, 1].
    """
    if not 0.0 < sample_rate <= 1.0:
        raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate}")
    if compiled is None and sample_rate < 1.0:
        from kvgate.tier.shards import SampledCurveBuilder

        return SampledCurveBuilder(block_tokens, sample_rate)
    from kvgate.tier import kernel

    if compiled is None:
        compiled = kernel.HAVE_NUMBA
    if compiled:
        return kernel.CompiledCurveBuilder(block_tokens, sample_rate)
    return LruCurveBuilder(block_tokens, sample_rate)


def lru_curve(trace: HashedTrace, *, sample_rate: float = 1.0, segment_accesses: int = 1 << 20,
              compiled: bool | None = None) -> LruCurve:
    """The LRU hit curve of ``trace`` for every capacity (module docstring), compiled
    when numba imports (:func:`curve_builder`).

    Raises:
        ValueError: ``sample_rate`` outside (0, 1]; a trace read without its ids.
    """
    if not trace.ids_kept:
        raise ValueError("the trace was read without its ids: build the curve while reading")
    if compiled is False or (compiled is None and segment_accesses != 1 << 20):
        b: Any = LruCurveBuilder(trace.block_tokens, sample_rate, segment_accesses)
        if not 0.0 < sample_rate <= 1.0:
            raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate}")
    else:
        b = curve_builder(trace.block_tokens, sample_rate, compiled=compiled)
    b.add(trace.input_length, trace.offsets, trace.ids)
    out: LruCurve = b.result()
    return out
