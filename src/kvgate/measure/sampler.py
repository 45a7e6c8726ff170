"""One sampling thread: exact running peak, largest gaps, bounded min/max timeline.

A *reader* is a callable returning one ``int`` of bytes per channel (e.g. ``total − free``
of each selected GPU). :class:`Sampler` calls it every ``interval_s`` on one thread, on a
fixed schedule (deadline-based, so slow reads do not accumulate drift), and keeps per
channel:

- the exact running peak and the time it was seen, however much the timeline is thinned;
- idle samples taken before :meth:`Sampler.mark_start` (the settle phase) → idle used;
- the gaps between consecutive samples after the start: the largest (a spike shorter than
  it can be missed), the :data:`TOP_GAPS` largest with their times and the values on
  either side (:class:`Gap`), and how many exceeded ``10 × interval_s``;
- a :class:`Timeline` of at most ``2 × capacity`` points for runs of hours.

Gaps. On an H200 (driver 580) every measured run had one gap of ~105 ms, and it fell
50–150 ms before the workload's first GPU allocation, i.e. while the workload process
initialised CUDA; a sampler with no other work in its process saw the same gap on three
threads at once, and nothing in kvgate's process runs then (NVML lists no process before
the context exists, so the runner's per-process poll walks no process tree). So NVML's
memory query blocks inside the driver while another process initialises CUDA (a bare NVML
loop in its own process, ``benchmarks/sampler_cost.py --probe-out``, checks this): kvgate
cannot sample during it, so the gap is recorded with its time, not hidden.

Cost and the default interval. Per sample the thread pays a wake-up, one NVML memory query
(:meth:`kvgate.measure.nvml.Nvml.used_reader`: ``nvmlDeviceGetMemoryInfo_v2`` through ctypes)
and a few comparisons: a sample whose values equal the previous one's, with no gap above the
floor, is only counted (:meth:`_loop`), so the bookkeeping of :meth:`_ingest` runs on changes
alone. There is no compiled helper and nothing is built at run time. Measured on a 16-core
H200 VM (``benchmarks/measure_cost.py``: ``kvgate measure --settle 0s -- sleep 30`` minus
``-- true``, CPU of the whole process; ``benchmarks/results/issue16/``): at 1 ms this thread
costs 3.7–4.1% of one core (about 37–41 µs a sample, most of it the wake-up and a cold NVML
query; the removed C loop cost 2.7% on the same machine), and the whole process 4.2–4.9%
(the C loop: 3.7%; the runner's own 20 ms poll of CMD and its 0.5 s process listings are
0.4–0.8% of that); at 2 ms the thread costs 2.6%, as the C loop did at 1 ms. Spikes held 1, 2, 5 and 20 ms by a torch workload were all
caught at 1, 1.5 and 2 ms (``benchmarks/spike_capture.py``: 30 of each, 1 and 4 GiB).
``--interval 500ms`` reproduces the source write-up's ``nvidia-smi -lms 500``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

DEFAULT_INTERVAL_S = 0.001
DEFAULT_TIMELINE_POINTS = 2048
TOP_GAPS = 5  # largest gaps kept with their times
LONG_GAP_FACTOR = 10  # gaps longer than this × interval are counted
HOLD_MAX = 128  # unchanged samples held at most before they are accounted (~0.1 s at 1 ms)
_IDLE_KEEP = 100_000  # idle samples kept for the median (settle of 100 s at 1 ms)
_INF = float("inf")


class Timeline:
    """Min/max-preserving decimation: at most ``capacity`` buckets of equal time span.

    Each bucket keeps its smallest and largest sample with their times. When the buckets
    would exceed ``capacity``, neighbours are merged pairwise and the span doubles, so
    memory is O(capacity) for any run length and every local extreme wider than one
    bucket survives. Times are seconds on any clock; values are ``int`` bytes.

    :meth:`add` returns at once, allocating nothing, when the sample falls in the current
    bucket and within its min/max (the common case: an unchanged value).
    """

    __slots__ = ("capacity", "span_s", "origin_s", "_buckets", "count", "_end", "_lo", "_hi")

    def __init__(self, capacity: int = DEFAULT_TIMELINE_POINTS, span_s: float = 0.001) -> None:
        if capacity < 2:
            raise ValueError("timeline capacity must be at least 2")
        self.capacity = capacity
        self.span_s = span_s
        self.origin_s: float | None = None
        # bucket: [index, t_min, v_min, t_max, v_max]
        self._buckets: list[list] = []
        self.count = 0
        # the last bucket's end time and min/max value: the fast path of add()
        self._end = -_INF
        self._lo = 0
        self._hi = -1

    def add(self, t: float, v: int) -> None:
        """Add one sample (times must not decrease)."""
        self.count += 1
        if t < self._end and self._lo <= v <= self._hi:
            return
        if self.origin_s is None:
            self.origin_s = t
        idx = int((t - self.origin_s) / self.span_s)
        b = self._buckets[-1] if self._buckets else None
        if b is not None and b[0] == idx:
            if v < b[2]:
                b[1], b[2] = t, v
                self._lo = v
            if v > b[4]:
                b[3], b[4] = t, v
                self._hi = v
            return
        self._buckets.append([idx, t, v, t, v])
        while len(self._buckets) > self.capacity:
            self._halve()
        b = self._buckets[-1]
        self._end = self.origin_s + (b[0] + 1) * self.span_s
        self._lo, self._hi = b[2], b[4]

    def _halve(self) -> None:
        self.span_s *= 2
        merged: list[list] = []
        for b in self._buckets:
            idx = b[0] // 2
            if merged and merged[-1][0] == idx:
                m = merged[-1]
                if b[2] < m[2]:
                    m[1], m[2] = b[1], b[2]
                if b[4] > m[4]:
                    m[3], m[4] = b[3], b[4]
            else:
                merged.append([idx, b[1], b[2], b[3], b[4]])
        self._buckets = merged

    def __len__(self) -> int:
        return len(self._buckets)

    def points(self) -> tuple[list[float], list[int]]:
        """``(times, values)`` in time order: each bucket's min and max (one if equal)."""
        ts: list[float] = []
        vs: list[int] = []
        for _, t1, v1, t2, v2 in self._buckets:
            if t1 == t2:
                ts.append(t1)
                vs.append(v1)
            else:
                for t, v in sorted(((t1, v1), (t2, v2))):
                    ts.append(t)
                    vs.append(v)
        return ts, vs


