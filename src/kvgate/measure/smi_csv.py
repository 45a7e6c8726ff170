"""Read ``nvidia-smi --query-gpu=... --format=csv`` logs into ``kvgate.measurement/1``.

Accepted: ``--format=csv`` and ``csv,nounits`` (the header keeps ``[MiB]`` either way),
one or several GPUs, the columns below in any order, other query columns ignored, a
header repeated where logs were concatenated. ``csv,noheader`` logs need ``columns``.

=====================  ===================================================
query name             use
=====================  ===================================================
``timestamp``          sample time (``2026/11/29 10:53:58.123``, local)
``index``              GPU → domain ``gpu:<index>``
``uuid``, ``name``     basis (``uuid`` also separates GPUs without ``index``)
``driver_version``     basis
``memory.total``       T
``memory.free``        used = total − free (preferred)
``memory.used``        NVML v2 "used", which leaves out driver-reserved memory
``memory.reserved``    added back: used = memory.used + memory.reserved
=====================  ===================================================

kvgate's "used" is ``total − free`` (see :mod:`kvgate.measure.nvml`), so it is taken from
``memory.free`` when logged, else ``memory.used + memory.reserved``, else ``memory.used``
alone, which is then noted as excluding reserved memory. ``[N/A]`` and
``[Not Supported]`` are "not available". What a log cannot say (CUDA/NVML version, CPU
architecture, command, exit code) is ``None``. Idle used is the GPU's earliest sample.

Checks (errors and warnings name the log's line, counted from 1 in the file):

- **Order.** Each GPU's samples are sorted by timestamp (stable) when the log has them
  out of order (clock changes, concatenated logs), and the measurement's
  ``extra["warnings"]`` says so, as :mod:`kvgate.replay.trace` does for traces; times and
  intervals are never negative.
- **One card.** ``memory.total`` must not change for a GPU: a log whose total changes
  mixes cards or configurations and is not one measurement (:class:`SmiCsvError` naming
  both lines).
- **Units.** A cell's unit must be its header's (``32 GiB`` under ``memory.total [MiB]``
  is an error naming the line and column, not converted: a different unit in one cell
  means the log was edited or mixed, and a silent conversion would hide that).
- **Bad lines.** A row with the wrong number of fields, or a timestamp or memory value
  that does not parse (an error line nvidia-smi printed mid-log, a line cut short), is
  skipped and counted in a warning naming the first such lines; a last line without a
  line end (a log still being written) is always skipped, since a value cut short
  (``143156 MiB`` → ``1431``) can still parse. With no row left the log is an error that
  names the skipped lines. A cell in another unit and ``free > total`` stay errors.
- **One GPU per index.** A ``uuid`` that changes for one ``index`` mid-log (a GPU swapped
  or the log mixes hosts) is an error naming both lines.
- **Encodings.** A UTF-8 byte-order mark is dropped; UTF-16 (what a PowerShell ``>``
  redirect writes, with its BOM or without) is decoded (:func:`decode_log`).
- **Consistency.** When ``memory.free`` and ``memory.used`` are both logged, rows whose
  ``memory.used + memory.reserved`` differs from ``memory.total − memory.free`` by more
  than :func:`consistency_tolerance` are counted in a warning (used is still
  ``total − free``). nvidia-smi rounds each column to a MiB, so a recorded H200 log
  differs by at most 2 MiB.
"""

from __future__ import annotations

import csv
import re
import statistics
from datetime import datetime
from typing import Any

from kvgate.errors import KvgateError
from kvgate.measure.measurement import Basis, Measurement, measurement_file
from kvgate.measure.sampler import DEFAULT_TIMELINE_POINTS, Timeline
from kvgate.units import parse_bytes

ALIASES = {"gpu_name": "name", "gpu_uuid": "uuid", "gpu_index": "index"}
_UNIT_IN_HEADER = re.compile(r"^(?P<name>[^\[]+?)\s*\[(?P<unit>[^\]]+)\]\s*$")
_NA = {"[n/a]", "n/a", "[not supported]", "[unknown error]", "[insufficient permissions]", ""}
_TIME_FORMATS = ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S")


class SmiCsvError(KvgateError):
    """The log is not an ``nvidia-smi --format=csv`` memory log kvgate can read."""


class _BadRow(SmiCsvError):
    """A row that cannot be read (wrong field count, unparsable value): skipped, counted."""


def decode_log(data: bytes) -> str:
    """The text of a log file's bytes: UTF-16 with a BOM (LE/BE), UTF-16-LE without one
    (every odd byte of the first 64 a NUL: ASCII written by PowerShell), UTF-8 with or
    without a BOM; undecodable bytes become U+FFFD (the row is then skipped as bad).
    """
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return data.decode("utf-16", errors="replace")
    head = data[:64]
    if len(head) >= 4 and all(b == 0 for b in head[1::2]) and any(head[0::2]):
        return data.decode("utf-16-le", errors="replace")
    if len(head) >= 4 and all(b == 0 for b in head[0::2]) and any(head[1::2]):
        return data.decode("utf-16-be", errors="replace")
    return data.decode("utf-8-sig", errors="replace")


