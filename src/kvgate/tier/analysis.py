"""What ``kvgate tier`` computes: the LRU curve of a hashed trace, a cache model's hits
for a device pool with and without a host tier, the gate and its boundaries.

Cache models (``CACHE_MODELS``):

- ``lru``: :mod:`kvgate.tier.stack`. A device pool of C_d trace blocks backed by a host
  tier of C_h blocks that takes what the device evicts and gives it back on a hit is one
  LRU stack of C_d + C_h blocks (the host holds stack positions C_d+1 .. C_d+C_h), so
  the host tier adds ``hit(C_d + C_h) − hit(C_d)``, and every boundary is read off the
  one-pass curve.
- ``vllm``: :mod:`kvgate.engines.vllm.cache` (block pool with reverse-order freeing, the native CPU
  offload tier, write-through); ``sglang``: :mod:`kvgate.engines.sglang.cache` (radix tree, HiCache
  write-through host pool). Each is replayed once without and once with the host tier;
  their host-capacity boundary is read off the LRU curve (labelled so).
- ``llama.cpp``: :mod:`kvgate.engines.llamacpp.cache` (slots on the device, ``--cache-ram`` on
  the host); the device alone is the same replay with ``--cache-ram 0``.

An engine's host tier holds copies of what is also on the device (write-through), so it
adds less than the exclusive LRU pair of the ``lru`` model at the same sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from kvgate.engines.registry import ENGINES, get_engine
from kvgate.errors import KvgateError
from kvgate.tier import progress
from kvgate.tier.gate import DEFAULT_MIN_GAIN, Speed, decide, first_capacity_reaching
from kvgate.tier.stack import LruCurve, lru_curve
from kvgate.tier.traces import HashedTrace

CACHE_MODELS = ("lru", *ENGINES)
MAX_CURVE_POINTS = 512


@dataclass(frozen=True)
class LlamaCppSettings:
    """llama-server settings the ``llama.cpp`` model replays (:class:`~kvgate.engines.llamacpp.cache.LlamaCppServer`)."""

    n_slots: int = 1
    n_ctx: int = 0
    n_layer: int = 0
    kv_unified: bool = False
    slot_prompt_similarity: float = 0.1
    cache_idle_slots: bool = True


def curve_points(curve: LruCurve, block_bytes: int, at: list[int] | None) -> tuple[str, list[dict[str, int]]]:
    """The curve as ``{capacity_blocks, capacity_bytes, hit_tokens}`` rows: at exactly
    ``at``; else every capacity it rises at when there are at most
    :data:`MAX_CURVE_POINTS`; else a log-spaced sample (exact hits at each)."""
    if at:
        caps = np.array(sorted(set(at)), dtype=np.int64)
        how = "at the capacities asked for"
    else:
        caps, _ = curve.changes()
        how = "every capacity the curve rises at"
        if len(caps) > MAX_CURVE_POINTS:
            top = max(curve.saturation_blocks(), 1)
            caps = np.unique(np.round(np.geomspace(1, top, MAX_CURVE_POINTS)).astype(np.int64))
            how = f"{len(caps)} log-spaced capacities from 1 to saturation (exact hits at each)"
    hits = curve.at(caps)
    return how, [{"capacity_blocks": int(c), "capacity_bytes": int(c) * block_bytes, "hit_tokens": int(h)}
                 for c, h in zip(caps, hits)]  # fmt: skip


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def analyze(
    trace: HashedTrace,
    *,
    bytes_per_token: int,
    cache_model: str = "lru",
    device_blocks: int | None = None,
    device_bytes: int | None = None,
    host_bytes: int | None = None,
    engine_block_size: int | None = None,
    llamacpp: LlamaCppSettings | None = None,
    at_capacity_blocks: list[int] | None = None,
    prefill: Speed = Speed(None),
    bandwidth: Speed = Speed(None),
    min_gain: Fraction = DEFAULT_MIN_GAIN,
    sample_rate: float = 1.0,
    curve: LruCurve | None = None,
) -> dict[str, Any]:
    """Everything ``kvgate tier --json`` prints (module docstring).

    Args:
        trace: the hashed trace.
        bytes_per_token: KV bytes per token (per rank) of the model and KV format.
        cache_model: one of :data:`CACHE_MODELS`.
        device_blocks: the device pool in trace blocks (``lru``); ``None``: curve only.
        device_bytes: the device pool in bytes, when given so (the engine models use it
            exactly: vLLM blocks = bytes // (block_size × bytes per token), SGLang tokens =
            bytes // bytes per token).
        engine_block_size: vLLM's ``--block-size``.
        host_bytes: the host tier in bytes (``None``: none; ``llama.cpp``: ``--cache-ram``,
            0 = disabled, and -1 MiB = no limit is ``host_bytes=-1``).
        llamacpp: the server's settings for ``llama.cpp``.
        at_capacity_blocks: report the curve at exactly these capacities.
        prefill, bandwidth: measured prefill tokens/s and host→device B/s with sources.
        min_gain: the least host-tier gain worth having (share of prompt tokens).
        sample_rate: SHARDS rate for the curve (1 = exact).
        curve: the trace's curve when built as it was read (:func:`kvgate.tier.run.read_trace`).

    Raises:
        KvgateError: an unknown cache model, a model that lacks what it needs.
    """
    if cache_model not in CACHE_MODELS:
        raise KvgateError(f"unknown cache model {cache_model!r}", hint=f"one of {', '.join(CACHE_MODELS)}")
    B = trace.block_tokens
    block_bytes = B * bytes_per_token
    if curve is None:
        progress.stage("LRU curve (stack distances)")
        curve = lru_curve(trace, sample_rate=sample_rate)
    how, points = curve_points(curve, block_bytes, at_capacity_blocks)
    prompt = curve.prompt_tokens
    out: dict[str, Any] = {
        "trace": trace.source, "format": trace.format, "attribution": trace.attribution,
        "requests": trace.n_requests, "block_tokens": B, "block_reason": trace.block_reason,
        "bytes_per_token": bytes_per_token, "block_bytes": block_bytes,
        "prompt_tokens": prompt, "unbounded_hit_tokens": curve.unbounded_hit_tokens,
        "unbounded_hit_share": _share(curve.unbounded_hit_tokens, prompt),
        "distinct_blocks": curve.distinct_blocks, "saturation_blocks": curve.saturation_blocks(),
        "saturation_bytes": curve.saturation_blocks() * block_bytes,
        "curve_exact": curve.exact, "sample_rate": sample_rate, "curve_points": how, "curve": points,
        "cache_model": cache_model, "warnings": list(trace.warnings),
    }  # fmt: skip
    need = float(min_gain * prompt)
    host_basis = "the LRU curve"
    engine = None if cache_model == "lru" else get_engine(cache_model)
    if engine is None or engine.tier_on_lru_curve:
        if device_blocks is None:
            if cache_model != "lru":
                raise KvgateError(f"the {cache_model} model needs the device pool",
                                  hint="give --device-capacity BYTES (the KV pool from `kvgate fit` or the engine's "
                                       "log) or --device-blocks N")
            return out
        dev = curve.hit_tokens(device_blocks)
        out["device"] = {"capacity_blocks": device_blocks, "capacity_bytes": device_blocks * block_bytes,
                         "hit_tokens": dev, "hit_share": _share(dev, prompt), "basis": "plain LRU"}  # fmt: skip
        if host_bytes is None:
            if engine is not None:  # the engine's own model, not plain LRU under its name
                out["device"].update(lru_hit_tokens=dev, **engine.tier_device(
                    trace, bytes_per_token=bytes_per_token, device_blocks=device_blocks, device_bytes=device_bytes,
                    engine_block_size=engine_block_size, prompt=prompt))
            return out
        host_blocks = host_bytes // block_bytes
        both = curve.hit_tokens(device_blocks + host_blocks)
        stored = 0
        caps, _ = curve.changes()
        grid = sorted({int(c) - device_blocks for c in caps if c > device_blocks} | {host_blocks})
        added_at = [(h * block_bytes, curve.hit_tokens(device_blocks + h) - dev) for h in grid]
        host_from = first_capacity_reaching(added_at, need)
        # the device pool from which the host tier (of this size) adds less than min_gain
        cap_grid = np.unique(np.concatenate([caps, caps - host_blocks, [0]]))
        cap_grid = cap_grid[cap_grid >= 0]
        gains = curve.at(cap_grid + host_blocks) - curve.at(cap_grid)
        ok = np.flatnonzero(gains >= max(need, 1))
        # gain is constant between grid points: it drops below min_gain at the grid point after the last one
        dev_nothing = (int(cap_grid[ok[-1] + 1]) if ok[-1] + 1 < len(cap_grid) else None) if len(ok) else 0
        out["host"] = {"capacity_bytes": host_bytes, "capacity_blocks": host_blocks, "hit_tokens": both,
                       "hit_share": _share(both, prompt), "added_hit_tokens": both - dev,
                       "added_hit_share": _share(both - dev, prompt), "stored_tokens": stored}  # fmt: skip
        if engine is not None:
            dev, both, stored, host_basis = engine.tier_hits(
                trace, out["device"], bytes_per_token=bytes_per_token, device_blocks=device_blocks,
                device_bytes=device_bytes, host_bytes=host_bytes, engine_block_size=engine_block_size, prompt=prompt)
        if engine is not None:
            out["host"].update({"hit_tokens": both, "hit_share": _share(both, prompt), "added_hit_tokens": both - dev,
                                "added_hit_share": _share(both - dev, prompt), "stored_tokens": stored,
                                "write_through": True})  # fmt: skip
    else:  # the engine replays its own device and host tiers (llama.cpp's slots and --cache-ram)
        dev, both, stored, host_from, host_basis = engine.tier_server(
            trace, out, llamacpp or LlamaCppSettings(), bytes_per_token=bytes_per_token, host_bytes=host_bytes,
            need=need, prompt=prompt)
        dev_nothing = None
    v = decide(prompt_tokens=prompt, device_hit_tokens=dev, tiered_hit_tokens=both, bytes_per_token=bytes_per_token,
               prefill=prefill, bandwidth=bandwidth, stored_tokens=stored, min_gain=min_gain)  # fmt: skip
    out["prefill_tokens_per_s"] = prefill.as_dict()
    out["h2d_bandwidth_bytes_per_s"] = bandwidth.as_dict()
    out["min_gain_share"] = float(min_gain)
    out.update(v.as_dict())
    host_from_bytes = host_from
    out["boundaries"] = {
        "host_capacity_bytes_from_which_it_pays": host_from_bytes,
        "host_capacity_basis": host_basis,
        "bandwidth_below_which_a_hit_is_slower_bytes_per_s": v.breakeven_bandwidth_bytes_per_s,
        "reuse_share_below_which_it_never_pays": dev / prompt + float(min_gain) if prompt else None,
        "device_pool_blocks_from_which_the_tier_adds_under_min_gain": dev_nothing,
        "device_pool_bytes_from_which_the_tier_adds_under_min_gain":
            None if dev_nothing is None else dev_nothing * block_bytes,
        "device_pool_blocks_at_which_the_tier_adds_nothing":
            curve.saturation_blocks() if engine is None or engine.tier_on_lru_curve else None,
    }  # fmt: skip
    return out

