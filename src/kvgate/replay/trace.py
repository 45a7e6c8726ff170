"""Request traces for :mod:`kvgate.replay.simulate`: (arrival time, prompt tokens, output tokens).

A :class:`Trace` holds three aligned numpy arrays, one entry per request, sorted by
arrival:

- ``arrival_s``: float64 seconds since the first request (the first is 0.0);
- ``prompt_tokens``: int64 positions written at admission (prefill);
- ``output_tokens``: int64 generated tokens, one position written per token.

Inputs users have (:func:`load_trace`):

- **CSV** (``.csv``, ``.tsv`` or anything not JSON) with a header row, or **JSONL**
  (``.jsonl``/``.ndjson``: one JSON object per line; a ``.json`` file holding a list of
  objects is read too). Columns are matched case-insensitively, ignoring ``_``/``-``/
  spaces, against :data:`ARRIVAL_COLUMNS`, :data:`PROMPT_COLUMNS`,
  :data:`OUTPUT_COLUMNS` (the first match in that order wins). The Azure LLM inference
  trace 2023 (``TIMESTAMP, ContextTokens, GeneratedTokens``) is one such shape.
- Timestamps are either numbers (seconds) or date-times (ISO 8601, e.g.
  ``2023-11-16 18:15:46.6805900``; a time-zone offset is converted to UTC).
- Without a time column, give an arrival rate: :func:`poisson_arrivals` draws seeded
  exponential gaps (a Poisson process at ``rate`` requests/s).

Unsorted timestamps are sorted (stable) and the trace carries a warning saying so;
commands print :attr:`Trace.warnings`. Every other defect is a :class:`TraceError`
naming the file, the row or the columns found, never a traceback.

Synthetic traces (:func:`synthetic_fixed`, :func:`synthetic_lognormal`) and
:func:`resample` exist for tests and benchmarks.
"""

from __future__ import annotations

import csv
import json
import math
import re
import warnings as _warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kvgate.errors import KvgateError

# Column names, normalized (lower case, no "_", "-", " "), in priority order.
ARRIVAL_COLUMNS = (
    "timestamp", "arrivaltime", "arrivaltimes", "arrivals", "arrival", "arrivaltimestamp",
    "time", "times", "ts", "t", "starttime", "requesttime", "createdat", "created",
)  # fmt: skip
PROMPT_COLUMNS = (
    "prompttokens", "inputtokens", "inputlen", "inputlength", "contexttokens",
    "promptlen", "promptlength", "numprompttokens", "numinputtokens", "prompttokencount",
    "inputtokencount", "requesttokens", "prompt", "input",
)  # fmt: skip
OUTPUT_COLUMNS = (
    "outputtokens", "completiontokens", "outputlen", "outputlength", "generatedtokens",
    "numoutputtokens", "numgeneratedtokens", "outputtokencount", "completiontokencount",
    "responsetokens", "decodetokens", "generated", "output", "completion",
)  # fmt: skip

AZURE_ATTRIBUTION = (
    "Azure LLM inference trace 2023 (CC-BY 4.0): Patel et al., \"Splitwise: Efficient "
    "generative LLM inference using phase splitting\", ISCA 2024"
)
_AZURE_COLUMNS = ("timestamp", "contexttokens", "generatedtokens")

_MAX_REPORTED_ROWS = 5


