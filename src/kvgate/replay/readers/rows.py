"""The Python trace reader: cell by cell, so that every defect is named with its file line.

:mod:`kvgate.replay.readers.columnar` reads well-formed files much faster; when it cannot
vouch for a file (a bad cell, a null, a row of the wrong width, a ``.json`` list) the
trace is read again here, and this reader either accepts it or raises the
:class:`~kvgate.replay.readers.base.TraceError` that names the line.

- **CSV** (``.csv``, ``.tsv`` or anything not JSON) with a header row; blank rows are
  skipped; every row must have the header's width.
- **JSONL** (one JSON object per line) or a ``.json`` file holding a list of objects;
  columns are the union of the objects' keys, a missing key is an empty cell.
- Times are numbers (in the file's unit: :mod:`kvgate.replay.timeunits` decides which) or
  ISO 8601 date-times (numpy's parser; an offset such as ``+01:00`` or ``Z`` is converted
  to UTC); one column may not mix the two.
"""

from __future__ import annotations

import csv
import json
import math
import warnings as _warnings
from pathlib import Path

import numpy as np

from kvgate.errors import KvgateError
from kvgate.guarded import loads_json
from kvgate.replay.readers.base import RawColumns, TraceError, trace_file_errors

_MAX_REPORTED_ROWS = 5


def read_rows(path: Path) -> tuple[list[str], list[list], list[int]]:
    """Columns, rows (lists of cell values) and the file line number of each row.

    CSV and JSONL are read line by line from the file (the text is never held whole;
    the rows are); a ``.json`` list is parsed as one document. Every JSON value goes
    through :func:`kvgate.guarded.loads_json` (nesting depth, 4,300-digit integers,
    NaN/Infinity refused with the line).

    Raises:
        TraceError: missing file, a directory, unreadable or non-UTF-8 bytes, an empty
            file, bad CSV or JSON (with the line).
    """
    with trace_file_errors(path), open(path, encoding="utf-8-sig", newline="") as fh:
        lead = ""
        while not lead:
            chunk = fh.read(4096)
            if not chunk:
                break
            lead = chunk.lstrip()[:1]
        if not lead:
            raise TraceError(f"trace {path} is empty",
                             hint="expected CSV with a header row or JSONL, one request per row")
        fh.seek(0)
        suffix = path.suffix.lower()
        if suffix in (".jsonl", ".ndjson", ".json") or lead in ("{", "["):
            return _read_json_rows(path, fh, lead)
        return _read_csv_rows(path, fh)


def csv_delimiter(path: Path, first_line: str) -> str:
    """``\\t`` for ``.tsv`` or a first line with tabs and no commas, else ``,``."""
    if path.suffix.lower() == ".tsv":
        return "\t"
    return "\t" if ("," not in first_line and "\t" in first_line) else ","


def _read_csv_rows(path: Path, fh) -> tuple[list[str], list[list], list[int]]:
    first = fh.readline()
    fh.seek(0)
    reader = csv.reader(fh, delimiter=csv_delimiter(path, first.rstrip("\r\n")))
    try:
        header = next(reader)
    except (StopIteration, csv.Error) as exc:  # pragma: no cover - empty handled above
        raise TraceError(f"trace {path} has no header row: {exc}") from None
    header = [h.strip() for h in header]
    rows, lines = [], []
    try:
        for row in reader:
            line_no = reader.line_num
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != len(header):
                raise TraceError(f"trace {path}, line {line_no}: {len(row)} fields, the header has {len(header)}")
            rows.append(row)
            lines.append(line_no)
    except csv.Error as exc:
        raise TraceError(f"trace {path} is not valid CSV: {exc}") from None
    return header, rows, lines


def _read_json_rows(path: Path, fh, lead: str) -> tuple[list[str], list[list], list[int]]:
    objs: list[tuple[int, dict]] = []
    data = None
    if lead == "[":
        text = fh.read()
        try:
            data = loads_json(text, what=f"trace {path}")
        except KvgateError as exc:
            bad = exc.__cause__
            if not (isinstance(bad, json.JSONDecodeError) and bad.msg == "Extra data"):
                # (more than one value: JSONL whose lines are not objects, read below)
                raise TraceError(exc.message) from None
        del text
        fh.seek(0)
    if isinstance(data, list):
        for i, obj in enumerate(data, start=1):
            if not isinstance(obj, dict):
                raise TraceError(
                    f"trace {path}: item {i} is not a JSON object ({_json_kind(obj)})",
                    hint="a JSON trace is a list of objects, one per request",
                )
            objs.append((i, obj))
    else:
        for line_no, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = loads_json(line, what=f"trace {path}, line {line_no}")
            except KvgateError as exc:
                bad = exc.__cause__
                if isinstance(bad, json.JSONDecodeError):
                    raise TraceError(
                        f"trace {path}, line {line_no}: not valid JSON ({bad.msg} at column {bad.colno}); "
                        "a JSONL trace must be one JSON object per line"
                    ) from None
                raise TraceError(exc.message) from None
            if not isinstance(obj, dict):
                raise TraceError(
                    f"trace {path}, line {line_no}: not a JSON object ({_json_kind(obj)}); "
                    "a JSONL trace must be one JSON object per line",
                    hint='e.g. {"timestamp": 0.5, "prompt_tokens": 512, "output_tokens": 64}',
                )
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


