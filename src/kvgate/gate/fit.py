"""The concurrency fit: the marginal bytes per sequence from peaks measured at several
concurrency levels, how far it can be trusted, and the fit the gate decides with.

A peak is not linear in the number of sequences: on an H200 (transformers, random-weight
model, StaticCache 8192, prompt 1,500; ``benchmarks/projection_check.py``) the marginal
per sequence was 3.07 GB from 2→4 and 2.63 GB from 4→8, so a 2→4 line over-projected 8
by 3.95% while the KV-only formula under-projected it by 4.7%. Two levels cannot show
that; three or more can. So:

- **Fit and residuals.** :func:`least_squares` is the line through ``(sequences, peak)``
  (exact Fractions); the residuals are measured − fitted peak at each level, in bytes.
- **Interval.** The marginal bytes per sequence β is bracketed by the slopes seen in
  the data: the least-squares slope and every secant between consecutive levels
  (``(P_{k+1} − P_k)/(n_{k+1} − n_k)``). Projected to N from the gated run
  (``P + (N − n)·β``), the lowest and highest β give the interval; the conservative end is
  the highest (or the KV-only projection, if that is higher). With two levels the
  interval is one point: say so, and ask for a third level.
- **Decide on the conservative end.** :func:`conservative_fit` is the fit with the
  highest slope; :meth:`kvgate.gate.decision.DecisionInputs.build_gate` projects with it.
- **Measure the target when it fits.** When even the conservative end fits on the card
  (≤ T) and N was not measured, the target itself can be run: the advice names the
  ``--concurrency`` list with N added.
- **Negative overhead is refused.** β below the KV-only slot bytes S(L0) (overhead
  β − S < 0) means the measured figure does not see each sequence's KV (an engine that
  preallocates its pool, a host figure that under-counts); a tolerance of 2% of S (at
  least 2 MiB) allows for MiB rounding of the peaks. :func:`check_overhead` raises.

All bytes are ``int`` (or exact ``Fraction`` for slopes); nothing here imports torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from kvgate.errors import GateError, KvgateError
from kvgate.units import MiB, fmt_gb, fmt_mib


class NegativeOverheadError(KvgateError):
    """The fitted marginal bytes per sequence is below the KV slot bytes: no verdict."""


@dataclass(frozen=True)
class Fit:
    """Marginal bytes per sequence fitted from peaks at several concurrency levels.

    Attributes:
        points: ``[(sequences, peak_bytes), ...]`` as measured.
        slope: β, bytes per additional sequence (exact Fraction).
        intercept: peak at 0 sequences (exact Fraction).
    """

    points: tuple[tuple[int, int], ...]
    slope: Fraction
    intercept: Fraction


def least_squares(points: Sequence[tuple[int, int]]) -> tuple[Fraction, Fraction]:
    """``(slope, intercept)`` of the least-squares line through ``(n, peak_bytes)``, exact::

        slope = (k·Σxy − Σx·Σy) / (k·Σx² − (Σx)²),  intercept = ȳ − slope·x̄

    Raises:
        GateError: fewer than two distinct ``n``.
    """
    pts = [(int(n), int(p)) for n, p in points]
    if len({n for n, _ in pts}) < 2:
        raise GateError("a concurrency fit needs peaks at two or more different sequence counts")
    k = len(pts)
    sx, sy = sum(n for n, _ in pts), sum(p for _, p in pts)
    sxx, sxy = sum(n * n for n, _ in pts), sum(n * p for n, p in pts)
    slope = Fraction(k * sxy - sx * sy, k * sxx - sx * sx)
    return slope, Fraction(sy, k) - slope * Fraction(sx, k)


def _secants(points: Sequence[tuple[int, int]]) -> tuple[Fraction, ...]:
    """Slopes between consecutive levels (sorted by sequences), bytes per sequence."""
    srt = sorted(points)
    return tuple(Fraction(p2 - p1, n2 - n1) for (n1, p1), (n2, p2) in zip(srt, srt[1:]) if n2 != n1)


def fit_marginal(points: Sequence[tuple[int, int]]) -> Fit:
    """The least-squares :class:`Fit` through ``(sequences, peak_bytes)`` points.

    Raises:
        GateError: fewer than two distinct sequence counts.
    """
    pts = tuple((int(n), int(p)) for n, p in points)
    slope, intercept = least_squares(pts)
    return Fit(pts, slope, intercept)


def conservative_fit(points: Sequence[tuple[int, int]]) -> Fit:
    """The :class:`Fit` to decide with: with three or more levels, the line of the
    highest marginal seen (least-squares or a secant) through the least-squares centroid;
    with two, the least-squares fit itself.

    Projecting up from the gated run (N > n) with the highest slope gives the interval's
    conservative end (:func:`project_sweep`).

    Raises:
        GateError: fewer than two distinct sequence counts.
    """
    fit = fit_marginal(points)
    pts = fit.points
    if len({n for n, _ in pts}) < 3:
        return fit
    hi = max([fit.slope, *_secants(pts)])
    k = len(pts)
    mx, my = Fraction(sum(n for n, _ in pts), k), Fraction(sum(p for _, p in pts), k)
    return Fit(pts, hi, my - hi * mx)


@dataclass(frozen=True)
class SweepProjection:
    """A sweep's fit, residuals and projected interval at the target.

    Attributes:
        points: ``[(sequences, peak_bytes)]`` sorted by sequences.
        slope, intercept: the least-squares line (bytes per sequence, bytes).
        residuals: measured − fitted peak per point, bytes (rounded to the nearest int).
        secants: slopes between consecutive levels, bytes per sequence.
        from_level, from_peak: the gated run the projection starts from.
        target: N.
        kv_only_bytes: the KV-only projection at N (given by the caller, from the gate).
        low_bytes, fit_bytes, high_bytes: projected peak at N with the lowest slope, the
            least-squares slope and the highest slope (ceil), from the gated run.
        total_bytes, limit_bytes: T and ⌊(1 − m)·T⌋ of the gated run.
    """

    points: tuple[tuple[int, int], ...]
    slope: Fraction
    intercept: Fraction
    residuals: tuple[int, ...]
    secants: tuple[Fraction, ...]
    from_level: int
    from_peak: int
    target: int
    kv_only_bytes: int | None
    low_bytes: int
    fit_bytes: int
    high_bytes: int
    total_bytes: int
    limit_bytes: int

    @property
    def conservative_bytes(self) -> int:
        """The end the decision should use: the highest of the interval and KV-only."""
        return max(self.high_bytes, self.kv_only_bytes or 0)

    @property
    def has_interval(self) -> bool:
        return len(self.points) >= 3

    def lines(self) -> list[str]:
        """The projection block for the output and the record's notes."""
        pts = ", ".join(f"{n}: {fmt_mib(p)}" for n, p in self.points)
        out = [f"concurrency sweep peaks: {pts}",
               f"least-squares marginal per sequence {fmt_gb(round(self.slope))} ({round(self.slope):,} B)"]
        if self.has_interval:
            res = ", ".join(f"{n}: {r:+,} B" for (n, _), r in zip(self.points, self.residuals))
            sec = ", ".join(f"{a}→{b}: {fmt_gb(round(s))}" for ((a, _), (b, _)), s
                            in zip(zip(self.points, self.points[1:]), self.secants))
            out += [f"residuals (measured − fit): {res}", f"marginal per sequence between levels: {sec}",
                    f"projected peak at {self.target}: {fmt_mib(self.low_bytes)} … {fmt_mib(self.high_bytes)} "
                    f"(fit {fmt_mib(self.fit_bytes)}; interval from the lowest and highest marginal seen)"]
        else:
            out.append(f"projected peak at {self.target} from the fit: {fmt_mib(self.fit_bytes)}; two levels show "
                       "no curvature and give no interval: add a third level (e.g. --concurrency "
                       f"{','.join(str(n) for n, _ in self.points)},{max(2 * self.points[-1][0], self.target)})")
        if self.kv_only_bytes is not None:
            out.append(f"KV-only projection at {self.target}: {fmt_mib(self.kv_only_bytes)}")
        c = self.conservative_bytes
        fits = "fits under" if c <= self.limit_bytes else "exceeds"
        out.append(f"conservative end {fmt_mib(c)} {fits} the gate limit {fmt_mib(self.limit_bytes)}")
        adv = self.advice()
        if adv:
            out.append(adv)
        return out

    def advice(self) -> str | None:
        """When the target was not measured but its conservative projection fits on the
        card, the ``--concurrency`` list that measures it."""
        levels = [n for n, _ in self.points]
        if self.target in levels or self.target <= 0:
            return None
        if self.conservative_bytes <= self.total_bytes:
            want = ",".join(str(n) for n in sorted(set(levels) | {self.target}))
            return (f"the target {self.target} sequences fits on this card by the conservative projection "
                    f"({fmt_mib(self.conservative_bytes)} ≤ T {fmt_mib(self.total_bytes)}): measure it instead of "
                    f"projecting: --concurrency {want}")
        return None


