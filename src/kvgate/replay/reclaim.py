"""Geometry for trace replay, and the measured paging reclaim for ``kvgate gate --trace``.

:mod:`kvgate.replay.simulate` works on two ints: S(L), the bytes of one contiguous slot, and the
bytes of one block of B positions. This module takes them from a model's geometry
(:class:`kvgate.geometry.KVGeometry`, contiguous layout):

- ``slot_bytes`` = S(L) = ``KVGeometry.slot_bytes(L)`` (full, MLA and sliding layers at
  their contiguous positions, plus linear-layer state);
- ``block_bytes`` = B × Σ bytes per position of the layers whose contiguous slot holds
  all L positions (full attention and MLA; sliding windows only when the window ≥ L or
  the engine allocates sliding layers at full length).

# NOTE: sliding layers capped at their window and linear-layer state do not grow with
# context inside a slot; the replay charges them once per live sequence in both layouts
# (``fixed_bytes``) and counts them as written. Paging them (freeing blocks that slide
# out of the window) is not modelled, so the measured reclaim is conservative for such
# models. This is also why ``block_bytes`` here can be smaller than
# ``KVGeometry.block_bytes`` (which sums every layer with a per-position term).
"""

from __future__ import annotations

from typing import Any

from kvgate.errors import KvgateError
from kvgate.options import EngineOptions, ReplayOptions
from kvgate.replay.simulate import DEFAULT_BLOCK_SIZE, measured_paging_reclaim
from kvgate.replay.trace import load_trace


def replay_geometry(
    model: Any,
    *,
    max_seq: int,
    kv_format: str = "bf16",
    kv_format_v: str | None = None,
    tp: int = 1,
    block_size: int = DEFAULT_BLOCK_SIZE,
    sliding_full: bool = False,
) -> dict[str, Any]:
    """S(L) and per-block bytes of ``model`` for :func:`kvgate.replay.replay`.

    Returns:
        ``{"slot_bytes", "block_bytes", "growing_position_bytes", "fixed_bytes",
        "geometry"}`` (ints of bytes, per tensor-parallel rank; ``geometry`` is
        ``KVGeometry.describe()``).

    Raises:
        KvgateError: bad format / TP split (from the geometry), or no layer whose KV grows
            with context (paging has nothing to reclaim).
    """
    from kvgate.geometry import Contiguous, KVGeometry

    geo = KVGeometry(model, kv_format, kv_format_v=kv_format_v, tp=tp, layout=Contiguous(sliding_full=sliding_full))
    slot = geo.slot_bytes(max_seq)
    growing = sum(row["position_bytes"] for row in geo.by_layer(max_seq) if row["positions"] == max_seq)
    if growing <= 0:
        raise KvgateError(
            f"no layer of {getattr(model, 'name', 'the model')} grows with context at max_seq {max_seq:,}",
            hint="paging reclaims nothing here: every layer is window-capped, linear or shared",
        )
    return {
        "slot_bytes": slot,
        "block_bytes": block_size * growing,
        "growing_position_bytes": growing,
        "fixed_bytes": slot - max_seq * growing,
        "geometry": geo.describe(),
    }


def sliding_full_of(engine: EngineOptions) -> bool:
    """Whether the engine allocates sliding layers at full length: ``--sliding-full``
    (contiguous), vLLM's ``--disable-hybrid-kv-cache-manager``, llama.cpp's ``--swa-full``."""
    lo = engine.layout_options
    return bool(lo.get("sliding_full") or lo.get("disable_hybrid_kv_cache_manager") or lo.get("swa_full"))


def paging_reclaim(
    model: Any,
    engine: EngineOptions,
    replay: ReplayOptions,
    *,
    slots: int,
    max_seq: int | None = None,
    trace: Any = None,
) -> dict[str, Any]:
    """The measured paging reclaim for ``kvgate gate --trace FILE`` as a dict.

    Replays ``replay.trace`` with ``slots`` contiguous slots (N, the gate's target) and a
    budget of N·S(L) for both layouts, pages of ``replay.page_size`` positions; see
    :func:`kvgate.replay.simulate.measured_paging_reclaim` for the keys
    (``measured_reclaim_bytes``, ``bound_bytes``, ``ratio``, ``unwritten_at_peak_bytes``,
    ``warnings``, ``attribution``...), plus ``fixed_bytes_per_sequence``.

    Args:
        model: the :class:`kvgate.model.ModelSpec`.
        engine: KV formats, TP, sliding-full (the geometry; L from ``max_seq`` or
            ``engine.max_seq_for(model)``).
        replay: trace and service model.
        slots: target slots N ≥ 1.
        trace: an already loaded :class:`kvgate.replay.trace.Trace` (else loaded here).

    Raises:
        KvgateError: trace or parameter errors (:class:`kvgate.replay.trace.TraceError`,
            :class:`kvgate.replay.simulate.ReplayError`), target slots below 1, no max_seq.
    """
    if slots < 1:
        raise KvgateError("--trace needs at least one target slot (--slots N ≥ 1)")
    L = max_seq if max_seq is not None else engine.max_seq_for(model)
    if L is None:
        raise KvgateError("--trace needs max_seq", hint="give --max-seq L (vLLM --max-model-len, llama.cpp -c)")
    k, v = engine.formats_for(model)
    geo = replay_geometry(
        model,
        max_seq=L,
        kv_format=k,
        kv_format_v=v,
        tp=engine.tp,
        block_size=replay.page_size,
        sliding_full=sliding_full_of(engine),
    )
    if trace is None:
        trace = load_trace(replay.trace, rate=replay.rate, seed=replay.seed, time_unit=replay.time_unit)
    out = measured_paging_reclaim(
        trace,
        slot_bytes=geo["slot_bytes"],
        block_bytes=geo["block_bytes"],
        max_seq=L,
        slots=slots,
        block_size=replay.page_size,
        speed=replay.speed,
        decode_rate=replay.decode_rate,
    )
    out["fixed_bytes_per_sequence"] = geo["fixed_bytes"]
    return out
