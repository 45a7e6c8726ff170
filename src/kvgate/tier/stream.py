"""The streaming hashed-trace reader: a trace of any length in memory that follows its
requests, never its text.

:class:`TraceStream` opens a trace (JSONL, plain or gzip/zstd-compressed, told by the
file's first bytes; or a ``.json`` list of objects, read whole up to
:data:`MAX_JSON_LIST_BYTES`) and hands it on batch by batch as numpy arrays: per request
its ``input_length`` and time, and the flat int64 hash ids with their offsets. No Python
object is built per request on the fast path: pyarrow's JSON reader parses 16 MiB blocks
with an explicit schema (the three columns; other keys are skipped unparsed) and its
list column becomes the id array directly.

pyarrow vouches only for clean blocks: a parse error (``hash_ids: [true, 5]``, a nested
list, a float, a 5,000-digit id), a null or missing cell, a negative value, a
non-finite or overflowing time all send the file to the line reader
(:meth:`TraceStream._slow_batches`), which reads the same stream line by line through
:func:`kvgate.guarded.loads_json` (nesting depth, digit limits) in bounded chunks and
either reads the file or raises the :class:`~kvgate.replay.readers.base.TraceError` that
names the line. Batches already handed on are not handed on again.

What a caller gets (:meth:`TraceStream.read`): a :class:`~kvgate.tier.traces.HashedTrace`
with the ids interned to dense int32 codes in first-seen order
(:class:`~kvgate.tier.kernel.Interner`: equal ids, equal codes; nothing a cache model
reads changes), or, with ``keep_ids=False``, only the per-request arrays, the ids having
gone to ``on_batch`` (the LRU curve builder, which follows only the sampled blocks under
SHARDS): then, when the block size is known before reading, nothing per request is kept
either (:class:`_Tally` counts what the output says: requests, prompt tokens, the time
range and order, the requests whose blocks do not match their length), so memory is the
builder's state and one batch, whatever the trace's length. ``limit`` stops the reading
after that many requests.

A FIFO, socket or device is refused before it is opened (reading one could block for
ever); a trace whose every prompt is 0 tokens is refused (there is nothing to cache, no
hit share to give).
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kvgate.errors import KvgateError
from kvgate.guarded import NOT_FOUND_HINT, loads_json
from kvgate.replay import timeunits
from kvgate.replay.readers.base import TraceError, norm_column, pick_column
from kvgate.replay.readers.formats import ARRIVAL_COLUMNS, PROMPT_COLUMNS, detect_format
from kvgate.tier.traces import HASH_COLUMNS, MAX_INPUT_TOKENS, HashedTrace

BLOCK_BYTES = 1 << 24  # pyarrow's largest JSON block (a line must fit in one) and the line reader's longest line
FAST_BLOCK_BYTES = 1 << 18  # pyarrow's first block size: 256 KiB holds less than 1 MiB (pyarrow parses a few
# blocks ahead) at the same speed; a longer line retries with BLOCK_BYTES
LEAN_BLOCK_BYTES = 1 << 16  # the first block size of a lean read (SHARDS): ~12 MiB less resident, ~10% slower
MAX_JSON_LIST_BYTES = 1 << 28  # a ``.json`` list is parsed whole: above 256 MiB, JSONL is asked for
_SLOW_CHUNK = 1 << 16  # requests per batch of the line reader
_MAGIC = {b"\x1f\x8b": "gzip", b"\x28\xb5\x2f\xfd": "zstd"}

OnBatch = Callable[[np.ndarray, np.ndarray, np.ndarray], None]
Progress = Callable[[int, int], None]


@dataclass
class Batch:
    """Requests read: ``length`` int64 ``[n]``, ``offsets`` int64 ``[n + 1]`` from 0, ``ids``
    int64 ``[offsets[-1]]``, ``time`` float64 ``[n]`` or ``None``."""

    length: np.ndarray
    offsets: np.ndarray
    ids: np.ndarray
    time: np.ndarray | None


def _prefetched(batches: Iterator[Batch], depth: int = 2) -> Iterator[Batch]:
    """``batches`` read ahead by a worker thread (at most ``depth`` waiting), so that the
    parse of the next block (pyarrow, without the GIL) runs while the caller's compiled
    pass (numba ``nogil``) works on this one. An error of the reader is raised here, in
    the caller's thread, where it would have been raised without the thread."""
    import queue
    import threading

    q: queue.Queue[tuple[str, Any]] = queue.Queue(depth)
    stop = threading.Event()

    def put(item: tuple[str, Any]) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                pass
        return False

    def work() -> None:
        try:
            for b in batches:
                if not put(("batch", b)):
                    return
            put(("end", None))
        except BaseException as exc:  # handed to the caller's thread
            put(("error", exc))

    t = threading.Thread(target=work, name="kvgate-trace-reader", daemon=True)
    t.start()
    try:
        while True:
            kind, v = q.get()
            if kind == "batch":
                yield v
            elif kind == "end":
                return
            else:
                raise v
    finally:
        stop.set()