def tokens(path: Path, values: list, lines: list[int], column: str) -> np.ndarray:
    """Integer token counts (int64), with the file line of the first bad value in the error.

    Raises:
        TraceError: a value that is not a whole number (line and value), or negative
            counts (up to five lines named).
    """
    out = None
    if not any(isinstance(v, bool) or v is None for v in values):
        try:
            f = np.array(values, dtype=np.float64)  # fast path: every cell a plain number
        except (ValueError, TypeError, OverflowError):
            f = None
        if f is not None and f.shape == (len(values),) and np.all(np.isfinite(f)) and np.all(f == np.round(f)) and np.all(np.abs(f) < 2**53):
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
            f = float(v.strip()) if isinstance(v, str) else float(v)
            if not math.isfinite(f) or f != int(f):
                raise ValueError
            out[i] = int(f)
        except (ValueError, TypeError, OverflowError):
            raise TraceError(
                f"trace {path}, line {lines[i]}: column {column!r} is not a whole number of tokens: {v!r}"
            ) from None
    return out


def times(path: Path, values: list, lines: list[int], column: str) -> tuple[np.ndarray, str]:
    """A time column as ``(float64 numbers, "number")`` in the file's unit, or as
    ``(int64 ns since the epoch, "datetime")``.

    Raises:
        TraceError: an empty cell, a non-finite number, a cell that is neither a number
            nor a date-time, or a column that mixes the two (each with its line).
    """
    cells = [
        "" if v is None else (v if isinstance(v, str) else repr(v) if isinstance(v, float) else str(v)) for v in values
    ]
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
            raise TraceError(
                f"trace {path}, line {lines[bad[0]]}: column {column!r} is not a finite time: {cells[bad[0]]!r}"
            )
        return secs, "number"
    _check_one_kind(path, cells, lines, column)
    # Date-times: numpy parses ISO 8601 (space or T) with any number of fraction digits;
    # an offset such as +01:00 or Z is converted to UTC (numpy warns; we don't need to).
    try:
        with _warnings.catch_warnings():
            _warnings.simplefilter("ignore")
            stamps = np.array(cells, dtype="datetime64[ns]")
    except ValueError:
        for i, c in enumerate(cells):
            if not _is_datetime(c):
                raise TraceError(
                    f"trace {path}, line {lines[i]}: column {column!r} is neither seconds nor a date-time: {c!r}",
                    hint="use seconds (e.g. 12.5) or ISO 8601 date-times (e.g. 2023-11-16 18:15:46.68)",
                ) from None
        raise TraceError(f"trace {path}: cannot parse column {column!r} as times") from None  # pragma: no cover
    if np.any(np.isnat(stamps)):
        i = int(np.argmax(np.isnat(stamps)))
        raise TraceError(f"trace {path}, line {lines[i]}: column {column!r} is not a date-time: {cells[i]!r}")
    return stamps.astype(np.int64), "datetime"


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
    """Raise if a time column mixes numbers and date-times (numpy would read a bare number
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


def raw_columns(
    path: Path,
    columns: list[str],
    rows: list[list],
    lines: list[int],
    c_time: str | None,
    c_prompt: str,
    c_output: str,
) -> RawColumns:
    """The chosen columns of :func:`read_rows`' rows, checked cell by cell (prompt, then
    output, then time), as :class:`RawColumns`.

    Raises:
        TraceError: as :func:`tokens` and :func:`times`.
    """  # fmt: skip
    idx = {c: i for i, c in enumerate(columns)}

    def col(name: str) -> list:
        j = idx[name]
        return [r[j] for r in rows]

    prompt = tokens(path, col(c_prompt), lines, c_prompt)
    output = tokens(path, col(c_output), lines, c_output)
    t, kind = (None, None) if c_time is None else times(path, col(c_time), lines, c_time)
    return RawColumns(prompt, output, t, kind, line_of=lambda i: lines[i], reader="rows")
