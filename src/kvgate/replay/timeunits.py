"""Which unit a numeric time column is in, and refusing to guess when the data can't say.

Read as seconds, a Mooncake trace (milliseconds) stretches one hour of traffic over 41
days and the measured paging reclaim collapses (``benchmarks/RESULTS.md``, "Trace replay": 6.1% of the bound instead of
75.6%). The unit of a numeric time column is taken from, in order:

1. the caller (``time_unit``, the CLI's ``--time-unit s|ms|us|ns``);
2. the column name: a unit suffix such as ``timestamp_ms``, ``arrival_time_s``,
   ``time (us)``;
3. the recognized format (:mod:`kvgate.replay.readers.formats`: Mooncake ms, BurstGPT
   and Qwen-Bailian s);
4. the data:

   - **epoch stamps**: when every value lies between 1990-01-01 and 2100-01-01 read in
     exactly one unit (s: 6.3e8–4.1e9, ms: 6.3e11–4.1e12, µs: 6.3e14–4.1e15, ns:
     6.3e17–4.1e18), that unit;
   - **relative offsets**: seconds when requests arrive at least once a minute on
     average (mean gap ≤ 60 in the file's numbers), or when no unit makes the span
     plausible (read in milliseconds it would still exceed a year: the replay then says
     how long the trace is). Otherwise (sparser than one a minute as seconds, yet at most
     a year as milliseconds) both readings are plausible and the trace is **refused**
     with both readings shown and the hint to pass ``--time-unit``.

Date-time columns carry their own unit; a ``time_unit`` given for one is ignored with a
warning.
"""

from __future__ import annotations

import re

import numpy as np

from kvgate.replay.readers.base import TraceError

UNIT_SECONDS: dict[str, float] = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
"""Seconds per unit of each ``time_unit``."""  # fmt: skip
TIME_UNITS = tuple(UNIT_SECONDS)

_EPOCH_LO_S = 631_152_000  # 1990-01-01T00:00:00Z
_EPOCH_HI_S = 4_102_444_800  # 2100-01-01T00:00:00Z
_MAX_MEAN_GAP = 60.0  # seconds between requests on average, at most, for seconds to go unasked
_MAX_MS_SPAN_S = 366 * 86400  # a millisecond reading longer than this is not plausible

_SUFFIXES = {
    "s": "s", "sec": "s", "secs": "s", "second": "s", "seconds": "s",
    "ms": "ms", "msec": "ms", "millis": "ms", "millisecond": "ms", "milliseconds": "ms",
    "us": "us", "usec": "us", "micros": "us", "microsecond": "us", "microseconds": "us", "µs": "us",
    "ns": "ns", "nsec": "ns", "nanos": "ns", "nanosecond": "ns", "nanoseconds": "ns",
}  # fmt: skip
_SUFFIX_RE = re.compile(
    r"^(.*?)(?:[\s_\-\.]+[\(\[]?|[\(\[])\s*(" + "|".join(sorted(_SUFFIXES, key=len, reverse=True)) + r")\s*[\)\]]?$"
)


def check_time_unit(unit: str | None) -> str | None:
    """``unit`` if it is one of :data:`TIME_UNITS` (or ``None``).

    Raises:
        TraceError: any other value, naming the accepted ones.
    """
    if unit is None or unit in UNIT_SECONDS:
        return unit
    raise TraceError(f"time unit must be one of {', '.join(TIME_UNITS)}, got {unit!r}", hint="--time-unit s|ms|us|ns")


def split_unit_suffix(column: str) -> tuple[str, str | None]:
    """``"timestamp_ms"`` → ``("timestamp", "ms")``; ``"time (s)"`` → ``("time", "s")``;
    a name without a separated unit suffix → ``(column, None)``."""
    m = _SUFFIX_RE.match(column.strip().lower())
    if not m or not m.group(1) or m.group(1) == column.strip().lower():
        return column, None
    return column.strip()[: len(m.group(1))], _SUFFIXES[m.group(2)]


def _epoch_unit(lo: float, hi: float) -> str | None:
    hits = [u for u, sec in UNIT_SECONDS.items() if _EPOCH_LO_S <= lo * sec and hi * sec <= _EPOCH_HI_S]
    return hits[0] if len(hits) == 1 else None


def detect_time_unit(values: np.ndarray, *, source: str, column: str) -> tuple[str, str]:
    """The unit of numeric times ``values`` (file order, any dtype), and how it was decided.

    Returns:
        ``(unit, reason)``, e.g. ``("ms", "epoch milliseconds")``.

    Raises:
        TraceError: relative times for which seconds and milliseconds are both plausible
            (module docstring), with both readings and the ``--time-unit`` hint.
    """
    n = len(values)
    if n == 0:
        return "s", "no requests"
    return detect_time_unit_of_range(float(np.min(values)), float(np.max(values)), n, source=source, column=column)


def detect_time_unit_of_range(lo: float, hi: float, n: int, *, source: str, column: str) -> tuple[str, str]:
    """:func:`detect_time_unit` from what it reads of the times: the least ``lo``, the
    greatest ``hi`` and how many (``n`` ≥ 1), for a reader that streams them.

    Raises:
        TraceError: as :func:`detect_time_unit`.
    """
    unit = _epoch_unit(lo, hi)
    if unit is not None:
        return (
            unit,
            f"epoch {'seconds' if unit == 's' else unit}: values {lo:.6g}..{hi:.6g} fall in 1990-2100 only as {unit}",
        )
    span = hi - lo
    if n < 2 or span == 0:
        return "s", "a single arrival time"
    gap = span / (n - 1)
    if gap <= _MAX_MEAN_GAP:
        return "s", f"relative seconds (one request every {gap:.3g} s on average)"
    if span / 1000 > _MAX_MS_SPAN_S:
        return "s", "relative seconds (no unit gives a span under a year)"
    raise TraceError(
        f"trace {source}: the unit of column {column!r} is ambiguous: {n:,} requests spanning {span:,.6g}; "
        f"as seconds that is one request every {_human(gap)} over {_human(span)}, as milliseconds one every "
        f"{_human(gap / 1000)} over {_human(span / 1000)}",
        hint="say which: --time-unit s or --time-unit ms (or us, ns); or name the column with its unit, "
             "e.g. timestamp_ms",
    )  # fmt: skip


def _human(seconds: float) -> str:
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.3g} days"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.3g} hours"
    if seconds >= 120:
        return f"{seconds / 60:.3g} minutes"
    return f"{seconds:.3g} s"


def to_relative_seconds(values: np.ndarray, unit: str) -> np.ndarray:
    """``values`` (sorted, in ``unit``) as float64 seconds after the first.

    Seconds subtract in the values' own dtype (so numbers stay as the file gave them);
    other units subtract exactly in int64 when the values are whole, then divide.
    """
    if unit == "s":
        return (values - values[0]).astype(np.float64)
    per_s = round(1 / UNIT_SECONDS[unit])
    v = values
    if v.dtype.kind == "f" and np.all(np.abs(v) < 2**53) and np.all(v == np.floor(v)):
        v = v.astype(np.int64)
    return (v - v[0]).astype(np.float64) / per_s
