"""Request traces for :mod:`kvgate.replay.simulate`: (arrival time, prompt tokens, output tokens).

A :class:`Trace` holds three aligned numpy arrays, one entry per request, sorted by
arrival:

- ``arrival_s``: float64 seconds since the first request (the first is 0.0);
- ``prompt_tokens``: int64 positions written at admission (prefill);
- ``output_tokens``: int64 generated tokens, one position written per token.

Inputs users have (:func:`load_trace`):

- **CSV** (``.csv``, ``.tsv`` or anything not JSON) with a header row, or **JSONL**
  (``.jsonl``/``.ndjson``: one JSON object per line; a ``.json`` file holding a list of
  objects is read too).
- **Public traces** are recognized by their columns (:mod:`kvgate.replay.readers.formats`):
  the Azure LLM inference traces 2023 and 2024, Mooncake, Qwen-Bailian, BurstGPT; each
  carries its attribution. Other files: columns are matched case-insensitively, ignoring
  ``_``/``-``/spaces, against :data:`ARRIVAL_COLUMNS`, :data:`PROMPT_COLUMNS`,
  :data:`OUTPUT_COLUMNS` (the first match in that order wins); a time column may carry
  its unit in its name (``timestamp_ms``).
- Timestamps are numbers or date-times (ISO 8601, e.g. ``2023-11-16 18:15:46.6805900``;
  a time-zone offset is converted to UTC). The unit of numbers is given (``time_unit``,
  ``--time-unit``), named by the column or the format, or detected from the data; an
  ambiguous trace is refused (:mod:`kvgate.replay.timeunits`).
- Without a time column, give an arrival rate: :func:`poisson_arrivals` draws seeded
  exponential gaps (a Poisson process at ``rate`` requests/s).

Reading: pyarrow's columnar reader first (:mod:`kvgate.replay.readers.columnar`: a
million rows in well under a second, memory bounded by the arrays); a file it does not
vouch for is read by the Python reader (:mod:`kvgate.replay.readers.rows`), which accepts
it or names the line at fault. Unsorted timestamps are sorted (stable) and the trace
carries a warning saying so; commands print :attr:`Trace.warnings`. Every other defect is
a :class:`TraceError` naming the file, the row or the columns found, never a traceback.

Synthetic traces (:func:`synthetic_fixed`, :func:`synthetic_lognormal`) and
:func:`resample` exist for tests and benchmarks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kvgate.errors import KvgateError
from kvgate.replay import timeunits
from kvgate.replay.readers import columnar, rows
from kvgate.replay.readers.base import RawColumns, TraceError, norm_column, pick_column
from kvgate.replay.readers.formats import (
    ARRIVAL_COLUMNS,
    AZURE,
    AZURE_ATTRIBUTION,
    OUTPUT_COLUMNS,
    PROMPT_COLUMNS,
    TraceFormat,
    azure_attribution,
    detect_format,
)

__all__ = [
    "ARRIVAL_COLUMNS", "AZURE_ATTRIBUTION", "OUTPUT_COLUMNS", "PROMPT_COLUMNS", "Trace", "TraceError",
    "load_trace", "poisson_arrivals", "resample", "synthetic_fixed", "synthetic_lognormal",
]  # fmt: skip


@dataclass
class Trace:
    """Requests sorted by arrival. Arrays are aligned; see the module docstring for units.

    Attributes:
        arrival_s: float64 seconds since the first request, non-decreasing, first 0.0.
        prompt_tokens: int64 ≥ 0.
        output_tokens: int64 ≥ 0.
        source: where it came from (a path, ``"synthetic fixed"``, ...).
        arrivals: how arrival times were obtained: ``"timestamps"``, ``"poisson"``,
            ``"synthetic"``, ``"resampled"``.
        warnings: things the user must be told (sorting, dropped rows), printed by commands.
        attribution: the data set's required citation, or ``None``.
        format: the recognized public format (``"azure"``, ``"mooncake"``,
            ``"qwen-bailian"``, ``"burstgpt"``), or ``None``.
        time_unit: unit of the file's time column (``"s"``, ``"ms"``, ``"us"``, ``"ns"``,
            ``"datetime"``), ``None`` when times were not read.
        time_unit_reason: how that unit was decided (given, column name, format, data).
    """

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    source: str = "trace"
    arrivals: str = "timestamps"
    warnings: list[str] = field(default_factory=list)
    attribution: str | None = None
    format: str | None = None
    time_unit: str | None = None
    time_unit_reason: str | None = None

    def __post_init__(self) -> None:
        self.arrival_s = np.asarray(self.arrival_s, dtype=np.float64)
        self.prompt_tokens = np.asarray(self.prompt_tokens, dtype=np.int64)
        self.output_tokens = np.asarray(self.output_tokens, dtype=np.int64)
        n = len(self.arrival_s) if self.arrival_s.ndim == 1 else -1
        if n < 0 or self.prompt_tokens.shape != (n,) or self.output_tokens.shape != (n,):
            raise TraceError(f"trace {self.source}: the time, prompt and output columns must be one number per "
                             "request (a list or an object in a cell is not a count)")
        if n == 0:
            raise TraceError(f"trace {self.source} has no requests")
        if not np.all(np.isfinite(self.arrival_s)):
            raise TraceError(f"trace {self.source} has non-finite arrival times")
        if np.any(self.arrival_s[1:] < self.arrival_s[:-1]):
            raise TraceError(f"trace {self.source}: arrival times are not sorted")
        for name, arr in (("prompt", self.prompt_tokens), ("output", self.output_tokens)):
            if arr.min() < 0:
                i = int(np.argmax(arr < 0))
                raise TraceError(f"trace {self.source}: request {i + 1} has negative {name} tokens ({int(arr[i])})")

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def total_tokens(self) -> np.ndarray:
        """Positions each request writes by its end: prompt + output (int64)."""
        return self.prompt_tokens + self.output_tokens

    @property
    def duration_s(self) -> float:
        """Seconds from the first arrival to the last."""
        return float(self.arrival_s[-1] - self.arrival_s[0])

    def describe(self) -> dict:
        """Column statistics (positions are prompt + output tokens) and how times were read."""
        w = self.total_tokens
        return {
            "source": self.source,
            "requests": len(self),
            "arrivals": self.arrivals,
            "format": self.format,
            "time_unit": self.time_unit,
            "time_unit_reason": self.time_unit_reason,
            "duration_s": self.duration_s,
            "mean_prompt_tokens": float(self.prompt_tokens.mean()),
            "mean_output_tokens": float(self.output_tokens.mean()),
            "mean_written_positions": float(w.mean()),
            "max_written_positions": int(w.max()),
            "attribution": self.attribution,
        }


@dataclass
class _Columns:
    """Which columns of a file to read, and what its names say about time units."""

    fmt: TraceFormat | None
    time: str | None
    prompt: str | None
    output: str | None
    name_unit: str | None  # unit named by the time column's suffix ("timestamp_ms")


def _resolve(columns: list[str]) -> _Columns:
    fmt = detect_format(columns)
    if fmt is not None:
        by_norm = {norm_column(c): c for c in reversed(columns)}
        return _Columns(fmt, by_norm[fmt.time], by_norm[fmt.prompt], by_norm[fmt.output], None)
    c_time = pick_column(columns, ARRIVAL_COLUMNS)
    name_unit: str | None = None
    if c_time is None:
        stems: dict[str, tuple[str, str]] = {}
        for c in columns:
            stem, unit = timeunits.split_unit_suffix(c)
            if unit is not None:
                stems.setdefault(stem, (c, unit))
        picked = pick_column(list(stems), ARRIVAL_COLUMNS)
        if picked is not None:
            c_time, name_unit = stems[picked]
    return _Columns(None, c_time, pick_column(columns, PROMPT_COLUMNS), pick_column(columns, OUTPUT_COLUMNS), name_unit)


def _missing(p: Path, cols: _Columns, columns: list[str]) -> None:
    missing = []
    if cols.prompt is None:
        missing.append("prompt tokens (e.g. prompt_tokens, input_tokens, input_len, ContextTokens)")
    if cols.output is None:
        missing.append("output tokens (e.g. output_tokens, completion_tokens, output_len, GeneratedTokens)")
    if missing:
        found = ", ".join(repr(c) for c in columns) or "none"
        raise TraceError(
            f"trace {p} lacks a column for {' and '.join(missing)}; columns found: {found}",
            hint="rename the columns, or convert the file to CSV with arrival_time,prompt_tokens,output_tokens",
        )


def _no_time(p: Path, columns: list[str]) -> TraceError:
    found = ", ".join(repr(c) for c in columns)
    return TraceError(
        f"trace {p} has no arrival-time column (e.g. timestamp, arrival_time, time); columns found: {found}",
        hint="pass --rate R to draw Poisson arrivals at R requests/s",
    )


def _read(p: Path, rate: float | None) -> tuple[RawColumns, _Columns, list[str], object]:
    """Columns chosen, read fast when the file is clean, else by the Python reader."""
    head = columnar.peek(p)
    if head is not None:
        cols = _resolve(head.columns)
        if cols.prompt and cols.output and (cols.time or rate is not None):
            c_time = cols.time if rate is None else None
            raw = columnar.read_columns(p, head, c_time, cols.prompt, cols.output)
            if raw is not None:
                return raw, cols, head.columns, head.first_row.get(cols.time) if cols.time else None
    columns, table, lines = rows.read_rows(p)
    if not table:
        raise TraceError(f"trace {p} has a header but no requests", hint="expected one request per row")
    cols = _resolve(columns)
    _missing(p, cols, columns)
    assert cols.prompt is not None and cols.output is not None
    raw = rows.raw_columns(p, columns, table, lines, None, cols.prompt, cols.output)
    first_time = None
    if rate is None:
        if cols.time is None:
            raise _no_time(p, columns)
        j = columns.index(cols.time)
        raw.time, raw.time_kind = rows.times(p, [r[j] for r in table], lines, cols.time)
        first_time = table[0][j]
    return raw, cols, columns, first_time


def load_trace(
    path: str | Path,
    *,
    rate: float | None = None,
    seed: int = 0,
    time_unit: str | None = None,
) -> Trace:
    """Load a CSV or JSONL trace of (arrival time, prompt tokens, output tokens).

    Args:
        path: the trace file.
        rate: requests/s. When given, arrival times are drawn from a Poisson process at
            this rate (seeded by ``seed``) and any time column is ignored (with a
            warning). Required when the file has no time column.
        seed: seed of the Poisson arrivals.
        time_unit: unit of a numeric time column, one of ``s``, ``ms``, ``us``, ``ns``
            (the CLI's ``--time-unit``). ``None``: from the column name, the format, or
            the data (:mod:`kvgate.replay.timeunits`).

    Returns:
        A :class:`Trace` sorted by arrival (the first at 0 s), with its format, time
        unit and (for public traces) attribution.

    Raises:
        TraceError: missing or empty file, no header, missing columns (the message lists
            the columns found), non-integer or negative tokens (with the line), bad times,
            a time unit that cannot be told from the data, a bad ``time_unit``, or no
            time column and no ``rate``.
    """
    p = Path(path)
    time_unit = timeunits.check_time_unit(time_unit)
    _regular(p)  # a FIFO or /dev/zero: refused before a reader blocks on it or reads it forever
    raw, cols, columns, first_time = _read(p, rate)
    prompt, output = raw.prompt, raw.output
    warns: list[str] = []
    fmt = cols.fmt
    if fmt is AZURE:
        attribution: str | None = azure_attribution(first_time)
    elif fmt is not None:
        attribution = fmt.attribution
    else:
        attribution = AZURE_ATTRIBUTION if "azurellminference" in norm_column(p.name) else None
    unit: str | None = None
    reason: str | None = None
    if rate is not None:
        arrival = poisson_arrivals(len(prompt), rate, seed=seed)
        how = "poisson"
        if cols.time is not None:
            warns.append(
                f"arrival times from a Poisson process at {rate:g} requests/s (seed {seed}); column {cols.time!r} ignored"
            )
    else:
        assert raw.time is not None and cols.time is not None
        how = "timestamps"
        if raw.time_kind == "datetime":
            unit, reason = "datetime", "date-times"
            if time_unit is not None:
                warns.append(f"--time-unit {time_unit} ignored: column {cols.time!r} holds date-times")
            ns = raw.time
            t = (ns - ns.min()).astype(np.float64) / 1e9
        else:
            t = raw.time
            if time_unit is not None:
                unit, reason = time_unit, "given"
            elif cols.name_unit is not None:
                unit, reason = cols.name_unit, f"named by column {cols.time!r}"
            elif fmt is not None and fmt.time_unit is not None:
                unit, reason = fmt.time_unit, f"{fmt.title} format"
            else:
                unit, reason = timeunits.detect_time_unit(t, source=str(p), column=cols.time)
        back = t[1:] < t[:-1]
        backwards = int(np.count_nonzero(back))
        if backwards:
            first = int(np.argmax(back)) + 1
            warns.append(
                f"timestamps in {p.name} were not sorted ({backwards} step(s) back in time, first at line "
                f"{raw.line_of(first)}); requests were sorted by arrival time"
            )
            order = np.argsort(t, kind="stable")
            t = t[order]
            prompt, output = prompt[order], output[order]
        if unit == "datetime":
            arrival = t - t[0]
        else:
            assert unit is not None
            arrival = timeunits.to_relative_seconds(t, unit)
    return Trace(
        arrival,
        prompt,
        output,
        source=str(p),
        arrivals=how,
        warnings=warns,
        attribution=attribution,
        format=fmt.name if fmt else None,
        time_unit=unit,
        time_unit_reason=reason,
    )


def poisson_arrivals(n: int, rate: float, *, seed: int = 0) -> np.ndarray:
    """``n`` arrival times (s) of a Poisson process at ``rate`` requests/s; the first is 0.

    Gaps are i.i.d. exponential with mean 1/rate from ``numpy.random.default_rng(seed)``.

    Raises:
        TraceError: ``rate`` not a positive finite number, or ``n`` < 1.
    """
    if rate is None or not (isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0):
        raise TraceError(f"arrival rate must be a positive number of requests/s, got {rate!r}")
    if n < 1:
        raise TraceError("a trace needs at least one request")
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=n - 1)
    return np.concatenate([[0.0], np.cumsum(gaps)])


def synthetic_fixed(n: int, prompt: int, output: int, *, interval_s: float = 0.0) -> Trace:
    """``n`` identical requests arriving every ``interval_s`` seconds (tests only)."""
    return Trace(
        np.arange(n, dtype=np.float64) * interval_s,
        np.full(n, prompt, dtype=np.int64),
        np.full(n, output, dtype=np.int64),
        source=f"synthetic fixed ({n} x {prompt}+{output})",
        arrivals="synthetic",
    )


def synthetic_lognormal(
    n: int,
    *,
    prompt_median: float = 1000.0,
    output_median: float = 200.0,
    sigma: float = 1.0,
    rate: float = 5.0,
    seed: int = 0,
) -> Trace:
    """``n`` requests with lognormal prompt/output lengths (medians, shape ``sigma``) and
    Poisson arrivals at ``rate`` requests/s (tests only). Lengths are at least 1."""
    rng = np.random.default_rng(seed)
    prompt = np.maximum(1, np.rint(rng.lognormal(math.log(prompt_median), sigma, n))).astype(np.int64)
    output = np.maximum(1, np.rint(rng.lognormal(math.log(output_median), sigma, n))).astype(np.int64)
    return Trace(
        poisson_arrivals(n, rate, seed=seed + 1), prompt, output,
        source=f"synthetic lognormal (n={n}, seed={seed})", arrivals="synthetic",
    )  # fmt: skip


def resample(trace: Trace, n: int, *, seed: int = 0) -> Trace:
    """A trace of ``n`` requests bootstrapped from ``trace`` (benchmarks, tests).

    (prompt, output) pairs are drawn with replacement as pairs; inter-arrival gaps are
    drawn with replacement from the trace's own gaps, so the arrival rate and its
    burstiness are kept. The attribution is kept.
    """
    if n < 1:
        raise TraceError("a trace needs at least one request")
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(trace), size=n)
    gaps = np.diff(trace.arrival_s)
    if len(gaps) == 0:
        gaps = np.zeros(1)
    arrival = np.concatenate([[0.0], np.cumsum(gaps[rng.integers(0, len(gaps), size=n - 1)])])
    return Trace(
        arrival, trace.prompt_tokens[pick], trace.output_tokens[pick],
        source=f"{trace.source} resampled to {n} requests (seed {seed})", arrivals="resampled",
        attribution=trace.attribution,
    )  # fmt: skip


def _regular(p: Path) -> None:
    """Refuse a trace path that is not a regular file (:func:`kvgate.guarded.check_regular`)."""
    from kvgate.guarded import check_regular  # noqa: PLC0415

    try:
        check_regular(p, what="trace")
    except KvgateError as exc:
        if "not found" in exc.message:
            return  # the reader names a missing file as it always has
        raise TraceError(exc.message, hint=exc.hint) from None