class _NotClean(Exception):
    """A block the fast reader does not vouch for."""


def check_trace_file(path: Path) -> tuple[int, str | None]:
    """Size in bytes and compression (``"gzip"``, ``"zstd"`` or ``None``) of a trace file.

    Raises:
        TraceError: missing, a directory, not a regular file (FIFO, socket, device),
            unreadable, empty.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise TraceError(f"trace file not found: {path}", hint=NOT_FOUND_HINT) from None
    except OSError as exc:
        raise TraceError(f"cannot read trace {path}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise TraceError(f"trace path is a directory, not a file: {path}", hint="give the trace file itself")
    if not stat.S_ISREG(st.st_mode):
        raise TraceError(f"trace {path} is not a regular file (a FIFO, socket or device)",
                         hint="save the trace to a file first (reading a pipe could wait for ever)")
    try:
        with open(path, "rb") as fh:
            magic = fh.read(4)
    except OSError as exc:
        raise TraceError(f"cannot read trace {path}: {exc.strerror or exc}") from None
    if not magic:
        raise TraceError(f"trace {path} is empty", hint="a hashed trace is JSONL: one object per line")
    return st.st_size, _MAGIC.get(magic[:2]) or _MAGIC.get(magic[:4])


def _open(path: Path, compression: str | None) -> tuple[Any, Any]:
    """``(stream, raw)``: the decompressed pyarrow stream and the raw file (its ``tell()``
    is the progress)."""
    import pyarrow as pa

    raw = pa.OSFile(str(path), "r")
    return (pa.CompressedInputStream(raw, compression) if compression else raw), raw


def _lines(stream: Any, path: Path) -> Iterator[tuple[int, bytes]]:
    """``(line number, bytes)`` of every line, read in 1 MiB chunks; a line over
    :data:`BLOCK_BYTES` is refused."""
    buf = b""
    no = 0
    while True:
        try:
            chunk = stream.read(1 << 20)
        except OSError as exc:  # a corrupt gzip/zstd stream
            raise TraceError(f"cannot read trace {path}: {exc}") from None
        if not chunk:
            break
        buf += chunk
        parts = buf.split(b"\n")
        buf = parts.pop()
        for line in parts:
            no += 1
            yield no, line
        if len(buf) > BLOCK_BYTES:
            raise TraceError(f"trace {path}, line {no + 1}: longer than {BLOCK_BYTES >> 20} MiB",
                             hint="a hashed trace has one request per line")
    if buf:
        yield no + 1, buf


def _bad_json(path: Path, no: int, exc: KvgateError) -> TraceError:
    msg = exc.message
    if " is not valid JSON: " in msg:
        return TraceError(f"trace {path}, line {no}: not valid JSON ({msg.split(' is not valid JSON: ', 1)[1]})",
                          hint="a hashed trace is JSONL: one object per line with input_length and hash_ids")
    return TraceError(f"trace {path}, line {no}: {msg.removeprefix('it ')}",
                      hint="a hashed trace is JSONL: one object per line with input_length and hash_ids")


def _unsorted_warning() -> str:
    return "timestamps are not sorted: requests are replayed in file order, as published replays do"


def _refuse_empty(path: Path, n: int, prompt_tokens: int) -> None:
    """Refuse a trace of no requests, or of no prompt tokens (nothing to cache).

    Raises:
        TraceError: as said.
    """
    if n == 0:
        raise TraceError(f"trace {path} has no requests")
    if prompt_tokens == 0:
        raise TraceError(f"trace {path}: every request has 0 prompt tokens: there is nothing to cache",
                         hint="the input_length column gives each request's prompt tokens")


class _BlockCheck:
    """The requests whose hash blocks do not match their ``input_length`` (at ``bt`` tokens
    a block), counted slice by slice: how many carry too few blocks, and (index, blocks,
    length) of the first with too few and of the first with a whole block too many."""

    def __init__(self, bt: int) -> None:
        self.bt = bt
        self.n_short = 0
        self.first_short: tuple[int, int, int] | None = None
        self.first_over: tuple[int, int, int] | None = None

    def add(self, n0: int, c: np.ndarray, ln: np.ndarray) -> None:
        """Requests ``n0, n0 + 1, ...`` with ``c`` blocks (int64) of ``ln`` tokens."""
        bt = self.bt
        short = c * bt + bt <= ln
        s = int(short.sum())
        if s and self.first_short is None:
            i = int(np.argmax(short))
            self.first_short = (n0 + i, int(c[i]), int(ln[i]))
        self.n_short += s
        if self.first_over is None:
            over = c * bt - ln >= bt
            if bool(over.any()):
                i = int(np.argmax(over))
                self.first_over = (n0 + i, int(c[i]), int(ln[i]))

    def warnings(self, n: int) -> list[str]:
        """What to print for a trace of ``n`` requests."""
        out = []
        bt = self.bt
        if self.n_short and self.first_short is not None:
            i, c, ln = self.first_short
            out.append(
                f"{self.n_short:,} of {n:,} requests carry fewer hash blocks than their input_length needs "
                f"(first: request {i + 1}, {c} blocks of {bt} tokens for {ln:,} tokens): "
                "their uncovered tokens can never hit, so the hit share is a lower bound"
            )
        if self.first_over is not None:
            i, c, ln = self.first_over
            out.append(f"request {i + 1}: {c} hash blocks of {bt} tokens exceed input_length "
                       f"{ln} by a whole block or more: is the block size right?")  # fmt: skip
        return out


class _Tally:
    """What the output says of a trace read without its per-request arrays, counted batch
    by batch: requests, prompt tokens, the least and greatest time and whether the times
    are sorted, and the requests whose blocks do not match their length (:attr:`blocks`)."""

    def __init__(self, bt: int) -> None:
        self.blocks = _BlockCheck(bt)
        self.n = self.prompt = 0
        self.lo, self.hi = math.inf, -math.inf
        self.prev: float | None = None
        self.unsorted = False

    def add(self, b: Batch) -> None:
        k = len(b.length)
        if not k:
            return
        n0, self.n = self.n, self.n + k
        self.prompt += int(b.length.sum())
        self.blocks.add(n0, np.diff(b.offsets), b.length)
        t = b.time
        if t is not None:
            self.lo, self.hi = min(self.lo, float(t.min())), max(self.hi, float(t.max()))
            if not self.unsorted:
                self.unsorted = (self.prev is not None and float(t[0]) < self.prev) or bool(np.any(t[1:] < t[:-1]))
            self.prev = float(t[-1])


class TraceStream:
    """An opened hashed trace: its columns and format, read by :meth:`read`.

    Args:
        path: the file.
        block_tokens: tokens per hash block, or ``None`` (the format's, else decided from
            the data after reading: :attr:`block_tokens` stays ``None`` until then).
        time_unit: ``s``/``ms``/``us``/``ns``, or ``None``.
        limit: read only the first ``limit`` requests.

    Raises:
        TraceError: an unusable file (:func:`check_trace_file`), a first line that is not
            a JSON object, no hash-id or input-length column.
    """

    def __init__(self, path: str | Path, *, block_tokens: int | None = None, time_unit: str | None = None,
                 limit: int | None = None) -> None:
        from kvgate.tier.traces import FORMAT_BLOCK_TOKENS  # noqa: I001

        self.path = Path(path)
        timeunits.check_time_unit(time_unit)
        self.time_unit = time_unit
        self.limit = limit
        self.size, self.compression = check_trace_file(self.path)
        self.json_list: list[dict[str, Any]] | None = None
        columns = self._head()
        self.columns = columns
        self.fmt = detect_format(columns)
        c_hash = pick_column(columns, HASH_COLUMNS)
        c_len = pick_column(columns, PROMPT_COLUMNS)
        if c_hash is None or c_len is None:
            missing = "hash_ids" if c_hash is None else "input_length"
            raise TraceError(
                f"trace {self.path} has no {missing} column (columns found: {', '.join(columns)})",
                hint="a hashed trace (Mooncake, Qwen-Bailian) has input_length and hash_ids on every line",
            )
        self.c_hash: str = c_hash
        self.c_len: str = c_len
        c_time: str | None = self.fmt.time if self.fmt is not None else None
        if c_time is not None:
            c_time = pick_column(columns, (c_time,))
        elif self.fmt is None:
            c_time = next((c for c in columns
                           if norm_column(timeunits.split_unit_suffix(c)[0]) in ARRIVAL_COLUMNS), None)  # fmt: skip
        self.c_time = c_time
        self.format = self.fmt.name if self.fmt is not None else ("offline" if c_time is None else "hashed")
        self.block_tokens: int | None = None
        self.block_reason = ""
        if block_tokens is not None:
            self.block_tokens, self.block_reason = int(block_tokens), "given"
        elif self.format in FORMAT_BLOCK_TOKENS:
            self.block_tokens = FORMAT_BLOCK_TOKENS[self.format]
            self.block_reason = f"the {self.format} format's hash block"

    # -- the head ------------------------------------------------------------------------------------------------
    def _head(self) -> list[str]:
        import pyarrow as pa

        stream, raw = _open(self.path, self.compression)
        try:
            first: tuple[int, bytes] | None = None
            for no, line in _lines(stream, self.path):
                if line.strip():
                    first = (no, line)
                    break
        except pa.ArrowException as exc:
            raise TraceError(f"cannot read trace {self.path}: {exc}") from None
        finally:
            raw.close()
        if first is None:
            raise TraceError(f"trace {self.path} has no requests")
        no, line = first
        text = line.lstrip(b"\xef\xbb\xbf").lstrip()
        if text.startswith(b"["):
            return self._head_json_list()
        try:
            obj = loads_json(line, what="it")
        except KvgateError as exc:
            raise _bad_json(self.path, no, exc) from None
        if not isinstance(obj, dict):
            raise TraceError(f"trace {self.path}, line {no}: not a JSON object")
        return list(obj)

    def _head_json_list(self) -> list[str]:
        if self.compression or self.size > MAX_JSON_LIST_BYTES:
            raise TraceError(f"trace {self.path}: a JSON list is read whole, and this one is "
                             f"{'compressed' if self.compression else f'over {MAX_JSON_LIST_BYTES >> 20} MiB'}",
                             hint="write it as JSONL (one object per line): it is then read in bounded memory")
        try:
            with open(self.path, "rb") as fh:
                data = loads_json(fh.read(), what=f"trace {self.path}")
        except OSError as exc:
            raise TraceError(f"cannot read trace {self.path}: {exc.strerror or exc}") from None
        except KvgateError as exc:
            raise TraceError(exc.message) from None
        if not isinstance(data, list):
            raise TraceError(f"trace {self.path} is not a JSON list of objects")
        for i, o in enumerate(data, start=1):
            if not isinstance(o, dict):
                raise TraceError(f"trace {self.path}: item {i} is not a JSON object")
        if not data:
            raise TraceError(f"trace {self.path} has no requests")
        self.json_list = data
        columns: list[str] = []
        seen: set[str] = set()
        for o in data[:1000]:
            for k in o:
                if k not in seen:
                    seen.add(k)
                    columns.append(k)
        return columns

    # -- batches -------------------------------------------------------------------------------------------------
    def _fast_batches(self, progress: Progress | None, block: int = BLOCK_BYTES) -> Iterator[Batch]:
        import pyarrow as pa
        import pyarrow.json as pajson

        fields = [(self.c_len, pa.int64()), (self.c_hash, pa.list_(pa.int64()))]
        if self.c_time is not None:
            fields.append((self.c_time, pa.float64()))
        stream, raw = _open(self.path, self.compression)
        try:
            try:
                # the system allocator: pyarrow's default (mimalloc) kept ~45 MiB more resident
                # for the same blocks (RESULTS.md, tier at production sizes)
                reader = pajson.open_json(
                    stream, read_options=pajson.ReadOptions(block_size=block),
                    parse_options=pajson.ParseOptions(explicit_schema=pa.schema(fields),
                                                      unexpected_field_behavior="ignore"),
                    memory_pool=pa.system_memory_pool(),
                )  # fmt: skip
                for rb in reader:
                    yield self._convert(rb)
                    if progress is not None:
                        progress(raw.tell(), self.size)
            except (pa.ArrowException, ValueError, TypeError, OSError):
                raise _NotClean from None
        finally:
            raw.close()

    def _convert(self, rb: Any) -> Batch:
        names = rb.schema.names

        def col(name: str) -> Any:
            a = rb.column(names.index(name))
            if a.null_count:
                raise _NotClean
            return a

        length = col(self.c_len).to_numpy().astype(np.int64, copy=False)
        h = col(self.c_hash)
        # the list's offsets and values buffers, read as numpy: ``value_lengths()`` and
        # ``flatten()`` are compute functions, whose registry (~9 MiB resident) would load
        off = h.offsets.to_numpy().astype(np.int64)
        ids = h.values.to_numpy()[off[0] : off[-1]].astype(np.int64, copy=False)
        counts = np.diff(off)
        if (len(length) and (int(length.min()) < 0 or int(length.max()) > MAX_INPUT_TOKENS)) \
                or (len(ids) and int(ids.min()) < 0):
            raise _NotClean
        time = None
        if self.c_time is not None:
            time = col(self.c_time).to_numpy().astype(np.float64, copy=False)
            if not np.all(np.isfinite(time)):
                raise _NotClean
        offsets = np.zeros(len(length) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return Batch(length, offsets, ids, time)

    def _objects(self) -> Iterator[tuple[int, Any]]:
        if self.json_list is not None:
            yield from enumerate(self.json_list, start=1)
            return
        stream, raw = _open(self.path, self.compression)
        try:
            taken = 0
            for no, line in _lines(stream, self.path):
                if not line.strip():
                    continue
                if self.limit is not None and taken >= self.limit:
                    return  # lines after the limit are not read
                taken += 1
                try:
                    yield no, loads_json(line, what="it")
                except KvgateError as exc:
                    raise _bad_json(self.path, no, exc) from None
        finally:
            raw.close()

    def _slow_batches(self, progress: Progress | None) -> Iterator[Batch]:
        """The line reader (module docstring): every defect named with its line."""
        p, c_len, c_hash, c_time = self.path, self.c_len, self.c_hash, self.c_time
        lens: list[int] = []
        counts: list[int] = []
        flat: list[int] = []
        times: list[float] = []
        where = "item" if self.json_list is not None else "line"
        for no, o in self._objects():
            if not isinstance(o, dict):
                raise TraceError(f"trace {p}, {where} {no}: not a JSON object")
            v = o.get(c_len)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or not 0 <= v <= MAX_INPUT_TOKENS \
                    or v != int(v):
                raise TraceError(f"trace {p}, {where} {no}: {c_len} is not a whole number of tokens from 0 to "
                                 f"{MAX_INPUT_TOKENS:,}: {v!r:.40}")
            h = o.get(c_hash)
            if not isinstance(h, list):
                raise TraceError(f"trace {p}, {where} {no}: {c_hash} is not a list: {h!r:.60}")
            for x in h:
                if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < 2**63:
                    raise TraceError(f"trace {p}, {where} {no}: {c_hash} holds {x!r:.40}, not a whole number >= 0",
                                     hint="hash ids are whole numbers from 0 to 2^63 - 1, one per prompt block")
            if c_time is not None:
                tv = o.get(c_time)
                try:
                    tf = float(tv) if not isinstance(tv, bool) and isinstance(tv, (int, float)) else math.nan
                except OverflowError:
                    tf = math.inf
                if not math.isfinite(tf):
                    if isinstance(tv, (int, float)) and not isinstance(tv, bool):
                        raise TraceError(f"trace {p}, {where} {no}: {c_time} is not a finite number: {tv!r:.40}")
                    raise TraceError(f"trace {p}: column {c_time!r} is not numeric ({where} {no}: {tv!r:.40})",
                                     hint="drop it or give numbers")
                times.append(tf)
            lens.append(int(v))
            counts.append(len(h))
            flat.extend(h)
            if len(lens) >= _SLOW_CHUNK:
                yield self._batch(lens, counts, flat, times)
                lens, counts, flat, times = [], [], [], []
        if lens:
            yield self._batch(lens, counts, flat, times)

    def _batch(self, lens: list[int], counts: list[int], flat: list[int], times: list[float]) -> Batch:
        offsets = np.zeros(len(lens) + 1, dtype=np.int64)
        np.cumsum(np.array(counts, dtype=np.int64), out=offsets[1:])
        return Batch(np.array(lens, dtype=np.int64), offsets, np.array(flat, dtype=np.int64),
                     np.array(times, dtype=np.float64) if self.c_time is not None else None)

    def batches(self, progress: Progress | None = None, *, first_block: int | None = None) -> Iterator[Batch]:
        """Batches up to :attr:`limit` requests, each request once: pyarrow first (on
        ``first_block``-byte blocks, :data:`FAST_BLOCK_BYTES` by default); if it
        does not vouch for a block, the line reader from the top, handing on only the
        requests after those pyarrow handed on (the same values: the line reader either
        agrees or names a line)."""
        done = 0
        if self.json_list is None:
            # 256 KiB blocks first; a line longer than that (or any block pyarrow does not vouch
            # for) retries with 16 MiB blocks after the requests already handed on
            for block in (first_block or FAST_BLOCK_BYTES, BLOCK_BYTES):
                seen = 0
                try:
                    for b in self._fast_batches(progress, block):
                        b = self._cut(b, seen)
                        lo, seen = seen, seen + len(b.length)
                        if seen > done:
                            b = self._tail(b, done - lo) if lo < done else b
                            done = seen
                            yield b
                        if self.limit is not None and seen >= self.limit:
                            return
                    return
                except _NotClean:
                    pass
        seen = 0
        for b in self._slow_batches(progress):
            b = self._cut(b, seen)
            lo, seen = seen, seen + len(b.length)
            if seen > done:
                yield self._tail(b, done - lo) if lo < done else b
            if self.limit is not None and seen >= self.limit:
                return

    @staticmethod
    def _tail(b: Batch, k: int) -> Batch:
        """``b`` without its first ``k`` requests."""
        a = int(b.offsets[k])
        return Batch(b.length[k:], b.offsets[k:] - a, b.ids[a:], None if b.time is None else b.time[k:])

    def _cut(self, b: Batch, before: int) -> Batch:
        if self.limit is None or before + len(b.length) <= self.limit:
            return b
        n = max(self.limit - before, 0)
        return Batch(b.length[:n], b.offsets[: n + 1], b.ids[: int(b.offsets[n])],
                     None if b.time is None else b.time[:n])

    # -- the whole trace -----------------------------------------------------------------------------------------
    def _given_time_unit(self, column: str) -> str | None:
        """The time unit --time-unit, the column's name or the format gives; ``None``: to detect."""
        _, suffix = timeunits.split_unit_suffix(column)
        unit: str | None = self.time_unit or suffix or (self.fmt.time_unit if self.fmt is not None else None)
        return unit

    def read(self, *, on_batch: OnBatch | None = None, keep_ids: bool = True,
             progress: Progress | None = None, lean: bool = False) -> Any:
        """The trace as a :class:`~kvgate.tier.traces.HashedTrace` (module docstring).

        Args:
            on_batch: called with ``(input_length, offsets, ids)`` of every batch, in file
                order, once per request (raw ids; needs :attr:`block_tokens` known).
            keep_ids: keep the (interned) ids in the trace; ``False``: only ``on_batch``
                sees them.
            progress: called with ``(bytes read, file size)`` after each fast batch.
            lean: for a pass that is cheap next to the parse (SHARDS): blocks of
                :data:`LEAN_BLOCK_BYTES` and no read-ahead thread (less resident memory);
                with ``keep_ids=False`` and the block size known, else ignored.

        Raises:
            TraceError: a line at fault, a block size that cannot be decided, no requests,
                no prompt tokens.
        """
        from kvgate.tier.traces import HashedTrace, check, infer_block_tokens

        if on_batch is not None and self.block_tokens is None:
            raise ValueError("on_batch needs the block size before reading")
        if not keep_ids and self.block_tokens is not None:
            return self._read_counted(on_batch, progress, lean=lean)
        from kvgate.tier.kernel import Interner  # numba: not imported by a run that keeps no ids

        interner = Interner() if keep_ids else None
        lens: list[np.ndarray] = []
        cnts: list[np.ndarray] = []
        tms: list[np.ndarray] = []
        codes: list[np.ndarray] = []
        for b in _prefetched(self.batches(progress)):
            lens.append(b.length.astype(np.int32))  # input_length <= MAX_INPUT_TOKENS (10^9) < 2^31
            cnts.append(np.diff(b.offsets).astype(np.int32))
            if b.time is not None:
                tms.append(b.time)
            if interner is not None:
                codes.append(interner.codes(b.ids))
            if on_batch is not None:
                on_batch(b.length, b.offsets, b.ids)
        p = self.path
        length = np.concatenate(lens).astype(np.int64) if lens else np.zeros(0, dtype=np.int64)
        lens.clear()
        counts = np.concatenate(cnts) if cnts else np.zeros(0, dtype=np.int32)  # int32: 4 B a request
        cnts.clear()
        n = len(length)
        _refuse_empty(p, n, int(length.sum()))
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        ids = np.concatenate(codes) if codes else np.zeros(0, dtype=np.int32)
        arrival = None
        warnings: list[str] = []
        if self.c_time is not None:
            times = np.concatenate(tms)
            tms.clear()
            unit = self._given_time_unit(self.c_time)
            if unit is None:
                unit, _why = timeunits.detect_time_unit(times, source=str(p), column=self.c_time)
            unsorted = n > 1 and bool(np.any(times[1:] < times[:-1]))
            times -= times[0]  # in place: the seconds after the first request
            times *= timeunits.UNIT_SECONDS[unit]
            arrival = times
            if unsorted:
                warnings.append(_unsorted_warning())
        if self.block_tokens is None:
            fits = infer_block_tokens(length, counts.astype(np.int64))
            if len(fits) != 1:
                raise TraceError(
                    f"trace {p}: the hash block size cannot be told from the data "
                    f"({'no size' if not fits else 'sizes ' + ', '.join(map(str, fits))} in 16..4096 gives "
                    "ceil(input_length / block) ids on every line)",
                    hint="say it: --trace-block-tokens 512 (Mooncake) or 16 (Qwen-Bailian)",
                )
            self.block_tokens = fits[0]
            self.block_reason = f"from the data: every line has ceil(input_length / {fits[0]}) ids"
        bt = self.block_tokens
        t = HashedTrace(length, offsets, ids, bt, self.block_reason, arrival, str(p), self.format,
                        self.fmt.attribution if self.fmt is not None else None, warnings,
                        ids_kept=keep_ids)  # fmt: skip
        check(t)
        # in slices of 2^20 requests: whole-trace temporaries were several int64 arrays per request
        blocks = _BlockCheck(bt)
        for lo in range(0, n, 1 << 20):
            blocks.add(lo, counts[lo : lo + (1 << 20)].astype(np.int64), length[lo : lo + (1 << 20)])
        t.warnings.extend(blocks.warnings(n))
        return t

    def _read_counted(self, on_batch: OnBatch | None, progress: Progress | None, *, lean: bool = False) -> Any:
        """:meth:`read` keeping nothing per request (module docstring): the same checks,
        errors and warnings, in the same order, from a :class:`_Tally`."""
        from kvgate.tier.traces import HashedTrace, check

        assert self.block_tokens is not None
        bt = self.block_tokens
        tally = _Tally(bt)
        batches = self.batches(progress, first_block=LEAN_BLOCK_BYTES if lean else None)
        for b in (batches if lean else _prefetched(batches)):
            tally.add(b)
            if on_batch is not None:
                on_batch(b.length, b.offsets, b.ids)
            del b  # the batch goes before the next one is taken
        p, n = self.path, tally.n
        _refuse_empty(p, n, tally.prompt)
        warnings: list[str] = []
        if self.c_time is not None:
            unit = self._given_time_unit(self.c_time)
            if unit is None:
                timeunits.detect_time_unit_of_range(tally.lo, tally.hi, n, source=str(p), column=self.c_time)
            if tally.unsorted:
                warnings.append(_unsorted_warning())
        t = HashedTrace(np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int32), bt,
                        self.block_reason, None, str(p), self.format,
                        self.fmt.attribution if self.fmt is not None else None, warnings, ids_kept=False,
                        counted=(n, tally.prompt))  # fmt: skip
        check(t)
        t.warnings.extend(tally.blocks.warnings(n))
        return t


def load_hashed_trace(
    path: str | Path,
    *,
    block_tokens: int | None = None,
    time_unit: str | None = None,
    limit: int | None = None,
) -> HashedTrace:
    """Read a hashed trace (JSONL, plain, gzip or zstd; or a ``.json`` list of objects) in
    file order, streamed (:class:`TraceStream`); the ids come back
    interned to dense int32 codes in first-seen order.

    Args:
        path: the file.
        block_tokens: tokens per hash block; ``None``: the format's or the data's (module
            docstring).
        time_unit: ``s``/``ms``/``us``/``ns`` for a numeric time column; ``None``: the
            column name's, the format's, or detected.
        limit: read only the first ``limit`` requests.

    Raises:
        TraceError: unreadable or non-regular file, a line that is not a JSON object, no
            hash-id or input-length column, a ``hash_ids`` that is not a list of whole
            numbers ≥ 0, a bad input length or time (each with its line), a block size
            that cannot be decided, no prompt tokens at all.
    """
    out: HashedTrace = TraceStream(path, block_tokens=block_tokens, time_unit=time_unit, limit=limit).read()
    return out