def _column(header_cell: str) -> tuple[str, str | None]:
    """``"memory.used [MiB]"`` → ``("memory.used", "MiB")``; ``"index"`` → ``("index", None)``."""
    cell = header_cell.strip()
    m = _UNIT_IN_HEADER.match(cell)
    name, unit = (m.group("name"), m.group("unit")) if m else (cell, None)
    name = name.strip().lower()
    return ALIASES.get(name, name), unit


_CELL_UNIT = re.compile(r"^[-+0-9.,_\s]+(?P<unit>[A-Za-z]+)$")
MiB = 2**20


def consistency_tolerance(total_bytes: int, reserved_logged: bool) -> int:
    """Bytes by which ``used + reserved`` may differ from ``total − free`` without a warning.

    16 MiB when ``memory.reserved`` is logged (MiB rounding of four columns; a recorded H200
    log differs by at most 2 MiB). Without it, the unlogged driver-reserved memory (616 MiB
    of 143,771 MiB on an H200) is a legitimate difference, so 16 MiB + 5 % of total.
    """
    return 16 * MiB if reserved_logged else 16 * MiB + total_bytes // 20


def _bytes(cell: str, unit: str | None, where: str, column: str = "memory") -> int | None:
    """A memory cell: ``"616 MiB"`` (csv) or ``"616"`` with the header's unit (nounits).

    Raises:
        SmiCsvError: a value that does not parse, no unit anywhere, or a cell whose unit is
            not its header's (``32 GiB`` under ``[MiB]``), naming ``where`` and ``column``.
    """
    text = cell.strip()
    if text.lower() in _NA:
        return None
    m = _CELL_UNIT.match(text)
    if m and unit is not None and m.group("unit").lower() != unit.strip().lower():
        raise SmiCsvError(
            f"{where}, column {column} [{unit}]: value {cell.strip()!r} is in {m.group('unit')}, "
            f"its header says {unit}",
            hint="a log must use one unit per column; re-record it, or fix the cell by hand")
    if not text[-1:].isalpha() and unit is None:
        raise SmiCsvError(f"{where}: memory value {cell!r} has no unit, and neither has its column",
                          hint="for a csv,noheader,nounits log name the unit: --columns 'memory.used [MiB]',...")
    try:
        if text[-1:].isalpha():
            return parse_bytes(text, allow_zero=True)
        return parse_bytes(f"{text} {unit}", allow_zero=True)
    except KvgateError as exc:
        raise _BadRow(f"{where}, column {column}: cannot read memory value {cell!r}: {exc.message}") from exc


def _time(cell: str, where: str) -> datetime | None:
    text = cell.strip()
    if text.lower() in _NA:
        return None
    for fmt in _TIME_FORMATS:
        try:
            return datetime.strptime(text, fmt)
        except ValueError:
            continue
    raise _BadRow(f"{where}: cannot read timestamp {cell!r}", hint="expected nvidia-smi's 2026/11/29 10:53:58.123")


def _is_header(row: list[str]) -> bool:
    return any(_column(c)[0] in ("memory.used", "memory.free", "memory.total") for c in row)


