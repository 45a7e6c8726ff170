"""The gate: verdicts, candidates and flip boundaries (DESIGN.md §3). Pure functions.

Terms (all ``int`` bytes; ratios as ``Fraction``):

    T   total memory of the domain            P   measured peak used
    n   slots allocated at the measured peak  N   target slots
    L0  max_seq when measured                 L   target max_seq
    S(L) slot bytes (geometry)                m   safety margin (default 10% of T)
    ΔW  extra resident weights (what-if)      R   a candidate's reclaim at the target

    P_target = P + ΔW + (N − n)·S(L) + n·(S(L) − S(L0))     # = P + ΔW + N·S(L) − n·S(L0)
    limit    = ⌊(1 − m)·T⌋        # an int of bytes; P_target is an int, so ≤ is unchanged
    verdict  = not-a-bottleneck  if P_target ≤ limit
               pays              if P_target − R ≤ limit, R measured or exact
               pays-if           if P_target − R ≤ limit, R only a bound (paging without
                                 --trace): it pays only if the reclaim reaches
                                 P_target − limit, stated as a share of the bound
               insufficient      otherwise (even the whole bound is not enough)
    sensitivity = N·S(L) / H,  H = T − P   (> 10% → re-measure on any change: gate/source_case.py)

When the workload was measured at two or more concurrency levels, the marginal bytes per
sequence β are fitted (:mod:`kvgate.gate.fit`) and a second projection is made,
``P_fit = P + ΔW + (N − n)·β + N·(S(L) − S(L0))``; the gate then uses the larger of the
two projections, and shows both with the per-sequence overhead β − S(L0).

Boundaries hold every other variable at its measured/target value and solve for the value
at which the verdict changes: card memory T, max_seq L, slots N, resident weights ΔW.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from kvgate.errors import GateError
from kvgate.gate.fit import Fit
from kvgate.gate.weights_policy import WeightsPolicy

VERDICTS = ("not-a-bottleneck", "pays", "pays-if", "insufficient", "no-verdict")
CANDIDATES = ("paging", "tiering", "kv-quant")
DEFAULT_MARGIN = Fraction(1, 10)
DEFAULT_SENSITIVITY = Fraction(1, 10)
MAX_SEQ_SEARCH_LIMIT = 1 << 24  # 16,777,216 positions: boundaries beyond are "none"


SlotFn = Callable[[int], int]


@dataclass(frozen=True)
class Scenario:
    """One set of gate inputs; boundaries vary one field at a time.

    Attributes:
        total_bytes: T.
        peak_bytes: P, the measured peak.
        idle_bytes: U0 (``None`` = not available).
        slots_measured: n.
        slots_target: N.
        max_seq_measured: L0.
        max_seq: L (target).
        weights_delta_bytes: ΔW, extra resident weights (what-if; 0 = as measured).
        margin: m, a fraction of T kept free.
        total_measured_bytes: T when measured (for the weights policy).
    """

    total_bytes: int
    peak_bytes: int
    slots_measured: int
    slots_target: int
    max_seq_measured: int
    max_seq: int
    idle_bytes: int | None = None
    weights_delta_bytes: int = 0
    margin: Fraction = DEFAULT_MARGIN
    total_measured_bytes: int | None = None

    def __post_init__(self) -> None:
        # The types and ranges are :class:`kvgate.gate.schema.ScenarioCheck`'s (ints,
        # not bools or floats; counts ≥ 0; T, L, L0 ≥ 1; margin in [0, 1)).
        check, validation_error, message = _scenario_check()
        try:
            check({f: getattr(self, f) for f in _SCENARIO_FIELDS})
        except validation_error as exc:
            raise GateError(message(exc, "scenario")) from exc

    @property
    def limit(self) -> int:
        """⌊(1 − m)·T⌋ bytes. For an integer P_target, P_target ≤ (1 − m)·T exactly when
        P_target ≤ ⌊(1 − m)·T⌋, so rounding down changes no verdict."""
        return math.floor((1 - Fraction(self.margin)) * self.total_bytes)


_SCENARIO_FIELDS = ("total_bytes", "peak_bytes", "slots_measured", "slots_target", "max_seq_measured", "max_seq",
                    "idle_bytes", "weights_delta_bytes", "margin", "total_measured_bytes")


_CHECK: list[Any] = []


def _scenario_check() -> tuple[Any, type[Exception], Any]:
    """``ScenarioCheck.model_validate``, imported once (pydantic loads on first use)."""
    if not _CHECK:
        from pydantic import ValidationError

        from kvgate.gate.schema import ScenarioCheck, validation_message

        _CHECK.extend([ScenarioCheck.model_validate, ValidationError, validation_message])
    return _CHECK[0], _CHECK[1], _CHECK[2]


@dataclass(frozen=True)
class Candidate:
    """An optimization under evaluation, by its reclaim R at the target.

    Attributes:
        name: ``paging``, ``tiering`` or ``kv-quant``.
        reclaim_fn: R as a function of the scenario (bytes).
        bound_text: how R is bounded, in words (shown in the table).
        measured: whether R is measured (e.g. from a trace replay) rather than a bound.
        bound_only: R is an upper bound that the optimization may not reach (paging's
            N·S assumes every slot empty): it can only "pay if" (without a trace, a
            verdict "pays" would hold at any slot count, because the bound grows with N).
    """

    name: str
    reclaim_fn: Callable[[Scenario], int] = field(compare=False)
    bound_text: str = ""
    measured: bool = False
    bound_only: bool = False


def paging_candidate(slot_fn: SlotFn, measured_reclaim_bytes: int | None = None) -> Candidate:
    """Paging: reclaim ≤ the unwritten part of every slot, bounded by the whole mirror
    N·S(L) (gate/source_case.py's case: ≤ 396 MiB per slot, 0 at a full window). With a measured
    reclaim (trace replay), that number is used instead."""
    if measured_reclaim_bytes is not None:
        return Candidate("paging", lambda sc: measured_reclaim_bytes, "measured from trace replay", True)
    return Candidate("paging", lambda sc: sc.slots_target * slot_fn(sc.max_seq),
                     "≤ unwritten part of every slot (bound: N·S, 0 at a full window)", bound_only=True)


def tiering_candidate(slot_fn: SlotFn) -> Candidate:
    """Tiering (host residency): reclaim ≤ the KV that could leave the device, N·S(L)."""
    return Candidate("tiering", lambda sc: sc.slots_target * slot_fn(sc.max_seq),
                     "≤ KV that could leave the device (bound: N·S)")


def kv_quant_candidate(slot_fn: SlotFn, new_slot_fn: SlotFn, new_format: str) -> Candidate:
    """KV quantization to ``new_format``: R = N·(S_old(L) − S_new(L)), i.e. N·S·(1 − new/old);
    0 when the new format is not smaller."""
    def r(sc: Scenario) -> int:
        return max(0, sc.slots_target * (slot_fn(sc.max_seq) - new_slot_fn(sc.max_seq)))
    return Candidate("kv-quant", r, f"N·(S − S_{new_format}) (1 − new/old bytes)")


# --------------------------------------------------------------------------- evaluation

@dataclass
class Gate:
    """Everything the gate needs besides the scenario: geometry and policies.

    Attributes:
        slot_fn: S(L) in bytes (from :class:`kvgate.geometry.KVGeometry`).
        candidates: the optimizations to judge.
        policy: resident-weights policy (card-memory boundary).
        fit: concurrency fit, or ``None``.
        sensitivity_threshold: N·S / H above which a verdict is flagged (10%).
    """

    slot_fn: SlotFn
    candidates: list[Candidate]
    policy: WeightsPolicy = field(default_factory=WeightsPolicy)
    fit: Fit | None = None
    sensitivity_threshold: Fraction = DEFAULT_SENSITIVITY

    # -- projections
    def kv_only_target(self, sc: Scenario) -> int:
        """P_target from the KV-only formula (plus ΔW and the weights policy)."""
        s_l, s_l0 = self.slot_fn(sc.max_seq), self.slot_fn(sc.max_seq_measured)
        return sc.peak_bytes + self._weights(sc) + sc.slots_target * s_l - sc.slots_measured * s_l0

    def fit_target(self, sc: Scenario) -> int | None:
        """P_target projected from the concurrency fit (rounded up), or ``None``."""
        if self.fit is None:
            return None
        s_l, s_l0 = self.slot_fn(sc.max_seq), self.slot_fn(sc.max_seq_measured)
        proj = (sc.peak_bytes + self._weights(sc) + (sc.slots_target - sc.slots_measured) * self.fit.slope
                + sc.slots_target * (s_l - s_l0))
        return math.ceil(proj)

    def target(self, sc: Scenario) -> int:
        """The projection the verdict uses: the larger of KV-only and fit."""
        fit = self.fit_target(sc)
        kv = self.kv_only_target(sc)
        return kv if fit is None else max(kv, fit)

    def _weights(self, sc: Scenario) -> int:
        base = sc.total_measured_bytes or sc.total_bytes
        return sc.weights_delta_bytes + self.policy.delta_bytes(sc.total_bytes, base)

    def fits(self, sc: Scenario, reclaim: int = 0) -> bool:
        """``P_target − reclaim ≤ (1 − m)·T``."""
        return self.target(sc) - reclaim <= sc.limit

    def verdict(self, sc: Scenario, cand: Candidate) -> str:
        """One of ``not-a-bottleneck``, ``pays``, ``pays-if`` (a bound-only reclaim that
        would be enough if reached: see :meth:`required_reclaim`), ``insufficient``."""
        if self.fits(sc):
            return "not-a-bottleneck"
        if self.fits(sc, cand.reclaim_fn(sc)):
            return "pays-if" if cand.bound_only and not cand.measured else "pays"
        return "insufficient"

    def required_reclaim(self, sc: Scenario) -> int:
        """Bytes an optimization must free for the target to fit: max(0, P_target − limit).

        For the case of gate/source_case.py at 99 slots (T = 32,607 MiB, P = 19,625 MiB, S = 396 MiB,
        n = 4): 57,245 MiB − ⌊0.9·T⌋ ≈ 27,898.7 MiB, 71.2% of the bound N·S = 39,204 MiB.
        """
        return max(0, self.target(sc) - sc.limit)

    def sensitivity(self, sc: Scenario) -> Fraction | None:
        """N·S(L) / H; ``None`` when there is no headroom."""
        h = sc.total_bytes - sc.peak_bytes
        return Fraction(sc.slots_target * self.slot_fn(sc.max_seq), h) if h > 0 else None

    # -- boundaries
    def boundaries(self, sc: Scenario) -> dict[str, dict[str, Any]]:
        """Where "fits without the optimization" flips, one variable at a time.

        Returns a dict keyed ``total_bytes``, ``max_seq``, ``slots``, ``weights_delta_bytes``;
        each value has ``value`` (an int: the smallest card that fits, the largest max_seq
        and slot count that fit, the weight slack in bytes; ``None`` when no flip exists in
        range), ``direction`` (``below``/``above``: the side on which it no longer fits),
        ``now`` (the value held) and ``fits_now``.
        """
        fits_now = self.fits(sc)
        out: dict[str, dict[str, Any]] = {}

        # Card memory: smallest T that fits (monotone: limit grows 1 − m per byte,
        # resident weights grow at most 1/2 per byte under half-free).
        t_min = _search_min(lambda t: self.fits(replace(sc, total_bytes=t)), 1, max(sc.total_bytes, 1) * 64)
        out["total_bytes"] = {"value": t_min, "direction": "below", "now": sc.total_bytes}

        # max_seq: largest L that fits.
        l_max = _search_max(lambda L: self.fits(replace(sc, max_seq=L)), 1, MAX_SEQ_SEARCH_LIMIT)
        out["max_seq"] = {"value": None if l_max == MAX_SEQ_SEARCH_LIMIT else l_max, "direction": "above",
                          "now": sc.max_seq}

        # Slots: largest N that fits (linear in N for the KV-only and fit projections).
        n_max = _search_max(lambda n: self.fits(replace(sc, slots_target=n)), 0, max(sc.slots_target, 1) * 1_000_000)
        out["slots"] = {"value": n_max, "direction": "above", "now": sc.slots_target}

        # Resident weights: the slack (negative: how much lighter they would have to be).
        slack = sc.limit - self.target(replace(sc, weights_delta_bytes=0))
        out["weights_delta_bytes"] = {"value": slack, "direction": "above", "now": sc.weights_delta_bytes}
        for b in out.values():
            b["fits_now"] = fits_now
        return out

    def candidate_boundaries(self, sc: Scenario, cand: Candidate) -> dict[str, int | str | None]:
        """Where the candidate stops being enough (pays → insufficient), per variable.

        Values: an int, ``None`` (not even at the most favourable value), or ``"never"``
        (it stays enough across the whole search range: 64× the card, 16,777,216
        positions, a million times the slots).
        """
        def ok(s: Scenario) -> bool:
            return self.fits(s, cand.reclaim_fn(s))

        n_hi = max(sc.slots_target, 1) * 1_000_000
        l_max = _search_max(lambda L: ok(replace(sc, max_seq=L)), 1, MAX_SEQ_SEARCH_LIMIT)
        n_max = _search_max(lambda n: ok(replace(sc, slots_target=n)), 0, n_hi)
        return {
            "total_bytes": _search_min(lambda t: ok(replace(sc, total_bytes=t)), 1, max(sc.total_bytes, 1) * 64),
            "max_seq": "never" if l_max == MAX_SEQ_SEARCH_LIMIT else l_max,
            "slots": "never" if n_max == n_hi else n_max,
        }


def _search_min(pred: Callable[[int], bool], lo: int, hi: int) -> int | None:
    """Smallest x in [lo, hi] with pred(x), pred monotone (False… then True…)."""
    if not pred(hi):
        return None
    if pred(lo):
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _search_max(pred: Callable[[int], bool], lo: int, hi: int) -> int | None:
    """Largest x in [lo, hi] with pred(x), pred monotone (True… then False…)."""
    if not pred(lo):
        return None
    first_false = _search_min(lambda x: not pred(x), lo, hi)
    return hi if first_false is None else first_false - 1
