"""One sampling thread: exact running peak, largest gap, bounded min/max timeline.

A *reader* is a callable returning one ``int`` of bytes per channel (e.g. ``total − free``
of each selected GPU). :class:`Sampler` calls it every ``interval_s`` on one thread, on a
fixed schedule (deadline-based, so slow reads do not accumulate drift), and keeps per
channel:

- the exact running peak and the time it was seen, however much the timeline is thinned;
- idle samples taken before :meth:`Sampler.mark_start` (the settle phase) → idle used;
- the largest gap between consecutive samples after the start (a spike shorter than it
  can be missed);
- a :class:`Timeline` of at most ``2 × capacity`` points for runs of hours.

Why the default is 1 ms: on an H200 one NVML memory query costs about 5.5 µs
(DESIGN.md §5), so a 1 ms loop is ~1,000 queries/s, well under 2% of one core, and leaves
a 5 ms spike at least four chances to be seen. ``--interval 500ms`` reproduces the source
write-up's ``nvidia-smi -lms 500``.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Sequence

DEFAULT_INTERVAL_S = 0.001
DEFAULT_TIMELINE_POINTS = 2048
_IDLE_KEEP = 100_000  # idle samples kept for the median (settle of 100 s at 1 ms)


class Timeline:
    """Min/max-preserving decimation: at most ``capacity`` buckets of equal time span.

    Each bucket keeps its smallest and largest sample with their times. When the buckets
    would exceed ``capacity``, neighbours are merged pairwise and the span doubles, so
    memory is O(capacity) for any run length and every local extreme wider than one
    bucket survives. Times are seconds on any clock; values are ``int`` bytes.
    """

    __slots__ = ("capacity", "span_s", "origin_s", "_buckets", "count")

    def __init__(self, capacity: int = DEFAULT_TIMELINE_POINTS, span_s: float = 0.001) -> None:
        if capacity < 2:
            raise ValueError("timeline capacity must be at least 2")
        self.capacity = capacity
        self.span_s = span_s
        self.origin_s: float | None = None
        # bucket: [index, t_min, v_min, t_max, v_max]
        self._buckets: list[list] = []
        self.count = 0

    def add(self, t: float, v: int) -> None:
        """Add one sample (times must not decrease)."""
        self.count += 1
        if self.origin_s is None:
            self.origin_s = t
        idx = int((t - self.origin_s) / self.span_s)
        b = self._buckets[-1] if self._buckets else None
        if b is not None and b[0] == idx:
            if v < b[2]:
                b[1], b[2] = t, v
            if v > b[4]:
                b[3], b[4] = t, v
            return
        self._buckets.append([idx, t, v, t, v])
        while len(self._buckets) > self.capacity:
            self._halve()

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
    """Running statistics of one channel (one GPU, host used, tree RSS, ...)."""

    __slots__ = ("timeline", "idle", "peak", "peak_t", "last", "run_samples")

    def __init__(self, capacity: int) -> None:
        self.timeline = Timeline(capacity)
        self.idle: list[int] = []
        self.peak: int | None = None  # exact, over samples after mark_start
        self.peak_t: float | None = None
        self.last: int | None = None
        self.run_samples = 0

    def add(self, t: float, v: int, running: bool) -> None:
        self.last = v
        self.timeline.add(t, v)
        if running:
            self.run_samples += 1
            if self.peak is None or v > self.peak:
                self.peak, self.peak_t = v, t
        elif len(self.idle) < _IDLE_KEEP:
            self.idle.append(v)

    def idle_value(self) -> int | None:
        """Lower median of the settle samples, ``None`` if there were none."""
        if not self.idle:
            return None
        s = sorted(self.idle)
        return s[(len(s) - 1) // 2]


class Sampler:
    """Samples ``reader`` every ``interval_s`` seconds on one daemon thread.

    Use: ``start()``, settle, ``mark_start()`` right before launching the workload,
    ``stop()`` when it exits (``stop`` takes one last sample so a run always has ≥ 1).
    Times are ``time.monotonic()`` seconds; :meth:`rel` makes them relative to the start.

    If ``reader`` raises, sampling stops and the exception is kept in ``error``.
    """

    def __init__(self, reader: Callable[[], Sequence[int]], n_channels: int, *,
                 interval_s: float = DEFAULT_INTERVAL_S, timeline_points: int = DEFAULT_TIMELINE_POINTS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if interval_s < 0:
            raise ValueError("interval must not be negative")
        self.reader = reader
        self.interval_s = interval_s
        self.clock = clock
        self.channels = [Channel(timeline_points) for _ in range(n_channels)]
        self.start_t: float | None = None  # set by mark_start
        self.samples = 0
        self.max_gap_s: float | None = None  # over samples after mark_start
        self.error: BaseException | None = None
        self._prev_t: float | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample_once(self) -> None:
        """Take one sample now (the thread's loop body; also used by ``stop``)."""
        values = self.reader()
        t = self.clock()
        with self._lock:
            running = self.start_t is not None and t >= self.start_t
            if running and self._prev_t is not None and self._prev_t >= self.start_t:
                gap = t - self._prev_t
                if self.max_gap_s is None or gap > self.max_gap_s:
                    self.max_gap_s = gap
            self._prev_t = t
            self.samples += 1
            for ch, v in zip(self.channels, values):
                ch.add(t, int(v), running)

    def _loop(self) -> None:
        nxt = self.clock()
        try:
            while not self._stop.is_set():
                self.sample_once()
                nxt += self.interval_s
                delay = nxt - self.clock()
                if delay > 0.05:
                    self._stop.wait(delay)  # long intervals: wake at once on stop()
                elif delay > 0:
                    time.sleep(delay)
                else:
                    nxt = self.clock()  # fell behind: do not try to catch up in a burst
        except BaseException as exc:  # noqa: BLE001 - reported through .error
            self.error = exc

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="kvgate-sampler", daemon=True)
        self._thread.start()

    def mark_start(self) -> float:
        """Mark the workload start: later samples count toward peak and gaps."""
        with self._lock:
            self.start_t = self.clock()
            return self.start_t

    def stop(self) -> None:
        """Stop the thread and take one final sample (unless the reader already failed)."""
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

    def timeline(self, i: int) -> dict[str, list]:
        """Channel ``i``'s timeline as ``{"t_s": [...], "used_bytes": [...]}`` (t=0 at start)."""
        ts, vs = self.channels[i].timeline.points()
        base = self.start_t if self.start_t is not None else 0.0
        return {"t_s": [round(t - base, 6) for t in ts], "used_bytes": vs}