def parse_smi_csv(text: str, *, source: str | None = None, columns: list[str] | None = None,
                  timeline_points: int = DEFAULT_TIMELINE_POINTS) -> dict[str, Any]:
    """Parse a log into a ``kvgate.measurement/1`` document, one domain per GPU.

    Args:
        text: the log's contents.
        source: the log's name, recorded as ``basis.source``.
        columns: query names for a ``noheader`` log, e.g. ``["timestamp", "memory.used [MiB]"]``.

    Raises:
        SmiCsvError: no header (and no ``columns``), no ``memory.total``, no used/free
            column, a value that does not parse, a cell in another unit than its header,
            ``memory.total`` changing for one GPU, or no samples.
    """
    where = source or "log"
    text = text.lstrip("\ufeff")  # a UTF-8 BOM read without utf-8-sig
    rows: list[list[str]] = []
    line_of: list[int] = []  # the file line of each row
    skipped: list[tuple[int, str]] = []  # (line, why) of rows that could not be read
    lines = text.splitlines(keepends=True)  # nvidia-smi never quotes a line break into a field
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if lineno == len(lines) and not line.endswith(("\n", "\r")):
            skipped.append((lineno, "no line end (a log still being written?)"))
            continue
        try:
            r = next(csv.reader([line], skipinitialspace=True))
        except (csv.Error, StopIteration) as exc:
            skipped.append((lineno, f"not CSV ({exc})"))
            continue
        if any(c.strip() for c in r):
            rows.append(r)
            line_of.append(lineno)
    if columns is not None:
        header = [_column(c) for c in columns]
    elif any(_is_header(r) for r in rows):
        first = next(i for i, r in enumerate(rows) if _is_header(r))
        skipped += [(line_of[i], "before the header") for i in range(first)]  # e.g. an error nvidia-smi printed
        header = [_column(c) for c in rows[first]]
        rows, line_of = rows[first:], line_of[first:]
    else:
        raise SmiCsvError(f"{where}: no nvidia-smi CSV header found",
                          hint="record with --format=csv, or give the columns with --columns")
    names = [h[0] for h in header]
    if "memory.total" not in names:
        raise SmiCsvError(f"{where}: the log has no memory.total column",
                          hint="add memory.total to --query-gpu (kvgate needs T)")
    if "memory.used" not in names and "memory.free" not in names:
        raise SmiCsvError(f"{where}: the log has neither memory.used nor memory.free",
                          hint="record --query-gpu=timestamp,index,memory.total,memory.free,memory.used,memory.reserved")
    col = {n: i for i, n in enumerate(names)}
    known = {"timestamp", "index", "uuid", "name", "driver_version", "memory.total", "memory.free",
             "memory.used", "memory.reserved"}
    ignored = [n for n in names if n not in known]

    gpus: dict[str, dict[str, Any]] = {}
    last_time: datetime | None = None
    pos_in_tick = 0
    for row, lineno in zip(rows, line_of):
        if _is_header(row):
            continue
        at = f"{where} line {lineno}"
        if len(row) != len(header):
            skipped.append((lineno, f"{len(row)} fields, the header has {len(header)}"))
            continue
        get = lambda n, row=row: row[col[n]].strip() if n in col else None  # noqa: E731
        try:
            t = _time(get("timestamp"), at) if "timestamp" in col else None
            total, free = _cells(row, header, col, at, ("memory.total", "memory.free"))
            used_v2, reserved = _cells(row, header, col, at, ("memory.used", "memory.reserved"))
        except _BadRow as exc:
            skipped.append((lineno, exc.message.removeprefix(f"{at}").lstrip(":, ")))
            continue
        if "index" in col:
            key = get("index")
        elif "uuid" in col:
            key = get("uuid")
        else:  # one row per GPU per tick, in GPU order
            pos_in_tick = pos_in_tick + 1 if (t is not None and t == last_time) else 0
            key = str(pos_in_tick)
        last_time = t
        if total is None:
            continue
        if free is not None and free > total:
            raise SmiCsvError(f"{at}: memory.free ({free // MiB:,} MiB) is above memory.total ({total // MiB:,} MiB)")
        if free is not None:
            used, rule = total - free, "memory.total - memory.free"
        elif used_v2 is not None and reserved is not None:
            used, rule = used_v2 + reserved, "memory.used + memory.reserved"
        elif used_v2 is not None:
            used, rule = used_v2, "memory.used (excludes driver-reserved memory: not in this log)"
        else:
            continue
        g = gpus.setdefault(key, {"times": [], "used": [], "lines": [], "total": total, "total_line": lineno,
                                  "reserved": [], "rule": rule, "mismatch": [],
                                  "name": get("name"), "uuid": get("uuid"), "driver": get("driver_version"),
                                  "uuid_line": lineno})
        uuid = _na(get("uuid"))
        if uuid is not None:
            if _na(g["uuid"]) is None:
                g["uuid"], g["uuid_line"] = uuid, lineno
            elif uuid != g["uuid"]:
                raise SmiCsvError(
                    f"{where}: the uuid of gpu:{key} changes from {g['uuid']} (line {g['uuid_line']}) to {uuid} "
                    f"(line {lineno}); a GPU swapped mid-log, or logs of several machines, is not one measurement",
                    hint="split the log where the GPU changed and import each part")
        if total != g["total"]:
            raise SmiCsvError(
                f"{where}: memory.total of gpu:{key} changes from {g['total'] // MiB:,} MiB (line {g['total_line']}) "
                f"to {total // MiB:,} MiB (line {lineno}); a log that mixes cards or configurations is not one "
                "measurement",
                hint="split the log where the card changed and import each part")
        if free is not None and used_v2 is not None:
            diff = (total - free) - (used_v2 + (reserved or 0))
            if abs(diff) > consistency_tolerance(total, reserved is not None):
                g["mismatch"].append((lineno, total - free, used_v2 + (reserved or 0)))
        g["times"].append(t)
        g["used"].append(used)
        g["lines"].append(lineno)
        if reserved is not None:
            g["reserved"].append(reserved)
    skip_note = _skipped_text(skipped)
    if not gpus:
        raise SmiCsvError(f"{where}: no memory samples in the log" + (f" ({skip_note})" if skip_note else ""))
    domains = [_measurement(key, g, source, ignored, timeline_points) for key, g in sorted(gpus.items(), key=_gpu_order)]
    if skip_note:
        for m in domains:
            m.extra["warnings"].insert(0, skip_note)
            m.extra["skipped_lines"] = [line for line, _ in skipped]
    return measurement_file(domains, status="ok", command=None, exit_code=None)


