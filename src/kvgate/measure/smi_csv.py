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
architecture, command, exit code) is ``None``. Idle used is the log's first sample.
"""

from __future__ import annotations

import csv
import io
import re
import statistics
from datetime import datetime
from typing import Any

from kvgate.errors import KvgateError
from kvgate.measure.sampler import DEFAULT_TIMELINE_POINTS, Timeline
from kvgate.measurement import Basis, Measurement, measurement_file
from kvgate.units import parse_bytes

ALIASES = {"gpu_name": "name", "gpu_uuid": "uuid", "gpu_index": "index"}
_UNIT_IN_HEADER = re.compile(r"^(?P<name>[^\[]+?)\s*\[(?P<unit>[^\]]+)\]\s*$")
_NA = {"[n/a]", "n/a", "[not supported]", "[unknown error]", "[insufficient permissions]", ""}
_TIME_FORMATS = ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S")


class SmiCsvError(KvgateError):
    """The log is not an ``nvidia-smi --format=csv`` memory log kvgate can read."""


def _column(header_cell: str) -> tuple[str, str | None]:
    """``"memory.used [MiB]"`` → ``("memory.used", "MiB")``; ``"index"`` → ``("index", None)``."""
    cell = header_cell.strip()
    m = _UNIT_IN_HEADER.match(cell)
    name, unit = (m.group("name"), m.group("unit")) if m else (cell, None)
    name = name.strip().lower()
    return ALIASES.get(name, name), unit


def _bytes(cell: str, unit: str | None, where: str) -> int | None:
    """A memory cell: ``"616 MiB"`` (csv) or ``"616"`` with the header's unit (nounits)."""
    text = cell.strip()
    if text.lower() in _NA:
        return None
    if not text[-1:].isalpha() and unit is None:
        raise SmiCsvError(f"{where}: memory value {cell!r} has no unit, and neither has its column",
                          hint="for a csv,noheader,nounits log name the unit: --columns 'memory.used [MiB]',...")
    try:
        if text[-1:].isalpha():
            return parse_bytes(text, allow_zero=True)
        return parse_bytes(f"{text} {unit}", allow_zero=True)
    except KvgateError as exc:
        raise SmiCsvError(f"{where}: cannot read memory value {cell!r}: {exc.message}") from exc


def _time(cell: str, where: str) -> datetime | None:
    text = cell.strip()
    if text.lower() in _NA:
        return None
    for fmt in _TIME_FORMATS:
        try:
            return datetime.strptime(text, fmt)
        except ValueError:
            continue
    raise SmiCsvError(f"{where}: cannot read timestamp {cell!r}", hint="expected nvidia-smi's 2026/11/29 10:53:58.123")


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
            column, a value that does not parse, or no samples.
    """
    where = source or "log"
    rows = [r for r in csv.reader(io.StringIO(text), skipinitialspace=True) if any(c.strip() for c in r)]
    if columns is not None:
        header = [_column(c) for c in columns]
    elif rows and _is_header(rows[0]):
        header = [_column(c) for c in rows[0]]
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
    for lineno, row in enumerate(rows, start=1):
        if _is_header(row):
            continue
        at = f"{where} row {lineno}"
        if len(row) != len(header):
            raise SmiCsvError(f"{at}: {len(row)} fields, the header has {len(header)}")
        get = lambda n: row[col[n]].strip() if n in col else None  # noqa: E731
        t = _time(get("timestamp"), at) if "timestamp" in col else None
        if "index" in col:
            key = get("index")
        elif "uuid" in col:
            key = get("uuid")
        else:  # one row per GPU per tick, in GPU order
            pos_in_tick = pos_in_tick + 1 if (t is not None and t == last_time) else 0
            key = str(pos_in_tick)
        last_time = t
        unit = lambda n: header[col[n]][1]  # noqa: E731
        total = _bytes(get("memory.total"), unit("memory.total"), at)
        free = _bytes(get("memory.free"), unit("memory.free"), at) if "memory.free" in col else None
        used_v2 = _bytes(get("memory.used"), unit("memory.used"), at) if "memory.used" in col else None
        reserved = _bytes(get("memory.reserved"), unit("memory.reserved"), at) if "memory.reserved" in col else None
        if total is None:
            continue
        if free is not None:
            used, rule = total - free, "memory.total - memory.free"
        elif used_v2 is not None and reserved is not None:
            used, rule = used_v2 + reserved, "memory.used + memory.reserved"
        elif used_v2 is not None:
            used, rule = used_v2, "memory.used (excludes driver-reserved memory: not in this log)"
        else:
            continue
        g = gpus.setdefault(key, {"times": [], "used": [], "total": total, "reserved": [], "rule": rule,
                                  "name": get("name"), "uuid": get("uuid"), "driver": get("driver_version")})
        g["times"].append(t)
        g["used"].append(used)
        g["total"] = max(g["total"], total)
        if reserved is not None:
            g["reserved"].append(reserved)
    if not gpus:
        raise SmiCsvError(f"{where}: no memory samples in the log")
    domains = [_measurement(key, g, source, ignored, timeline_points) for key, g in sorted(gpus.items(), key=_gpu_order)]
    return measurement_file(domains, status="ok", command=None, exit_code=None)


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
        extra={"used_rule": g["rule"], "idle_rule": "first sample of the log",
               "ignored_columns": ignored, "timestamps": "local time of the logging machine" if timed else None},
    )


def load_smi_csv(path: str, *, columns: list[str] | None = None) -> dict[str, Any]:
    """Read the log at ``path`` with :func:`parse_smi_csv` (``basis.source`` = its name).

    Raises:
        SmiCsvError: the file is missing, unreadable or not a memory log.
    """
    from pathlib import Path

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise SmiCsvError(f"cannot read nvidia-smi log {p}: {exc.strerror}") from exc
    return parse_smi_csv(text, source=p.name, columns=columns)