def project_sweep(points: Sequence[tuple[int, int]], *, from_level: int, from_peak: int, target: int,
                  total_bytes: int, limit_bytes: int, kv_only_bytes: int | None = None,
                  fit_offset_bytes: int = 0) -> SweepProjection:
    """Fit, residuals and the interval at ``target`` (module docstring).

    Args:
        points: ``(sequences, peak_bytes)`` of every level, at least two distinct levels.
        from_level, from_peak: the gated run (n, P).
        target: N.
        total_bytes, limit_bytes: T and the gate limit.
        kv_only_bytes: the gate's KV-only projection, shown and used for the conservative end.
        fit_offset_bytes: what the gate adds besides ``(N − n)·β`` (weights what-if,
            ``N·(S(L) − S(L0))`` when max_seq changes), so the three projections match
            the gate's ``fit_target``.

    Raises:
        GateError: fewer than two distinct levels.
    """
    pts = tuple(sorted((int(n), int(p)) for n, p in points))
    slope, intercept = least_squares(pts)
    residuals = tuple(int(round(p - (intercept + slope * n))) for n, p in pts)
    secants = _secants(pts)
    slopes = [slope, *secants]

    def at(beta: Fraction) -> int:
        return math.ceil(from_peak + fit_offset_bytes + (target - from_level) * beta)

    ends = [at(b) for b in slopes]
    return SweepProjection(pts, slope, intercept, residuals, secants, from_level, from_peak, target,
                           kv_only_bytes, min(ends), at(slope), max(ends), total_bytes, limit_bytes)


def check_overhead(slope: Fraction, slot_bytes_measured: int, *, where: str = "") -> None:
    """Refuse a fit whose marginal per sequence is below the KV slot bytes S(L0).

    Tolerance: 2% of S, at least 2 MiB (peaks rounded to a MiB by nvidia-smi; allocator
    block rounding).

    Raises:
        NegativeOverheadError: ``slope − S < −tolerance``, with the explanation.
    """
    tol = max(2 * MiB, slot_bytes_measured // 50)
    over = slope - slot_bytes_measured
    if over >= -tol:
        return
    raise NegativeOverheadError(
        f"the concurrency fit gives {fmt_mib(round(slope))} per sequence, less than the KV slot S "
        f"{fmt_mib(slot_bytes_measured)}: a per-sequence overhead of {fmt_mib(round(over))}, which cannot be "
        f"(each sequence holds at least its KV){where}. The measured figure does not see each sequence's KV: "
        "an engine that preallocates its pool, or a host figure (MemTotal − MemAvailable) that under-counts. "
        "No verdict from this sweep",
        hint="check that the levels really run that many sequences; on the host use a cgroup or the process-tree "
             "figure; for an engine with a preallocated pool gate its pool (kvgate gate --engine-log)")