def _cells(row: list[str], header: list[tuple[str, str | None]], col: dict[str, int], at: str,
           names: tuple[str, ...]) -> list[int | None]:
    """The memory cells ``names`` of one row in bytes (``None``: not logged / not available)."""
    return [_bytes(row[col[n]].strip(), header[col[n]][1], at, n) if n in col else None for n in names]


def _skipped_text(skipped: list[tuple[int, str]]) -> str | None:
    """``"3 line(s) skipped: line 7: 1 fields, the header has 9; ..."`` (the first three)."""
    if not skipped:
        return None
    first = "; ".join(f"line {line}: {why}" for line, why in skipped[:3])
    more = f"; and {len(skipped) - 3} more" if len(skipped) > 3 else ""
    return f"{len(skipped)} line(s) skipped: {first}{more}"


def _gpu_order(item: tuple[str, Any]) -> tuple[int, str]:
    key = item[0]
    return (int(key), "") if key.isdigit() else (1 << 30, key)


def _na(v: str | None) -> str | None:
    return None if v is None or v.lower() in _NA else v


def _measurement(key: str, g: dict[str, Any], source: str | None, ignored: list[str],
                 timeline_points: int) -> Measurement:
    times: list[datetime | None] = g["times"]
    used: list[int] = g["used"]
    timed = all(t is not None for t in times)
    warnings: list[str] = []
    if timed:
        back = [i for i in range(1, len(times)) if times[i] < times[i - 1]]
        if back:
            order = sorted(range(len(times)), key=lambda i: times[i])  # stable
            warnings.append(
                f"timestamps of gpu:{key} were not in order ({len(back)} step(s) back in time, first at line "
                f"{g['lines'][back[0]]}: {times[back[0]]} after {times[back[0] - 1]}); samples were sorted by time")
            times, used = [times[i] for i in order], [used[i] for i in order]
    if g["mismatch"]:
        line, tf, ur = g["mismatch"][0]
        what = "memory.used + memory.reserved" if g["reserved"] else "memory.used"
        warnings.append(
            f"{len(g['mismatch'])} row(s) of gpu:{key} where {what} differs from memory.total − memory.free, "
            f"first at line {line} ({ur // MiB:,} MiB vs {tf // MiB:,} MiB); used is taken from total − free")
    t0 = times[0] if timed else None
    rel = [(t - t0).total_seconds() for t in times] if timed else [float(i) for i in range(len(used))]
    i_peak = max(range(len(used)), key=lambda i: used[i])
    gaps = [b - a for a, b in zip(rel, rel[1:])] if timed else []
    tl = Timeline(timeline_points)
    for t, v in zip(rel, used):
        tl.add(t, v)
    ts, vs = tl.points()
    basis = Basis(
        domain=f"gpu:{key}",
        device_name=_na(g["name"]),
        device_uuid=_na(g["uuid"]),
        total_bytes=g["total"],
        driver_version=_na(g["driver"]),
        sampler="nvidia-smi",
        interval_s=round(statistics.median(gaps), 6) if gaps else None,
        start_time=times[0].isoformat() if timed else None,
        end_time=times[-1].isoformat() if timed else None,
        source=source,
    )
    return Measurement(
        total_bytes=g["total"],
        peak_used_bytes=used[i_peak],
        idle_used_bytes=used[0],
        basis=basis,
        peak_time_s=rel[i_peak] if timed else None,
        reserved_bytes=max(g["reserved"]) if g["reserved"] else None,
        max_gap_s=round(max(gaps), 6) if gaps else None,
        samples=len(used),
        timeline={"t_s": ts, "used_bytes": vs} if timed else {"sample": ts, "used_bytes": vs},
        processes=None,
        extra={"used_rule": g["rule"], "idle_rule": "earliest sample of the log",
               "ignored_columns": ignored, "timestamps": "local time of the logging machine" if timed else None,
               "warnings": warnings},
    )


def load_smi_csv(path: str, *, columns: list[str] | None = None) -> dict[str, Any]:
    """Read the log at ``path`` with :func:`parse_smi_csv` (``basis.source`` = its name).

    Raises:
        SmiCsvError: the file is missing, unreadable or not a memory log.
    """
    from pathlib import Path

    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise SmiCsvError(f"cannot read nvidia-smi log {p}: {exc.strerror}") from exc
    return parse_smi_csv(decode_log(data), source=p.name, columns=columns)
