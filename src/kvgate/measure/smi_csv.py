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
  redirect writes, with its BOM or without) is decoded (:func:`sniff_encoding`).
- **Consistency.** When ``memory.free`` and ``memory.used`` are both logged, rows whose
  ``memory.used + memory.reserved`` differs from ``memory.total − memory.free`` by more
  than :func:`consistency_tolerance` are counted in a warning (used is still
  ``total − free``). nvidia-smi rounds each column to a MiB, so a recorded H200 log
  differs by at most 2 MiB.
"""

from __future__ import annotations

import csv
import io
import re
from array import array
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from typing import Any

from kvgate.errors import KvgateError
from kvgate.measure.measurement import Basis, Measurement, measurement_file
from kvgate.measure.sampler import DEFAULT_TIMELINE_POINTS, Timeline
from kvgate.units import MiB, parse_bytes

ALIASES = {"gpu_name": "name", "gpu_uuid": "uuid", "gpu_index": "index"}
_UNIT_IN_HEADER = re.compile(r"^(?P<name>[^\[]+?)\s*\[(?P<unit>[^\]]+)\]\s*$")
_NA = {"[n/a]", "n/a", "[not supported]", "[unknown error]", "[insufficient permissions]", ""}
_TIME_FORMATS = ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S")


class SmiCsvError(KvgateError):
    """The log is not an ``nvidia-smi --format=csv`` memory log kvgate can read."""


class _BadRow(SmiCsvError):
    """A row that cannot be read (wrong field count, unparsable value): skipped, counted."""


def sniff_encoding(head: bytes) -> str:
    """The encoding of a log from its first bytes: ``utf-16`` with a BOM (LE/BE),
    ``utf-16-le`` / ``utf-16-be`` without one (every other byte of the first 64 a NUL: ASCII
    written by PowerShell), else ``utf-8-sig`` (UTF-8 with or without a BOM)."""
    if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return "utf-16"
    head = head[:64]
    if len(head) >= 4 and all(b == 0 for b in head[1::2]) and any(head[0::2]):
        return "utf-16-le"
    if len(head) >= 4 and all(b == 0 for b in head[0::2]) and any(head[1::2]):
        return "utf-16-be"
    return "utf-8-sig"


def _column(header_cell: str) -> tuple[str, str | None]:
    """``"memory.used [MiB]"`` → ``("memory.used", "MiB")``; ``"index"`` → ``("index", None)``."""
    cell = header_cell.strip()
    m = _UNIT_IN_HEADER.match(cell)
    name, unit = (m.group("name"), m.group("unit")) if m else (cell, None)
    name = name.strip().lower()
    return ALIASES.get(name, name), unit


_CELL_UNIT = re.compile(r"^[-+0-9.,_\s]+(?P<unit>[A-Za-z]+)$")


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
    """Parse a log's text into a ``kvgate.measurement/1`` document, one domain per GPU
    (:func:`parse_smi_lines` over its lines).

    Args:
        text: the log's contents.
        source: the log's name, recorded as ``basis.source``.
        columns: query names for a ``noheader`` log, e.g. ``["timestamp", "memory.used [MiB]"]``.

    Raises:
        SmiCsvError: see :func:`parse_smi_lines`.
    """
    return parse_smi_lines(io.StringIO(text.lstrip("\ufeff"), newline=""), source=source, columns=columns,
                           timeline_points=timeline_points)


def parse_smi_lines(lines: Iterable[str], *, source: str | None = None, columns: list[str] | None = None,
                    timeline_points: int = DEFAULT_TIMELINE_POINTS) -> dict[str, Any]:
    """Parse a log, line by line, into a ``kvgate.measurement/1`` document.

    Memory is bounded by the samples, not the text: a line is parsed and dropped; each
    GPU keeps its sample times (int64 microseconds) and used bytes (int64) in compact
    arrays, 16 bytes a sample (an nvidia-smi line is 80-200 bytes), and everything else
    (peak, reserved, the first skipped lines, the first step back in time) as running
    figures.

    Raises:
        SmiCsvError: no header (and no ``columns``), no ``memory.total``, no used/free
            column, a cell in another unit than its header, ``memory.total`` or ``uuid``
            changing for one GPU, ``free > total``, or no samples.
    """
    where = source or "log"
    skipped = _Skipped()
    state: _LogState | None = None
    if columns is not None:
        state = _LogState([_column(c) for c in columns], where)
    before_header: list[int] = []
    pending: tuple[int, str] | None = None  # one line of look-ahead: the last line may be cut short

    def handle(lineno: int, line: str) -> None:
        nonlocal state
        try:
            r = next(csv.reader([line], skipinitialspace=True))
        except (csv.Error, StopIteration) as exc:
            skipped.add(lineno, f"not CSV ({exc})")
            return
        if not any(c.strip() for c in r):
            return
        if state is None:
            if _is_header(r):
                state = _LogState([_column(c) for c in r], where)
                for n in before_header:  # e.g. an error nvidia-smi printed before the header
                    skipped.add(n, "before the header")
            else:
                before_header.append(lineno)
                if len(before_header) > _MAX_BEFORE_HEADER:
                    raise SmiCsvError(f"{where}: no nvidia-smi CSV header in the first {_MAX_BEFORE_HEADER:,} lines",
                                      hint="record with --format=csv, or give the columns with --columns")
            return
        state.row(r, lineno, skipped)

    for lineno, line in enumerate(lines, 1):
        if pending is not None:
            handle(*pending)
        pending = (lineno, line) if line.strip() else None
    if pending is not None:
        lineno, line = pending
        if not line.endswith(("\n", "\r")):
            skipped.add(lineno, "no line end (a log still being written?)")
        else:
            handle(lineno, line)
    if state is None:
        raise SmiCsvError(f"{where}: no nvidia-smi CSV header found",
                          hint="record with --format=csv, or give the columns with --columns")
    skip_note = skipped.text()
    if not state.gpus:
        raise SmiCsvError(f"{where}: no memory samples in the log" + (f" ({skip_note})" if skip_note else ""))
    domains = [_measurement(key, g, source, state.ignored, timeline_points)
               for key, g in sorted(state.gpus.items(), key=_gpu_order)]
    if skip_note:
        for m in domains:
            m.extra["warnings"].insert(0, skip_note)
            m.extra["skipped_lines"] = list(skipped.lines)
    return measurement_file(domains, status="ok", command=None, exit_code=None)


_MAX_BEFORE_HEADER = 10_000
_MAX_SKIPPED_LISTED = 1000  # line numbers of skipped lines kept for the record (the count is exact)
_EPOCH = datetime(1970, 1, 1)
_US = timedelta(microseconds=1)


class _Skipped:
    """Lines that could not be read: an exact count, the first three reasons, and the
    first :data:`_MAX_SKIPPED_LISTED` line numbers (bounded memory)."""

    def __init__(self) -> None:
        self.count = 0
        self.first: list[tuple[int, str]] = []
        self.lines: list[int] = []

    def add(self, lineno: int, why: str) -> None:
        self.count += 1
        if len(self.first) < 3:
            self.first.append((lineno, why))
        if len(self.lines) < _MAX_SKIPPED_LISTED:
            self.lines.append(lineno)

    def text(self) -> str | None:
        """``"3 line(s) skipped: line 7: 1 fields, the header has 9; ..."`` (the first three)."""
        if not self.count:
            return None
        first = "; ".join(f"line {line}: {why}" for line, why in sorted(self.first)[:3])
        more = f"; and {self.count - 3} more" if self.count > 3 else ""
        return f"{self.count} line(s) skipped: {first}{more}"


class _Gpu:
    """One GPU's samples, in file order: times (µs since 1970, local clock) and used bytes
    in int64 arrays; the rest as running figures."""

    def __init__(self, total: int, lineno: int, rule: str, name, uuid, driver) -> None:
        self.times = array("q")
        self.used = array("q")
        self.timed = True
        self.total, self.total_line = total, lineno
        self.rule = rule
        self.name, self.uuid, self.driver, self.uuid_line = name, uuid, driver, lineno
        self.reserved_max: int | None = None
        self.reserved_logged = False
        self.mismatch = 0
        self.mismatch_first: tuple[int, int, int] | None = None
        self.back = 0  # steps back in time
        self.back_first: tuple[int, datetime, datetime] | None = None
        self.prev_t: datetime | None = None
        self.equal = 0  # samples with the same timestamp as the one before
        self.equal_first: int | None = None


class _LogState:
    """The header's columns and every GPU seen so far."""

    def __init__(self, header: list[tuple[str, str | None]], where: str) -> None:
        self.header = header
        self.where = where
        names = [h[0] for h in header]
        if "memory.total" not in names:
            raise SmiCsvError(f"{where}: the log has no memory.total column",
                              hint="add memory.total to --query-gpu (kvgate needs T)")
        if "memory.used" not in names and "memory.free" not in names:
            raise SmiCsvError(f"{where}: the log has neither memory.used nor memory.free",
                              hint="record --query-gpu=timestamp,index,memory.total,memory.free,memory.used,memory.reserved")
        self.col = {n: i for i, n in enumerate(names)}
        known = {"timestamp", "index", "uuid", "name", "driver_version", "memory.total", "memory.free",
                 "memory.used", "memory.reserved"}
        self.ignored = [n for n in names if n not in known]
        self.gpus: dict[str, _Gpu] = {}
        self.last_time: datetime | None = None
        self.pos_in_tick = 0

    def row(self, row: list[str], lineno: int, skipped: _Skipped) -> None:
        """Read one data row (a repeated header is passed over)."""
        if _is_header(row):
            return
        header, col, where = self.header, self.col, self.where
        at = f"{where} line {lineno}"
        if len(row) != len(header):
            skipped.add(lineno, f"{len(row)} fields, the header has {len(header)}")
            return
        get = lambda n: row[col[n]].strip() if n in col else None  # noqa: E731
        try:
            t = _time(get("timestamp"), at) if "timestamp" in col else None
            total, free = _cells(row, header, col, at, ("memory.total", "memory.free"))
            used_v2, reserved = _cells(row, header, col, at, ("memory.used", "memory.reserved"))
        except _BadRow as exc:
            skipped.add(lineno, exc.message.removeprefix(f"{at}").lstrip(":, "))
            return
        if "index" in col:
            key = get("index")
        elif "uuid" in col:
            key = get("uuid")
        else:  # one row per GPU per tick, in GPU order
            self.pos_in_tick = self.pos_in_tick + 1 if (t is not None and t == self.last_time) else 0
            key = str(self.pos_in_tick)
        self.last_time = t
        if total is None:
            return
        if free is not None and free > total:
            raise SmiCsvError(f"{at}: memory.free ({free // MiB:,} MiB) is above memory.total ({total // MiB:,} MiB)")
        if free is not None:
            used, rule = total - free, "memory.total - memory.free"
        elif used_v2 is not None and reserved is not None:
            used, rule = used_v2 + reserved, "memory.used + memory.reserved"
        elif used_v2 is not None:
            used, rule = used_v2, "memory.used (excludes driver-reserved memory: not in this log)"
        else:
            return
        g = self.gpus.get(key)
        if g is None:
            g = self.gpus[key] = _Gpu(total, lineno, rule, get("name"), get("uuid"), get("driver_version"))
        uuid = _na(get("uuid"))
        if uuid is not None:
            if _na(g.uuid) is None:
                g.uuid, g.uuid_line = uuid, lineno
            elif uuid != g.uuid:
                raise SmiCsvError(
                    f"{where}: the uuid of gpu:{key} changes from {g.uuid} (line {g.uuid_line}) to {uuid} "
                    f"(line {lineno}); a GPU swapped mid-log, or logs of several machines, is not one measurement",
                    hint="split the log where the GPU changed and import each part")
        if total != g.total:
            raise SmiCsvError(
                f"{where}: memory.total of gpu:{key} changes from {g.total // MiB:,} MiB (line {g.total_line}) "
                f"to {total // MiB:,} MiB (line {lineno}); a log that mixes cards or configurations is not one "
                "measurement",
                hint="split the log where the card changed and import each part")
        if free is not None and used_v2 is not None:
            diff = (total - free) - (used_v2 + (reserved or 0))
            if abs(diff) > consistency_tolerance(total, reserved is not None):
                g.mismatch += 1
                if g.mismatch_first is None:
                    g.mismatch_first = (lineno, total - free, used_v2 + (reserved or 0))
        if t is None:
            g.timed = False
            g.times.append(0)
        else:
            if g.prev_t is not None:
                if t < g.prev_t:
                    g.back += 1
                    if g.back_first is None:
                        g.back_first = (lineno, t, g.prev_t)
                elif t == g.prev_t:
                    g.equal += 1
                    if g.equal_first is None:
                        g.equal_first = lineno
            g.prev_t = t
            g.times.append((t - _EPOCH) // _US)
        g.used.append(used)
        if reserved is not None:
            g.reserved_logged = True
            g.reserved_max = reserved if g.reserved_max is None else max(g.reserved_max, reserved)


def _cells(row: list[str], header: list[tuple[str, str | None]], col: dict[str, int], at: str,
           names: tuple[str, ...]) -> list[int | None]:
    """The memory cells ``names`` of one row in bytes (``None``: not logged / not available)."""
    return [_bytes(row[col[n]].strip(), header[col[n]][1], at, n) if n in col else None for n in names]


def _gpu_order(item: tuple[str, Any]) -> tuple[int, str]:
    key = item[0]
    return (int(key), "") if key.isdigit() else (1 << 30, key)


def _na(v: str | None) -> str | None:
    return None if v is None or v.lower() in _NA else v


#: A gap longer than this many median intervals (and than :data:`SUSPECT_GAP_MIN_S`) is
#: flagged: a clock change, a paused logger or a corrupt timestamp. The gap is still
#: reported (a real pause can hide a spike), with a warning that the timing figures of
#: the log cannot be trusted.
SUSPECT_GAP_FACTOR = 1000
SUSPECT_GAP_MIN_S = 3600.0


def _measurement(key: str, g: _Gpu, source: str | None, ignored: list[str],
                 timeline_points: int) -> Measurement:
    import numpy as np  # noqa: PLC0415

    used = np.frombuffer(g.used, dtype=np.int64) if len(g.used) else np.zeros(0, dtype=np.int64)
    n = len(used)
    timed = g.timed
    warnings: list[str] = []
    timing: list[str] = []
    if timed:
        times = np.frombuffer(g.times, dtype=np.int64)
        if g.back and g.back_first is not None:
            line, t, prev = g.back_first
            warnings.append(
                f"timestamps of gpu:{key} were not in order ({g.back} step(s) back in time, first at line "
                f"{line}: {t} after {prev}); samples were sorted by time")
            order = np.argsort(times, kind="stable")
            times, used = times[order], used[order]
            del order
    if g.mismatch and g.mismatch_first is not None:
        line, tf, ur = g.mismatch_first
        what = "memory.used + memory.reserved" if g.reserved_logged else "memory.used"
        warnings.append(
            f"{g.mismatch} row(s) of gpu:{key} where {what} differs from memory.total − memory.free, "
            f"first at line {line} ({ur // MiB:,} MiB vs {tf // MiB:,} MiB); used is taken from total − free")
    i_peak = int(np.argmax(used))  # the first of equal peaks
    interval = max_gap = None
    peak_time = None
    t0_us = None
    if timed:
        t0_us = int(times[0])
        peak_time = (int(times[i_peak]) - t0_us) / 1e6
        if n > 1:
            gaps = np.diff(times)  # µs, ≥ 0 after sorting
            med = float(np.median(gaps)) / 1e6
            j = int(np.argmax(gaps))
            mx = int(gaps[j]) / 1e6
            n_equal = int(np.count_nonzero(gaps == 0))
            if n_equal:
                first = f", first at line {g.equal_first}" if g.equal_first is not None else ""
                timing.append(f"{n_equal:,} of the {n - 1:,} intervals of gpu:{key} are 0 (samples with the same "
                              f"timestamp{first})")
            if mx == 0:
                timing.append(f"every sample of gpu:{key} has the same timestamp: the interval, the largest gap and "
                              "the peak time are not available")
            elif med == 0:
                timing.append(f"the median interval of gpu:{key} is 0: the interval is not available")
            if med > 0:
                interval = round(med, 6)
            if mx > 0:
                max_gap = round(mx, 6)
                if mx > SUSPECT_GAP_MIN_S and (med == 0 or mx > SUSPECT_GAP_FACTOR * med):
                    at = (int(times[j]) - t0_us) / 1e6
                    timing.append(
                        f"gpu:{key} has a gap of {_span(mx)} at {at:,.3f} s (median interval {med * 1e3:g} ms): a "
                        "clock change, a paused logger or a corrupt timestamp")
            if mx == 0:
                peak_time = None
            del gaps
    tl = Timeline(timeline_points)
    for lo in range(0, n, 4096):  # in slices: never a Python object (or a float copy) per sample
        hi = min(n, lo + 4096)
        rel = ((times[lo:hi] - t0_us) / 1e6) if timed else np.arange(lo, hi, dtype=np.float64)
        for t, v in zip(rel.tolist(), used[lo:hi].tolist()):
            tl.add(t, v)
    ts, vs = tl.points()
    if timing:
        warnings.append("timing figures cannot be trusted: " + "; ".join(timing))
    idle_used = int(used[0])
    if timed:
        start = (_EPOCH + timedelta(microseconds=t0_us)).isoformat()
        end = (_EPOCH + timedelta(microseconds=int(times[-1]))).isoformat()
    else:
        start = end = None
    basis = Basis(
        domain=f"gpu:{key}",
        device_name=_na(g.name),
        device_uuid=_na(g.uuid),
        total_bytes=g.total,
        driver_version=_na(g.driver),
        sampler="nvidia-smi",
        interval_s=interval,
        start_time=start,
        end_time=end,
        source=source,
    )
    return Measurement(
        total_bytes=g.total,
        peak_used_bytes=int(used[i_peak]),
        idle_used_bytes=idle_used,
        basis=basis,
        peak_time_s=peak_time,
        reserved_bytes=g.reserved_max,
        max_gap_s=max_gap,
        samples=n,
        timeline={"t_s": ts, "used_bytes": vs} if timed else {"sample": ts, "used_bytes": vs},
        processes=None,
        extra={"used_rule": g.rule, "idle_rule": "earliest sample of the log",
               "ignored_columns": ignored, "timestamps": "local time of the logging machine" if timed else None,
               "warnings": warnings, **({"timing_untrusted": timing} if timing else {})},
    )


def _span(seconds: float) -> str:
    """``"3.2 h"``, ``"2,923 years"``: a long gap in words a reader can judge."""
    for unit, size in (("years", 365.25 * 86400), ("days", 86400), ("h", 3600)):
        if seconds >= size:
            return f"{seconds / size:,.1f} {unit}"
    return f"{seconds:,.1f} s"


def load_smi_csv(path: str, *, columns: list[str] | None = None) -> dict[str, Any]:
    """Read the log at ``path`` line by line with :func:`parse_smi_lines` (``basis.source``
    = its name); the encoding is decided from its first bytes (:func:`sniff_encoding`).

    Raises:
        SmiCsvError: the file is missing, unreadable or not a memory log.
    """
    from pathlib import Path

    from kvgate.guarded import open_regular  # noqa: PLC0415

    p = Path(path)
    try:
        with open_regular(p, what="nvidia-smi log") as raw:  # a FIFO or device: refused, never read forever
            enc = sniff_encoding(raw.read(64))
            raw.seek(0)
            with io.TextIOWrapper(raw, encoding=enc, errors="replace", newline="") as fh:
                return parse_smi_lines(_lines(fh), source=p.name, columns=columns)
    except OSError as exc:
        raise SmiCsvError(f"cannot read nvidia-smi log {p}: {exc.strerror or exc}") from exc
    except KvgateError as exc:
        if isinstance(exc, SmiCsvError):
            raise
        raise SmiCsvError(exc.message, hint=exc.hint) from None


def _lines(fh: io.TextIOBase) -> Iterator[str]:
    """Lines of ``fh`` split as ``str.splitlines`` does for ``\\n``, ``\\r\\n`` and ``\\r``
    (ends kept); a line longer than :data:`_MAX_LINE_CHARS` is cut there (it is not a
    sample: it is then skipped as a bad row)."""
    carry = ""
    while True:
        chunk = fh.read(1 << 16)
        if not chunk:
            break
        buf = carry + chunk
        start = 0
        while True:
            i = _NEXT_END.search(buf, start)
            if i is None:
                break
            end = i.end()
            if buf[i.start()] == "\r" and end == len(buf):  # a \r at the chunk's end: \r\n may follow
                break
            yield buf[start:end]
            start = end
        carry = buf[start:]
        if len(carry) > _MAX_LINE_CHARS:
            yield carry[:_MAX_LINE_CHARS]
            carry = ""
            for rest in _drop_to_line_end(fh):
                carry = rest
                break
    if carry:
        yield carry


def _drop_to_line_end(fh: io.TextIOBase) -> Iterator[str]:
    """Read on to the end of an overlong line; yield what follows it (once), if anything."""
    while True:
        chunk = fh.read(1 << 16)
        if not chunk:
            return
        m = _NEXT_END.search(chunk)
        if m is not None:
            yield chunk[m.end():]
            return


_NEXT_END = re.compile(r"\r\n|\n|\r")
_MAX_LINE_CHARS = 1 << 16
