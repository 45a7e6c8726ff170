"""Geometry for trace replay, and the measured paging reclaim for ``kvgate gate --trace``.

:mod:`kvgate.replay.simulate` works on two ints: S(L), the bytes of one contiguous slot, and the
bytes of one block of B positions. This module takes them from a model's geometry
(:class:`kvgate.geometry.KVGeometry`, contiguous layout):

- ``slot_bytes`` = S(L) = ``KVGeometry.slot_bytes(L)`` (full, MLA and sliding layers at
  their contiguous positions, plus linear-layer state);
- ``block_bytes`` = B × Σ bytes per position of the layers whose contiguous slot holds
  all L positions (``full``, ``mla``; ``sliding`` only when its window ≥ L or the engine
  allocates sliding layers at full length).

# NOTE: sliding layers capped at their window and linear-layer state do not grow with
# context inside a slot; the replay charges them once per live sequence in both layouts
# (``fixed_bytes``) and counts them as written. Paging them (freeing blocks that slide
# out of the window) is not modelled, so the measured reclaim is conservative for such
# models. This is also why ``block_bytes`` here can be smaller than
# ``KVGeometry.block_bytes`` (which sums every layer with a per-position term).
"""

from __future__ import annotations

import argparse
from typing import Any

from kvgate.errors import KvgateError
from kvgate.replay.simulate import DEFAULT_BLOCK_SIZE, DEFAULT_DECODE_RATE, measured_paging_reclaim


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
    layout = geo.layout
    growing = sum(
        geo.position_bytes(i)
        for i, layer in enumerate(model.layers)
        if layer.kind in ("full", "mla", "sliding") and layout.positions(layer, max_seq) == max_seq
    )
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


def paging_reclaim_for_gate(args: argparse.Namespace, model: Any) -> dict[str, Any]:
    """The measured paging reclaim for ``kvgate gate --trace FILE`` as a dict.

    Replays ``args.trace`` with ``args.slots`` contiguous slots (N, the gate's target) and
    a budget of N·S(L) for both layouts; see :func:`kvgate.replay.measured_paging_reclaim`
    for the keys (``measured_reclaim_bytes``, ``bound_bytes``, ``ratio``,
    ``unwritten_at_peak_bytes``, ``warnings``, ``attribution``...). Optional attributes
    read from ``args`` when present: ``block_size`` (16), ``speed`` (1.0),
    ``decode_rate`` (50 tokens/s), ``rate`` (Poisson arrivals), ``seed``, ``sliding_full``,
    ``kv_format_v``, ``tp``.

    Raises:
        KvgateError: trace or parameter errors (:class:`kvgate.trace.TraceError`,
            :class:`kvgate.replay.ReplayError`), target slots below 1.
    """
    from kvgate.replay.trace import load_trace

    slots = int(args.slots)
    if slots < 1:
        raise KvgateError("--trace needs at least one target slot (--slots N ≥ 1)")
    block_size = getattr(args, "block_size", None) or DEFAULT_BLOCK_SIZE
    geo = replay_geometry(
        model,
        max_seq=args.max_seq,
        kv_format=args.kv_format,
        kv_format_v=getattr(args, "kv_format_v", None),
        tp=getattr(args, "tp", 1) or 1,
        block_size=block_size,
        sliding_full=bool(getattr(args, "sliding_full", False)),
    )
    trace = load_trace(args.trace, rate=getattr(args, "rate", None), seed=getattr(args, "seed", 0) or 0)
    out = measured_paging_reclaim(
        trace,
        slot_bytes=geo["slot_bytes"],
        block_bytes=geo["block_bytes"],
        max_seq=args.max_seq,
        slots=slots,
        block_size=block_size,
        speed=getattr(args, "speed", None) or 1.0,
        decode_rate=getattr(args, "decode_rate", None) or DEFAULT_DECODE_RATE,
    )
    out["fixed_bytes_per_sequence"] = geo["fixed_bytes"]
    return out


def reclaim_for_gate(args: argparse.Namespace, model: Any) -> int:
    """``measured_reclaim_bytes`` of :func:`paging_reclaim_for_gate` (an int of bytes):
    how much lower the peak of N contiguous slots is when the trace's sequences are laid
    out in blocks instead."""
    return int(paging_reclaim_for_gate(args, model)["measured_reclaim_bytes"])
