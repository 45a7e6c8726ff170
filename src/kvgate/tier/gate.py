"""The gate for a host KV tier: does the prefill it saves outweigh the loads it costs?

Terms (tokens and bytes are ints; times in seconds; rates as given):

    H_d    prompt tokens the device pool alone serves from cache (a cache model's replay)
    H_dh   the same with the host tier added;  ΔH = H_dh − H_d  (the host tier's hits)
    b      KV bytes per token (the geometry: ``KVGeometry.bytes_per_token``)
    r      measured prefill speed, tokens/s        W  measured host→device bandwidth, B/s
    S      tokens written to the host tier (engines that write through; 0 otherwise)
    g      the least gain worth having, a share of all prompt tokens (default 1%)

    benefit = ΔH / r                    (prefill the host tier's hits skip)
    cost    = ΔH·b / W  +  S·b / W      (bytes loaded, and stored where the engine writes through)
    verdict = not-a-bottleneck  if ΔH < g × prompt tokens (the tier adds no hits worth having)
              pays              if benefit > cost
              insufficient      if benefit ≤ cost (a hit is slower than recomputing it)
              pays-if           r or W not available: it pays if W > b·r·(1 + S/ΔH)

The verdict words are :data:`kvgate.gate.verdict.VERDICTS`' (``pays-if`` states its
condition). Boundaries, each with the others held: the host capacity from which
ΔH ≥ g (from the cache model's curve), the bandwidth below which a hit is slower than
recomputing (``W* = b·r·(1 + S/ΔH)``), the trace's reuse share below which no host tier
pays (the unbounded hit share must exceed the device's share plus g), and the device
pool from which the host tier adds less than g.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

DEFAULT_MIN_GAIN = Fraction(1, 100)


@dataclass(frozen=True)
class Speed:
    """A measured rate and where it was measured (``source``); ``value`` ``None`` = not
    available."""

    value: float | None
    source: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"value": self.value, "source": self.source if self.value is not None else "not available"}


@dataclass(frozen=True)
class TierVerdict:
    """The gate's answer (module docstring)."""

    verdict: str
    reason: str
    added_hit_tokens: int
    benefit_s: float | None
    cost_s: float | None
    breakeven_bandwidth_bytes_per_s: float | None
    condition: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "verdict": self.verdict, "reason": self.reason, "added_hit_tokens": self.added_hit_tokens,
            "benefit_s": self.benefit_s, "cost_s": self.cost_s,
            "breakeven_bandwidth_bytes_per_s": self.breakeven_bandwidth_bytes_per_s, "condition": self.condition,
        }  # fmt: skip


def decide(
    *,
    prompt_tokens: int,
    device_hit_tokens: int,
    tiered_hit_tokens: int,
    bytes_per_token: int,
    prefill: Speed,
    bandwidth: Speed,
    stored_tokens: int = 0,
    min_gain: Fraction = DEFAULT_MIN_GAIN,
) -> TierVerdict:
    """The verdict for one device pool and host tier (module docstring).

    Raises:
        ValueError: a rate ≤ 0, ``bytes_per_token`` < 1, ``min_gain`` outside [0, 1).
    """
    if bytes_per_token < 1:
        raise ValueError("bytes_per_token must be >= 1")
    if not 0 <= min_gain < 1:
        raise ValueError("min_gain must be in [0, 1)")
    for s, name in ((prefill, "prefill speed"), (bandwidth, "host->device bandwidth")):
        if s.value is not None and s.value <= 0:
            raise ValueError(f"{name} must be > 0")
    added = tiered_hit_tokens - device_hit_tokens
    need = min_gain * prompt_tokens
    amort = 1 + Fraction(stored_tokens, added) if added > 0 else Fraction(1)
    w_star = float(bytes_per_token * amort * Fraction(prefill.value)) if prefill.value is not None else None
    if added <= 0 or added < need:
        return TierVerdict("not-a-bottleneck",
                           f"the host tier adds {added:,} hit tokens, under {float(min_gain):.1%} of the "
                           f"{prompt_tokens:,} prompt tokens", added, None, None, w_star)  # fmt: skip
    if prefill.value is None or bandwidth.value is None:
        if w_star is not None:
            cond = f"host->device bandwidth > {w_star:,.0f} B/s ({w_star / 1e9:.3g} GB/s)"
        else:
            cond = f"host->device bandwidth (B/s) > {float(bytes_per_token * amort):,.0f} B x prefill speed (tokens/s)"
        return TierVerdict("pays-if", "prefill speed or host->device bandwidth not available", added, None, None,
                           w_star, cond)  # fmt: skip
    benefit = added / prefill.value
    cost = (added + stored_tokens) * bytes_per_token / bandwidth.value
    moved = "loads and write-through stores" if stored_tokens else "loads"
    if benefit > cost:
        return TierVerdict("pays", f"the host tier's hits save {benefit:.4g} s of prefill for {cost:.4g} s of "
                           f"{moved}", added, benefit, cost, w_star)  # fmt: skip
    return TierVerdict("insufficient", f"the host tier's {moved} take {cost:.4g} s, recomputing its hits "
                       f"{benefit:.4g} s", added, benefit, cost, w_star)  # fmt: skip


def first_capacity_reaching(added_at: list[tuple[int, int]], need: float) -> int | None:
    """The smallest capacity of ``[(capacity, added hit tokens), ...]`` (ascending) whose
    gain reaches ``need``; ``None`` if none does."""
    for cap, added in added_at:
        if added >= need and added > 0:
            return cap
    return None
