"""The fast trace reader: pyarrow's multi-threaded CSV and JSON parsers, streamed in blocks.

Only the three columns a replay needs are converted (``include_columns`` for CSV, an
explicit schema with other keys ignored for JSONL: Mooncake's ``hash_ids`` lists are
skipped unparsed). Each block becomes compact numpy arrays (int64 tokens; float64 numbers
or int64 nanoseconds for times) as it is read, so memory holds the arrays, one block of
text and pyarrow's buffers for that block, never a Python object per cell.

It vouches only for files it reads cleanly: any parse error, a null or empty cell, a
non-integer or negative token count, a non-finite time, or a time column that is neither
numbers nor date-times makes :func:`read_columns` return ``None``, and the caller reads
the file again with :mod:`kvgate.replay.readers.rows`, which names the line at fault.
Why pyarrow (against polars, measured on 2 cores): ``benchmarks/RESULTS.md``, "Speed
(issue 9): replay".
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kvgate.errors import KvgateError
from kvgate.guarded import NOT_FOUND_HINT, loads_json
from kvgate.replay.readers.base import RawColumns, TraceError
from kvgate.replay.readers.rows import csv_delimiter

BLOCK_BYTES = 1 << 24  # bytes of text per parsed block (16 MiB; a JSONL line must fit in one)


@dataclass
class Head:
    """The start of a trace file: its kind, column names and first time cell.

    Attributes:
        kind: ``"csv"`` or ``"jsonl"``.
        columns: column names as spelled (CSV: the header, stripped; JSONL: the first
            object's keys).
        first_row: the first data row as ``{column: text or JSON value}``.
        delimiter: the CSV delimiter (``","`` or ``"\\t"``).
    """

    kind: str
    columns: list[str]
    first_row: dict
    delimiter: str = ","


def peek(path: Path) -> Head | None:
    """Column names and the first row, read from the first lines only; ``None`` when the
    fast reader should not try (a JSON list, a blank or odd first line, unreadable file).

    Raises:
        TraceError: the path does not exist or is a directory.
    """
    if not path.exists():
        raise TraceError(f"trace file not found: {path}", hint=NOT_FOUND_HINT)
    if path.is_dir():
        raise TraceError(f"trace path is a directory, not a file: {path}", hint="give the trace file itself")
    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:
            first = fh.readline()
            second = fh.readline()
    except (OSError, UnicodeDecodeError):
        return None
    if not first.strip():
        return None
    suffix = path.suffix.lower()
    lead = first.lstrip()[:1]
    if lead == "[" or suffix == ".json":
        return None
    if suffix in (".jsonl", ".ndjson") or lead == "{":
        try:
            obj = loads_json(first, what="trace line 1")
        except KvgateError:
            return None  # the row reader names the defect with its line
        if not isinstance(obj, dict) or not obj:
            return None
        return Head("jsonl", list(obj), obj)
    if not second.strip():
        return None
    delim = csv_delimiter(path, first.rstrip("\r\n"))
    try:
        header = [h.strip() for h in next(csv.reader([first.rstrip("\r\n")], delimiter=delim))]
        row = next(csv.reader([second.rstrip("\r\n")], delimiter=delim))
    except (csv.Error, StopIteration):
        return None
    if len(row) != len(header) or len(set(header)) != len(header) or not all(header):
        return None
    return Head("csv", header, dict(zip(header, row)), delim)


def _is_number(v: object) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, (int, float)):
        return True
    try:
        float(str(v))
    except ValueError:
        return False
    return True


def read_columns(
    path: Path,
    head: Head,
    c_time: str | None,
    c_prompt: str,
    c_output: str,
    *,
    threads: int | None = None,
) -> RawColumns | None:
    """The three columns of a clean file as :class:`RawColumns`, or ``None`` (see the
    module docstring: the caller then uses the Python reader).

    Args:
        path, head: the file and its :func:`peek`.
        c_time: the time column as spelled in the file, or ``None`` (not read).
        c_prompt, c_output: the token columns.
        threads: pyarrow's CPU pool size (default: pyarrow's, the machine's cores).
    """  # fmt: skip
    try:
        import pyarrow as pa
    except ImportError:  # pragma: no cover - a declared dependency; the Python reader still works
        return None
    if threads:
        pa.set_cpu_count(threads)
    numeric_time = c_time is not None and _is_number(head.first_row.get(c_time))
    try:
        batches = _csv_batches(path, head, c_time, c_prompt, c_output, numeric_time) if head.kind == "csv" else \
            _json_batches(path, c_time, c_prompt, c_output, numeric_time)  # fmt: skip
        parts = [_convert(b, c_time, c_prompt, c_output) for b in batches]
    except (pa.ArrowException, ValueError, TypeError, OSError, _NotClean):
        return None
    if not parts:
        return None
    prompt = np.concatenate([p[0] for p in parts]) if len(parts) > 1 else parts[0][0]
    output = np.concatenate([p[1] for p in parts]) if len(parts) > 1 else parts[0][1]
    if len(prompt) == 0 or prompt.min() < 0 or output.min() < 0:
        return None  # the Python reader names the lines of negative counts
    t = None
    kind = None
    if c_time is not None:
        kind = parts[0][3]
        if any(p[3] != kind for p in parts):
            return None
        t = np.concatenate([p[2] for p in parts]) if len(parts) > 1 else parts[0][2]
    del parts
    pa.default_memory_pool().release_unused()  # the parser's blocks, else kept by the pool (~300 MiB of RSS at 10^7 rows)
    return RawColumns(prompt, output, t, kind, line_of=_line_finder(path, head.kind), reader="columnar")


class _NotClean(Exception):
    """A block the fast reader does not vouch for."""


def _csv_batches(path: Path, head: Head, c_time, c_prompt, c_output, numeric_time: bool) -> Iterator:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    include = [c for c in (c_time, c_prompt, c_output) if c is not None]
    types = {c_prompt: pa.int64(), c_output: pa.int64()}
    if c_time is not None and numeric_time:
        types[c_time] = pa.float64()
    reader = pacsv.open_csv(
        path,
        read_options=pacsv.ReadOptions(column_names=head.columns, skip_rows=1, block_size=BLOCK_BYTES),
        parse_options=pacsv.ParseOptions(delimiter=head.delimiter),
        convert_options=pacsv.ConvertOptions(include_columns=include, column_types=types),
    )
    yield from reader


def _json_batches(path: Path, c_time, c_prompt, c_output, numeric_time: bool) -> Iterator:
    import pyarrow as pa
    import pyarrow.json as pajson

    fields = [(c_prompt, pa.int64()), (c_output, pa.int64())]
    if c_time is not None:
        fields.append((c_time, pa.float64() if numeric_time else pa.timestamp("ns")))
    reader = pajson.open_json(
        path,
        read_options=pajson.ReadOptions(block_size=BLOCK_BYTES),
        parse_options=pajson.ParseOptions(explicit_schema=pa.schema(fields), unexpected_field_behavior="ignore"),
    )
    yield from reader


def _convert(batch, c_time, c_prompt, c_output) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, str | None]:
    """(prompt int64, output int64, time, time kind) of one record batch; raises
    :class:`_NotClean` on nulls, non-finite or non-time values."""
    import pyarrow as pa

    names = batch.schema.names

    def col(name):
        a = batch.column(names.index(name))
        if a.null_count:
            raise _NotClean
        return a

    prompt = col(c_prompt).to_numpy().astype(np.int64, copy=False)
    output = col(c_output).to_numpy().astype(np.int64, copy=False)
    if c_time is None:
        return prompt, output, None, None
    a = col(c_time)
    if pa.types.is_floating(a.type) or pa.types.is_integer(a.type):
        t = a.to_numpy().astype(np.float64, copy=False)
        if not np.all(np.isfinite(t)):
            raise _NotClean
        return prompt, output, t, "number"
    if pa.types.is_timestamp(a.type):
        ns = a.cast(pa.timestamp("ns", tz=a.type.tz)).cast(pa.int64())
        return prompt, output, ns.to_numpy(), "datetime"
    raise _NotClean  # strings, dates...: the Python reader decides


def _line_finder(path: Path, kind: str) -> Callable[[int], int]:
    """File line of request ``i`` (0-based, file order): counts non-blank lines after the
    header (CSV) or from the top (JSONL). Only called for messages (one scan up to ``i``);
    a quoted CSV value spanning lines would shift it."""

    def line_of(i: int) -> int:
        seen = -1
        with open(path, "rb") as fh:
            for line_no, line in enumerate(fh, start=1):
                if kind == "csv" and line_no == 1:
                    continue
                if line.strip():
                    seen += 1
                    if seen == i:
                        return line_no
        return line_no  # pragma: no cover - i beyond the rows read

    return line_of