class TraceError(KvgateError):
    """A trace file or trace parameters cannot be used (missing columns, bad values...)."""


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
    """

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    source: str = "trace"
    arrivals: str = "timestamps"
    warnings: list[str] = field(default_factory=list)
    attribution: str | None = None

    def __post_init__(self) -> None:
        self.arrival_s = np.asarray(self.arrival_s, dtype=np.float64)
        self.prompt_tokens = np.asarray(self.prompt_tokens, dtype=np.int64)
        self.output_tokens = np.asarray(self.output_tokens, dtype=np.int64)
        n = len(self.arrival_s)
        if len(self.prompt_tokens) != n or len(self.output_tokens) != n:
            raise TraceError("trace arrays differ in length")
        if n == 0:
            raise TraceError(f"trace {self.source} has no requests")
        if not np.all(np.isfinite(self.arrival_s)):
            raise TraceError(f"trace {self.source} has non-finite arrival times")
        if np.any(np.diff(self.arrival_s) < 0):
            raise TraceError(f"trace {self.source}: arrival times are not sorted")
        for name, arr in (("prompt", self.prompt_tokens), ("output", self.output_tokens)):
            if np.any(arr < 0):
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
        """Column statistics (positions are prompt + output tokens)."""
        w = self.total_tokens
        return {
            "source": self.source,
            "requests": len(self),
            "arrivals": self.arrivals,
            "duration_s": self.duration_s,
            "mean_prompt_tokens": float(self.prompt_tokens.mean()),
            "mean_output_tokens": float(self.output_tokens.mean()),
            "mean_written_positions": float(w.mean()),
            "max_written_positions": int(w.max()),
            "attribution": self.attribution,
        }


def _norm(name: str) -> str:
    return re.sub(r"[\s_\-\.]", "", str(name)).lower()


def _pick(columns: list[str], candidates: tuple[str, ...]) -> str | None:
    normed = {}
    for c in columns:
        normed.setdefault(_norm(c), c)
    for cand in candidates:
        if cand in normed:
            return normed[cand]
    return None


def _read_rows(path: Path) -> tuple[list[str], list[list], list[int]]:
    """Columns, rows (lists of cell values) and the file line number of each row."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise TraceError(f"trace file not found: {path}") from None
    except IsADirectoryError:
        raise TraceError(f"trace path is a directory, not a file: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"cannot read trace {path}: {exc}") from None
    if not text.strip():
        raise TraceError(f"trace {path} is empty", hint="expected CSV with a header row or JSONL, one request per row")
    suffix = path.suffix.lower()
    first = text.lstrip()[:1]
    if suffix in (".jsonl", ".ndjson", ".json") or first in ("{", "["):
        return _read_json_rows(path, text)
    return _read_csv_rows(path, text)


def _read_csv_rows(path: Path, text: str) -> tuple[list[str], list[list], list[int]]:
    delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    if delimiter == "," and "," not in text.splitlines()[0] and "\t" in text.splitlines()[0]:
        delimiter = "\t"
    reader = csv.reader(text.splitlines(), delimiter=delimiter)
    try:
        header = next(reader)
    except (StopIteration, csv.Error) as exc:  # pragma: no cover - empty handled above
        raise TraceError(f"trace {path} has no header row: {exc}") from None
    header = [h.strip() for h in header]
    rows, lines = [], []
    try:
        for line_no, row in enumerate(reader, start=2):
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != len(header):
                raise TraceError(f"trace {path}, line {line_no}: {len(row)} fields, the header has {len(header)}")
            rows.append(row)
            lines.append(line_no)
    except csv.Error as exc:
        raise TraceError(f"trace {path} is not valid CSV: {exc}") from None
    return header, rows, lines


def _read_json_rows(path: Path, text: str) -> tuple[list[str], list[list], list[int]]:
    objs: list[tuple[int, dict]] = []
    stripped = text.lstrip()
    data = None
    if stripped.startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            if exc.msg != "Extra data":  # more than one value: JSONL whose lines are not objects
                raise TraceError(f"trace {path} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    if isinstance(data, list):
        for i, obj in enumerate(data, start=1):
            if not isinstance(obj, dict):
                raise TraceError(f"trace {path}: item {i} is not a JSON object ({_json_kind(obj)})",
                                 hint="a JSON trace is a list of objects, one per request")
            objs.append((i, obj))
    else:
        for line_no, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TraceError(f"trace {path}, line {line_no}: not valid JSON ({exc.msg} at column {exc.colno}); "
                                 "a JSONL trace must be one JSON object per line") from None
            if not isinstance(obj, dict):
                raise TraceError(f"trace {path}, line {line_no}: not a JSON object ({_json_kind(obj)}); "
                                 "a JSONL trace must be one JSON object per line",
                                 hint='e.g. {"timestamp": 0.5, "prompt_tokens": 512, "output_tokens": 64}')
            objs.append((line_no, obj))
    if not objs:
        raise TraceError(f"trace {path} has no requests")
    columns: list[str] = []
    seen = set()
    for _, obj in objs:
        for k in obj:
            if k not in seen:
                seen.add(k)
                columns.append(k)
    rows = [[obj.get(c) for c in columns] for _, obj in objs]
    return columns, rows, [n for n, _ in objs]


def _json_kind(v: object) -> str:
    """``a list``, ``a number``... for error messages."""
    if isinstance(v, list):
        return "a list"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, bool) or v is None:
        return json.dumps(v)
    return "a number"


def _tokens(path: Path, values: list, lines: list[int], column: str) -> np.ndarray:
    """Integer token counts, with the file line of the first bad value in the error."""
    out = None
    if not any(isinstance(v, bool) or v is None for v in values):
        try:
            f = np.array(values, dtype=np.float64)  # fast path: every cell a plain number
        except (ValueError, TypeError, OverflowError):
            f = None
        if f is not None and np.all(np.isfinite(f)) and np.all(f == np.round(f)) and np.all(np.abs(f) < 2**53):
            out = f.astype(np.int64)
    if out is None:
        out = _tokens_slow(path, values, lines, column)
    neg = np.flatnonzero(out < 0)
    if len(neg):
        shown = ", ".join(f"line {lines[j]} ({int(out[j])})" for j in neg[:_MAX_REPORTED_ROWS])
        more = f" and {len(neg) - _MAX_REPORTED_ROWS} more" if len(neg) > _MAX_REPORTED_ROWS else ""
        raise TraceError(f"trace {path}: negative token counts in column {column!r} at {shown}{more}")
    return out


def _tokens_slow(path: Path, values: list, lines: list[int], column: str) -> np.ndarray:
    """Cell by cell, so that the first bad value is named with its line."""
    out = np.empty(len(values), dtype=np.int64)
    for i, v in enumerate(values):
        try:
            if isinstance(v, bool) or v is None:
                raise ValueError
            if isinstance(v, str):
                v = v.strip()
                f = float(v)
            else:
                f = float(v)
            if not math.isfinite(f) or f != int(f):
                raise ValueError
            out[i] = int(f)
        except (ValueError, TypeError, OverflowError):
            raise TraceError(
                f"trace {path}, line {lines[i]}: column {column!r} is not a whole number of tokens: {v!r}"
            ) from None
    return out


def _times(path: Path, values: list, lines: list[int], column: str) -> np.ndarray:
    """Seconds (float64) from numbers or date-times; absolute values, not yet shifted."""
    cells = ["" if v is None else (v if isinstance(v, str) else repr(v) if isinstance(v, float) else str(v)) for v in values]
    cells = [c.strip() for c in cells]
    for i, c in enumerate(cells):
        if not c:
            raise TraceError(f"trace {path}, line {lines[i]}: column {column!r} is empty")
    try:
        secs = np.array(cells, dtype=np.float64)
    except ValueError:
        secs = None
    if secs is not None:
        bad = np.flatnonzero(~np.isfinite(secs))
        if len(bad):
            raise TraceError(f"trace {path}, line {lines[bad[0]]}: column {column!r} is not a finite time: {cells[bad[0]]!r}")
        return secs
    _check_one_kind(path, cells, lines, column)
    # Date-times: numpy parses ISO 8601 (space or T) with any number of fraction digits;
    # an offset such as +01:00 or Z is converted to UTC (numpy warns; we don't need to).
    try:
        with _warnings.catch_warnings():
            _warnings.simplefilter("ignore")
            stamps = np.array(cells, dtype="datetime64[ns]")
    except ValueError:
        for i, c in enumerate(cells):
            try:
                with _warnings.catch_warnings():
                    _warnings.simplefilter("ignore")
                    np.datetime64(c, "ns")
            except ValueError:
                raise TraceError(
                    f"trace {path}, line {lines[i]}: column {column!r} is neither seconds nor a date-time: {c!r}",
                    hint="use seconds (e.g. 12.5) or ISO 8601 date-times (e.g. 2023-11-16 18:15:46.68)",
                ) from None
        raise TraceError(f"trace {path}: cannot parse column {column!r} as times") from None  # pragma: no cover
    if np.any(np.isnat(stamps)):
        i = int(np.argmax(np.isnat(stamps)))
        raise TraceError(f"trace {path}, line {lines[i]}: column {column!r} is not a date-time: {cells[i]!r}")
    ns = stamps.astype(np.int64)
    return (ns - ns.min()).astype(np.float64) / 1e9


def _is_seconds(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _is_datetime(cell: str) -> bool:
    try:
        with _warnings.catch_warnings():
            _warnings.simplefilter("ignore")
            return not np.isnat(np.datetime64(cell, "ns"))
    except ValueError:
        return False


def _check_one_kind(path: Path, cells: list[str], lines: list[int], column: str) -> None:
    """Raise if a time column mixes seconds and date-times (numpy would read a bare number
    as a year, turning the trace into millennia). The first row fixes the column's kind.

    Raises:
        TraceError: naming the first line of the other kind (or the first unparsable cell).
    """
    kinds = ("seconds", "a date-time")
    first_is_s = _is_seconds(cells[0])
    for i, c in enumerate(cells):
        if _is_seconds(c) == first_is_s:
            continue
        if not first_is_s and not _is_datetime(cells[0]):
            return  # the first cell is garbage: the date-time parser names it
        if first_is_s and not _is_datetime(c):
            raise TraceError(
                f"trace {path}, line {lines[i]}: column {column!r} is neither seconds nor a date-time: {c!r}",
                hint="use seconds (e.g. 12.5) or ISO 8601 date-times (e.g. 2023-11-16 18:15:46.68)",
            )
        this, other = (kinds[1], kinds[0]) if first_is_s else (kinds[0], kinds[1])
        raise TraceError(
            f"trace {path}, line {lines[i]}: column {column!r} mixes timestamp kinds: {c!r} is {this}, "
            f"but line {lines[0]} ({cells[0]!r}) is {other}",
            hint="give every arrival time the same way: all seconds or all date-times",
        )


def load_trace(
    path: str | Path,
    *,
    rate: float | None = None,
    seed: int = 0,
) -> Trace:
    """Load a CSV or JSONL trace of (arrival time, prompt tokens, output tokens).

    Args:
        path: the trace file.
        rate: requests/s. When given, arrival times are drawn from a Poisson process at
            this rate (seeded by ``seed``) and any time column is ignored (with a
            warning). Required when the file has no time column.
        seed: seed of the Poisson arrivals.

    Returns:
        A :class:`Trace` sorted by arrival (the first at 0 s). The Azure LLM inference
        trace carries its attribution.

    Raises:
        TraceError: missing or empty file, no header, missing columns (the message lists
            the columns found), non-integer or negative tokens (with the line), bad times,
            or no time column and no ``rate``.
    """
    p = Path(path)
    columns, rows, lines = _read_rows(p)
    if not rows:
        raise TraceError(f"trace {p} has a header but no requests", hint="expected one request per row")
    c_prompt = _pick(columns, PROMPT_COLUMNS)
    c_output = _pick(columns, OUTPUT_COLUMNS)
    c_time = _pick(columns, ARRIVAL_COLUMNS)
    missing = []
    if c_prompt is None:
        missing.append("prompt tokens (e.g. prompt_tokens, input_tokens, input_len, ContextTokens)")
    if c_output is None:
        missing.append("output tokens (e.g. output_tokens, completion_tokens, output_len, GeneratedTokens)")
    if missing:
        found = ", ".join(repr(c) for c in columns) or "none"
        raise TraceError(
            f"trace {p} lacks a column for {' and '.join(missing)}; columns found: {found}",
            hint="rename the columns, or convert the file to CSV with arrival_time,prompt_tokens,output_tokens",
        )
    idx = {c: i for i, c in enumerate(columns)}

    def col(name: str) -> list:
        j = idx[name]
        return [r[j] for r in rows]

    prompt = _tokens(p, col(c_prompt), lines, c_prompt)
    output = _tokens(p, col(c_output), lines, c_output)
    warns: list[str] = []
    normed = {_norm(c) for c in columns}
    attribution = AZURE_ATTRIBUTION if (all(c in normed for c in _AZURE_COLUMNS) or "azurellminference" in _norm(p.name)) else None

    if rate is not None:
        arrival = poisson_arrivals(len(prompt), rate, seed=seed)
        how = "poisson"
        if c_time is not None:
            warns.append(f"arrival times from a Poisson process at {rate:g} requests/s (seed {seed}); column {c_time!r} ignored")
    else:
        if c_time is None:
            found = ", ".join(repr(c) for c in columns)
            raise TraceError(
                f"trace {p} has no arrival-time column (e.g. timestamp, arrival_time, time); columns found: {found}",
                hint="pass --rate R to draw Poisson arrivals at R requests/s",
            )
        t = _times(p, col(c_time), lines, c_time)
        how = "timestamps"
        backwards = int(np.count_nonzero(np.diff(t) < 0))
        if backwards:
            order = np.argsort(t, kind="stable")
            first = int(np.argmax(np.diff(t) < 0)) + 1
            warns.append(
                f"timestamps in {p.name} were not sorted ({backwards} step(s) back in time, first at line "
                f"{lines[first]}); requests were sorted by arrival time"
            )
            t = t[order]
            prompt, output = prompt[order], output[order]
        arrival = t - t[0]
    return Trace(arrival, prompt, output, source=str(p), arrivals=how, warnings=warns, attribution=attribution)


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
