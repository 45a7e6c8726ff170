"""The non-KV bands of :mod:`kvgate.engines.vllm.budget` from the startup logs, and the
leave-one-out check that each log's interval holds with bands that never saw it.

Observations (one per printed term, with its printing precision: ``printed_bytes``):

- activation peak: ``(T·w, S, printed)`` of each checked log that prints "torch peak memory
  increase" (``T·w`` the profile run's tokens × per-token width, ``S`` = ``max_num_seqs`` ×
  vocab, from :func:`kvgate.engines.vllm.logcheck.check_logs`);
- non-torch memory of each checked TP-1 log that prints it, by the rule its release measures
  it with (:func:`kvgate.engines.vllm.budget.non_torch_band`: growth since the first snapshot
  for V0 0.7+ and V1 0.9.1+, else V0's 0.6.x rules; at TP ≥ 2 the log's figure carries NCCL
  and custom all-reduce buffers too, the separate term of :mod:`kvgate.engines.vllm.comm`);
- CUDA graph pool of every vLLM log of the manifest that prints it without
  ``--enforce-eager`` (before 0.20 and from 0.20 apart, by the log's release series).

The rule (:func:`calibrate`): the smallest band that meets every observation.

- the activation bands are fitted on the V0 logs only (V1's logits and sampler are the code's,
  :func:`kvgate.engines.vllm.budget.v1_logits_rule`, and its peak is a max, not a sum);
- ``K_HI`` = max over the logs whose sampler is small (``4·S ≤ T·w/10``) of
  ``(printed.low − C_LO·S) / T·w``, rounded up to 0.01; ``K_LO`` = min over all of
  ``(printed.high − C_LO·S) / T·w``, rounded down to 0.01 (at most ``K_HI``);
- ``C_HI`` (V0) = max of ``(printed.low − K_HI·T·w) / S``, rounded up to a byte, at
  least ``C_LO`` (``C_LO`` is the code's floor, :data:`kvgate.engines.vllm.budget.C_LO`);
- non-torch (growth rule; V0 0.6.5 … 0.6.6; V0 0.6.4 and before) and graph pool: ``[min printed.low, max printed.high]``
  in whole MiB; the 0.20+ graph band also holds the earlier graph pools (the same graphs); the
  V0-before-0.7 band starts no higher than the growth band (0.6.x's rules count the growth and
  more: the context, or torch memory other than the weights);
- a band without observations keeps the prior (:data:`kvgate.engines.vllm.budget.BANDS`; the growth
  band, when other figures exist but none of its rule: the hull of it and the V0-before-0.7
  prior, the band every V0 release had before the rules were told apart), and the
  growth band keeps its prior upper end (0.5 GiB: the two 0.19 logs on an A100, which print no
  term, fall 0.02–0.28 GiB below the pool without it; their cause is not printed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from kvgate.atomicio import read_json
from kvgate.engines.vllm.budget import (
    BANDS,
    C_LO,
    V0_PROFILER_FROM,
    V065_RULE_FROM,
    V1_PROFILER_FROM,
    Bands,
    using_bands,
)
from kvgate.engines.vllm.logcheck import LogCase, check_logs, printed_bytes
from kvgate.fit.interval import Interval
from kvgate.fit.release import parse_version
from kvgate.units import MiB

GRAPH_RULE_FROM = (0, 20)


@dataclass(frozen=True)
class Observation:
    """One printed non-KV term of one log.

    Attributes:
        file: the log.
        term: ``activation``, ``non_torch`` or ``cuda_graph``.
        printed: the printed value as the interval its decimals allow, bytes.
        v1: V1 engine (activation, non-torch) / from 0.20 (graph pool).
        growth: non-torch only: the release measures it as growth since the first snapshot
            (V0 0.7+, V1 0.9.1+); ``None``: as ``v1``.
        upto_064: non-torch only: V0 0.6.4 or earlier (all GPU memory in use less torch's
            allocation), else 0.6.5 … 0.6.6's rule when not ``growth``.
        tw: ``T·w`` bytes (activation only).
        logits: ``S = max_num_seqs × vocab`` (activation only).
    """

    file: str
    term: str
    printed: Interval
    v1: bool
    tw: int = 0
    logits: int = 0
    growth: bool | None = None
    upto_064: bool = False


def observations(folder: str | Path, cases: list[LogCase] | None = None) -> list[Observation]:
    """Every printed non-KV term of the logs of ``folder`` (module docstring).

    Raises:
        KvgateError: unreadable manifest or inputs.
    """
    folder = Path(folder)
    cases = check_logs(folder) if cases is None else cases
    out: list[Observation] = []
    for c in cases:
        prof = c.terms.get("profile")
        if c.predicted is None or prof is None:
            continue
        v1 = bool(prof["v1"])
        if "printed torch_peak" in c.terms:
            p = c.terms["printed torch_peak"]
            out.append(Observation(c.file, "activation", Interval(p["low"], p["high"]), v1,
                                   tw=prof["tokens"] * prof["token_bytes"], logits=prof["seqs"] * prof["vocab"]))
        if "printed non_torch_memory" in c.terms and int(prof.get("tp", 1)) == 1:
            # TP ≥ 2 logs carry NCCL buffers too: kvgate.engines.vllm.comm's term, not this band
            p = c.terms["printed non_torch_memory"]
            ver = parse_version(c.release)
            growth = ver >= (V1_PROFILER_FROM if v1 else V0_PROFILER_FROM)
            out.append(Observation(c.file, "non_torch", Interval(p["low"], p["high"]), v1, growth=growth,
                                   upto_064=not v1 and ver < V065_RULE_FROM))
    for e in read_json(folder / "manifest.json", what="fit log manifest"):
        if e["engine"] == "vllm" and e.get("cuda_graph_pool") and not e.get("enforce_eager"):
            late = parse_version(e["release_series"]) >= GRAPH_RULE_FROM
            out.append(Observation(e["file"], "cuda_graph", printed_bytes(e["cuda_graph_pool"]), late))
    return out


def _mib_hull(values: list[Interval]) -> Interval:
    return Interval(min(v.low for v in values) // MiB * MiB, -(-max(v.high for v in values) // MiB) * MiB)


def _floor2(x: Fraction) -> Fraction:
    return Fraction(math.floor(x * 100), 100)


def _ceil2(x: Fraction) -> Fraction:
    return Fraction(math.ceil(x * 100), 100)


def calibrate(obs: list[Observation], prior: Bands = BANDS) -> Bands:
    """The data bands of ``obs`` by the module docstring's rule; ``prior`` where a band has
    no observation."""
    act = [o for o in obs if o.term == "activation" and o.tw > 0 and not o.v1]
    light = [o for o in act if 4 * o.logits * 10 <= o.tw]
    k_hi = max((_ceil2(Fraction(o.printed.low - C_LO * o.logits, o.tw)) for o in light), default=prior.k[1])
    k_lo = min((_floor2(Fraction(o.printed.high - C_LO * o.logits, o.tw)) for o in act), default=prior.k[0])
    k_lo = min(k_lo, k_hi)

    def c_hi(old: tuple[int, int]) -> tuple[int, int]:
        mine = [o for o in act if o.logits > 0]
        if not mine:
            return old
        need = max(math.ceil((o.printed.low - k_hi * o.tw) / o.logits) for o in mine)
        return (C_LO, max(C_LO, need))

    def hull(term: str, v1: bool | None, old: Interval) -> Interval:
        vals = [o.printed for o in obs if o.term == term and (v1 is None or o.v1 == v1)]
        return _mib_hull(vals) if vals else old

    nt = [o for o in obs if o.term == "non_torch"]
    grown = [o.printed for o in nt if (o.v1 if o.growth is None else o.growth)]
    old = [o for o in nt if not (o.v1 if o.growth is None else o.growth)]
    # data without a figure of the growth rule: the hull of both priors (no data at all: the prior)
    growth = _mib_hull(grown) if grown else prior.non_torch_growth if not obs else \
        Interval(min(prior.non_torch_growth.low, prior.non_torch_v0.low), max(prior.non_torch_growth.high, prior.non_torch_v0.high))
    growth = Interval(growth.low, max(growth.high, prior.non_torch_growth.high))  # the prior's upper end stays

    def old_rule(vals: list[Interval], was: Interval) -> Interval:
        band = _mib_hull(vals) if vals else was
        if vals and grown:  # 0.6.x's rules count the growth and more
            band = Interval(min(band.low, growth.low), band.high)
        return band

    v0 = old_rule([o.printed for o in old if not o.upto_064], prior.non_torch_v0)
    v064 = old_rule([o.printed for o in old if o.upto_064], prior.non_torch_v064)
    return Bands(k=(k_lo, k_hi), c_v0=c_hi(prior.c_v0),
                 non_torch_v0=v0, non_torch_growth=growth, non_torch_v064=v064,
                 cuda_graph=hull("cuda_graph", False, prior.cuda_graph),
                 cuda_graph_021=hull("cuda_graph", None, prior.cuda_graph_021))


def contains(outer: Bands, inner: Bands) -> bool:
    """Every band of ``outer`` holds the matching band of ``inner``."""
    def iv(a: Interval, b: Interval) -> bool:
        return a.low <= b.low and b.high <= a.high

    return (outer.k[0] <= inner.k[0] and inner.k[1] <= outer.k[1]
            and outer.c_v0[0] <= inner.c_v0[0] and inner.c_v0[1] <= outer.c_v0[1]
            and iv(outer.non_torch_v0, inner.non_torch_v0) and iv(outer.non_torch_growth, inner.non_torch_growth)
            and iv(outer.non_torch_v064, inner.non_torch_v064)
            and iv(outer.cuda_graph, inner.cuda_graph) and iv(outer.cuda_graph_021, inner.cuda_graph_021))


def leave_one_out(folder: str | Path, cases: list[LogCase] | None = None) -> dict[str, tuple[LogCase, Bands]]:
    """Each checked log of ``folder`` re-checked with :func:`calibrate` of every observation
    but its own (the data rule, no hand margins): ``{file: (case, bands used)}``.

    Raises:
        KvgateError: unreadable manifest or inputs.
    """
    folder = Path(folder)
    cases = check_logs(folder) if cases is None else cases
    obs = observations(folder, cases)
    out: dict[str, tuple[LogCase, Bands]] = {}
    for c in cases:
        if c.predicted is None:
            continue
        bands = calibrate([o for o in obs if o.file != c.file])
        with using_bands(bands):
            out[c.file] = (check_logs(folder, only=c.file)[0], bands)
    return out


def data_bands(folder: str | Path) -> Bands:
    """:func:`calibrate` of every observation of ``folder`` (all logs)."""
    return calibrate(observations(folder))


__all__ = ["Observation", "observations", "calibrate", "contains", "leave_one_out", "data_bands"]
