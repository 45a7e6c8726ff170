"""What ``kvgate tier`` computes: the LRU curve of a hashed trace, a cache model's hits
for a device pool with and without a host tier, the gate and its boundaries.

Cache models (``CACHE_MODELS``):

- ``lru``: :mod:`kvgate.tier.stack`. A device pool of C_d trace blocks backed by a host
  tier of C_h blocks that takes what the device evicts and gives it back on a hit is one
  LRU stack of C_d + C_h blocks (the host holds stack positions C_d+1 .. C_d+C_h), so
  the host tier adds ``hit(C_d + C_h) − hit(C_d)``, and every boundary is read off the
  one-pass curve.
- ``vllm``: :mod:`kvgate.tier.vllm` (block pool with reverse-order freeing, the native CPU
  offload tier, write-through); ``sglang``: :mod:`kvgate.tier.sglang` (radix tree, HiCache
  write-through host pool). Each is replayed once without and once with the host tier;
  their host-capacity boundary is read off the LRU curve (labelled so).
- ``llama.cpp``: :mod:`kvgate.tier.llamacpp` (slots on the device, ``--cache-ram`` on
  the host); the device alone is the same replay with ``--cache-ram 0``.

An engine's host tier holds copies of what is also on the device (write-through), so it
adds less than the exclusive LRU pair of the ``lru`` model at the same sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from kvgate.errors import KvgateError
from kvgate.geometry.vllm import DEFAULT_BLOCK_SIZE
from kvgate.tier.gate import DEFAULT_MIN_GAIN, Speed, decide, first_capacity_reaching
from kvgate.tier.stack import LruCurve, lru_curve
from kvgate.tier.traces import HashedTrace

CACHE_MODELS = ("lru", "vllm", "sglang", "llama.cpp")
MAX_CURVE_POINTS = 512
LLAMACPP_DEFAULT_CACHE_RAM_MIB = 8192  # common_params.cache_ram_mib (common/common.h, pinned commit)


@dataclass(frozen=True)
class LlamaCppSettings:
    """llama-server settings the ``llama.cpp`` model replays (:class:`~kvgate.tier.llamacpp.LlamaCppServer`)."""

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
    engine_block_size: int = DEFAULT_BLOCK_SIZE,
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
    if cache_model in ("lru", "vllm", "sglang"):
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
            if cache_model != "lru":  # the engine's own model, not plain LRU under its name
                out["device"].update(lru_hit_tokens=dev, **_engine_device_alone(
                    trace, cache_model, device_blocks, device_bytes, bytes_per_token, engine_block_size, prompt))
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
        if cache_model == "vllm":
            from kvgate.tier import vllm as vm

            bs = engine_block_size
            per_block = bs * bytes_per_token
            gpu_blocks = device_blocks * B // bs if device_bytes is None else device_bytes // per_block
            d0, _ = vm.replay(trace, vm.VllmPrefixCache(B, bs, gpu_blocks, 0))
            tiered_v = vm.VllmPrefixCache(B, bs, gpu_blocks, host_bytes // per_block)
            d1, h1 = vm.replay(trace, tiered_v)
            dev, both, stored = int(d0.sum()), int(d1.sum() + h1.sum()), tiered_v.stored_blocks * bs
            out["device"].update({"engine_blocks": gpu_blocks, "block_size": bs, "hit_tokens": dev,
                                  "basis": "vLLM's prefix cache (kvgate.tier.vllm)",
                                  "hit_share": _share(dev, prompt), "lru_hit_tokens": out["device"]["hit_tokens"],
                                  "too_long_requests": len(tiered_v.too_long)})  # fmt: skip
            host_basis = "the LRU curve (an estimate for vllm: replaying every host size is one replay each)"
        elif cache_model == "sglang":
            from kvgate.tier import sglang as sm

            dev_tok = device_blocks * B if device_bytes is None else device_bytes // bytes_per_token
            d0, _ = sm.replay(trace, sm.SglangRadixCache(dev_tok, 0))
            tiered_s = sm.SglangRadixCache(dev_tok, host_bytes // bytes_per_token)
            d1, h1 = sm.replay(trace, tiered_s)
            dev, both, stored = int(d0.sum()), int(d1.sum() + h1.sum()), tiered_s.stored_tokens
            out["device"].update({"device_tokens": dev_tok, "hit_tokens": dev, "hit_share": _share(dev, prompt),
                                  "basis": "SGLang's radix cache (kvgate.tier.sglang)",
                                  "lru_hit_tokens": out["device"]["hit_tokens"]})  # fmt: skip
            host_basis = "the LRU curve (an estimate for sglang: replaying every host size is one replay each)"
        if cache_model != "lru":
            out["host"].update({"hit_tokens": both, "hit_share": _share(both, prompt), "added_hit_tokens": both - dev,
                                "added_hit_share": _share(both - dev, prompt), "stored_tokens": stored,
                                "write_through": True})  # fmt: skip
    else:
        from kvgate.tier.llamacpp import LlamaCppServer, replay

        s = llamacpp or LlamaCppSettings()
        ram = LLAMACPP_DEFAULT_CACHE_RAM_MIB * 2**20 if host_bytes is None else (None if host_bytes < 0 else host_bytes)

        def server(cache_ram: int | None) -> LlamaCppServer:
            return LlamaCppServer(B, n_slots=s.n_slots, n_ctx=s.n_ctx, cache_ram_bytes=cache_ram,
                                  bytes_per_token=bytes_per_token, n_layer=s.n_layer,
                                  n_stream=1 if s.kv_unified else s.n_slots,
                                  slot_prompt_similarity=s.slot_prompt_similarity,
                                  cache_idle_slots=s.cache_idle_slots, kv_unified=s.kv_unified)  # fmt: skip

        dev = int(replay(trace, server(0)).sum())
        out["device"] = {"slots": s.n_slots, "n_ctx": s.n_ctx, "hit_tokens": dev, "hit_share": _share(dev, prompt)}
        tiered = server(ram)
        per = replay(trace, tiered)
        both = int(per.sum())
        stored = tiered.saved_tokens
        out["host"] = {"capacity_bytes": ram, "cache_ram_mib": None if ram is None else ram / 2**20,
                       "hit_tokens": both, "hit_share": _share(both, prompt), "added_hit_tokens": both - dev,
                       "added_hit_share": _share(both - dev, prompt), "stored_tokens": stored,
                       "per_request_cache_n_sum": both}  # fmt: skip
        # host capacity boundary on a doubling grid of --cache-ram (MiB), each one replay
        added_at = []
        for mib in (2**k for k in range(0, 21)):
            a = int(replay(trace, server(mib * 2**20)).sum()) - dev
            added_at.append((mib * 2**20, a))
            if a >= need and a > 0:
                break
        host_from = first_capacity_reaching(added_at, need)
        dev_nothing = None
        host_basis = "llama.cpp replays at --cache-ram 1, 2, 4, ... MiB"
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
            curve.saturation_blocks() if cache_model != "llama.cpp" else None,
    }  # fmt: skip
    return out


def _engine_device_alone(trace: HashedTrace, cache_model: str, device_blocks: int, device_bytes: int | None,
                         bytes_per_token: int, engine_block_size: int, prompt: int) -> dict[str, Any]:
    """The device pool's hits under the engine's model, no host tier (the ``device`` keys)."""
    B = trace.block_tokens
    if cache_model == "vllm":
        from kvgate.tier import vllm as vm

        per_block = engine_block_size * bytes_per_token
        gpu_blocks = device_blocks * B // engine_block_size if device_bytes is None else device_bytes // per_block
        cache = vm.VllmPrefixCache(B, engine_block_size, gpu_blocks, 0)
        d0, _ = vm.replay(trace, cache)
        dev = int(d0.sum())
        return {"engine_blocks": gpu_blocks, "block_size": engine_block_size, "hit_tokens": dev,
                "hit_share": _share(dev, prompt), "too_long_requests": len(cache.too_long),
                "basis": "vLLM's prefix cache (kvgate.tier.vllm)"}  # fmt: skip
    from kvgate.tier import sglang as sm

    dev_tok = device_blocks * B if device_bytes is None else device_bytes // bytes_per_token
    d0, _ = sm.replay(trace, sm.SglangRadixCache(dev_tok, 0))
    dev = int(d0.sum())
    return {"device_tokens": dev_tok, "hit_tokens": dev, "hit_share": _share(dev, prompt),
            "basis": "SGLang's radix cache (kvgate.tier.sglang)"}  # fmt: skip