class Channel:
    """Running statistics of one channel (one GPU, host used, tree RSS, ...).

    Written by the sampler thread only. ``peak`` is stored before ``last``, so a reader in
    another thread that reads ``last`` and then ``peak`` never sees ``last > peak`` once
    running.
    """

    __slots__ = ("timeline", "idle", "peak", "peak_t", "last", "run_samples")

    def __init__(self, capacity: int) -> None:
        self.timeline = Timeline(capacity)
        self.idle: list[int] = []
        self.peak: int | None = None  # exact, over samples after mark_start
        self.peak_t: float | None = None
        self.last: int | None = None
        self.run_samples = 0

    def add(self, t: float, v: int, running: bool) -> None:
        if running:
            self.run_samples += 1
            if self.peak is None or v > self.peak:
                self.peak, self.peak_t = v, t
        elif len(self.idle) < _IDLE_KEEP:
            self.idle.append(v)
        self.last = v
        self.timeline.add(t, v)

    def idle_value(self) -> int | None:
        """Lower median of the settle samples, ``None`` if there were none."""
        if not self.idle:
            return None
        s = sorted(self.idle)
        return s[(len(s) - 1) // 2]


@dataclass(frozen=True)
class Gap:
    """One gap between consecutive samples: from ``t0`` to ``t1`` (sampler clock, s),
    with every channel's value at ``t0`` (``before``) and at ``t1`` (``after``)."""

    t0: float
    t1: float
    before: tuple[int, ...]
    after: tuple[int, ...]

    @property
    def length_s(self) -> float:
        return self.t1 - self.t0


class Sampler:
    """Samples ``reader`` every ``interval_s`` seconds on one daemon thread.

    Use: ``start()``, settle, ``mark_start()`` right before launching the workload,
    ``stop()`` when it exits (``stop`` takes one last sample so a run always has ≥ 1).
    Times are ``time.monotonic()`` seconds; :meth:`rel` makes them relative to the start.

    One writer (the thread; ``stop`` samples after joining it), no lock: other threads
    read single attributes (``samples``, a channel's ``last``/``peak``), each of which is
    consistent on its own under the GIL; read the rest after :meth:`stop`.

    If ``reader`` raises, sampling stops and the exception is kept in ``error``.
    """

    def __init__(self, reader: Callable[[], Sequence[int]], n_channels: int, *,
                 interval_s: float = DEFAULT_INTERVAL_S, timeline_points: int = DEFAULT_TIMELINE_POINTS,
                 clock: Callable[[], float] = time.monotonic, top_gaps: int = TOP_GAPS) -> None:
        if interval_s < 0:
            raise ValueError("interval must not be negative")
        self.reader = reader
        self.interval_s = interval_s
        self.clock = clock
        self.channels = [Channel(timeline_points) for _ in range(n_channels)]
        self.start_t: float | None = None  # set by mark_start
        self.samples = 0
        self.max_gap_s: float | None = None  # over samples after mark_start
        self.long_gap_s = LONG_GAP_FACTOR * interval_s
        self.long_gaps = 0  # gaps after mark_start longer than long_gap_s
        self.gaps: list[Gap] = []  # the top_gaps largest after mark_start, largest first
        self.error: BaseException | None = None
        self._top = max(1, top_gaps)
        self._gap_floor = -1.0  # a gap must exceed this to matter (top list or long count)
        self._prev_t: float | None = None
        self._prev_v: Sequence[int] = ()
        self._stopping = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.log: list | None = None  # set to [] to keep every entry ingested (t, values): benchmarks only
        query = getattr(reader, "query", None)
        # the loop that samples, for the measurement's basis (Basis.sampler_loop)
        self.loop = f"python thread, {query}" if query else "python thread"

    def sample_once(self) -> None:
        """Take one sample now (the Python loop's body; also used by ``stop``).

        The hot path: one reader call, one clock read, a comparison per gap and, per
        channel, a peak comparison and :meth:`Timeline.add`'s fast path.
        """
        values = self.reader()
        self._ingest(self.clock(), values)

    def _ingest(self, t: float, values: Sequence[int], count: int = 1, prev_t: float | None = None) -> None:
        """Account one sample taken at ``t``.

        From :meth:`_loop` an entry may stand for ``count`` samples (this one and the
        unchanged samples before it that the loop held: same values, no gap above the
        floor), and ``prev_t`` is the time of the sample taken right before it.
        """
        if self.log is not None:
            self.log.append((t, list(values)))
        start = self.start_t
        prev = self._prev_t if prev_t is None else prev_t
        if start is not None and t >= start:
            if prev is not None and prev >= start and t - prev > self._gap_floor:
                self._note_gap(prev, t, values)
            for ch, v in zip(self.channels, values):
                v = int(v)
                ch.run_samples += count
                peak = ch.peak
                if peak is None or v > peak:
                    ch.peak, ch.peak_t = v, t
                ch.last = v
                ch.timeline.add(t, v)
        else:
            for ch, v in zip(self.channels, values):
                ch.add(t, int(v), False)
        self._prev_t = t
        self._prev_v = values
        self.samples += count

    def _note_gap(self, t0: float, t1: float, values: Sequence[int]) -> None:
        """Off the hot path: a gap above the floor (the smallest kept or the long limit)."""
        g = t1 - t0
        if g > self.long_gap_s:
            self.long_gaps += 1
        gaps = self.gaps
        if len(gaps) < self._top or g > gaps[-1].length_s:
            gaps.append(Gap(t0, t1, tuple(int(v) for v in self._prev_v), tuple(int(v) for v in values)))
            gaps.sort(key=lambda x: x.length_s, reverse=True)
            del gaps[self._top:]
            self.max_gap_s = gaps[0].length_s
        if len(gaps) >= self._top:
            self._gap_floor = min(gaps[-1].length_s, self.long_gap_s)

    def _loop(self) -> None:
        """The sampling thread: one reader call and one clock read per sample, on a fixed
        schedule; a sample the bookkeeping does not need is only counted.

        A sample is *held* (not given to :meth:`_ingest` yet) when the run has started, its
        values equal the previous sample's and the gap before it is not above the gap floor
        (so it cannot change the peak, the idle median, the gaps or the timeline's min/max).
        Held samples are accounted together, as one entry at the last one's time with their
        count, when a sample that matters comes, every :data:`HOLD_MAX` + 1 samples (so the
        counts other threads read stay current) and at the end. The gap floor only grows, so a gap held under it never mattered later.
        """
        read, clock, sleep, wait, interval = self.reader, self.clock, time.sleep, self._stop.wait, self.interval_s
        ingest = self._ingest
        last_v: Sequence[int] | None = None  # the last sample taken: values, time, time of the one before
        last_t = prev_t = -_INF
        held = 0  # samples taken, equal to last_v, the latest at last_t, not yet ingested
        nxt = clock()
        try:
            while not self._stopping:
                v = read()
                t = clock()
                start = self.start_t
                if v == last_v and start is not None and last_t >= start and t - last_t <= self._gap_floor:
                    if held < HOLD_MAX:
                        held += 1
                    else:  # this one and the held ones, at this one's time
                        ingest(t, v, held + 1, last_t)
                        held = 0
                else:
                    if held:
                        ingest(last_t, last_v, held, prev_t)  # type: ignore[arg-type]
                        held = 0
                    ingest(t, v, 1, last_t if last_v is not None else None)
                prev_t, last_t, last_v = last_t, t, v
                nxt += interval
                delay = nxt - t
                if delay > 0.05:
                    wait(delay)  # long intervals: wake at once on stop()
                elif delay > 0:
                    sleep(delay)
                else:
                    nxt = t  # fell behind: do not try to catch up in a burst
        except BaseException as exc:  # noqa: BLE001 - reported through .error
            self.error = exc
        finally:
            if held:
                ingest(last_t, last_v, held, prev_t)  # type: ignore[arg-type]

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="kvgate-sampler", daemon=True)
        self._thread.start()

    def mark_start(self) -> float:
        """Mark the workload start: later samples count toward peak and gaps."""
        self.start_t = self.clock()
        return self.start_t

    def stop(self) -> None:
        """Stop the thread and take one final sample (unless the reader already failed)."""
        self._stopping = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.error is None:
            try:
                self.sample_once()
            except BaseException as exc:  # noqa: BLE001
                self.error = exc

    def rel(self, t: float | None) -> float | None:
        """Seconds since :meth:`mark_start` (negative during settle)."""
        if t is None:
            return None
        return t - (self.start_t if self.start_t is not None else 0.0)

    def gap_summary(self, i: int = 0) -> dict:
        """The gaps for a measurement's ``extra`` (times relative to the start, channel ``i``'s
        values in bytes): ``{"largest": [{"at_s", "gap_s", "used_before_bytes",
        "used_after_bytes"}, ...], "over_10x_interval": count, "long_gap_threshold_s"}``."""
        rows = []
        for g in self.gaps:
            rows.append({"at_s": round(g.t0 - (self.start_t or 0.0), 6), "gap_s": round(g.length_s, 6),
                         "used_before_bytes": g.before[i] if i < len(g.before) else None,
                         "used_after_bytes": g.after[i] if i < len(g.after) else None})
        return {"largest": rows, f"over_{LONG_GAP_FACTOR}x_interval": self.long_gaps,
                "long_gap_threshold_s": round(self.long_gap_s, 6)}

    def timeline(self, i: int) -> dict[str, list]:
        """Channel ``i``'s timeline as ``{"t_s": [...], "used_bytes": [...]}`` (t=0 at start)."""
        ts, vs = self.channels[i].timeline.points()
        base = self.start_t if self.start_t is not None else 0.0
        return {"t_s": [round(t - base, 6) for t in ts], "used_bytes": vs}
