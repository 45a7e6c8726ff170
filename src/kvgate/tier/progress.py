"""A progress bar on stderr for the long parts of ``kvgate tier`` (reading, the engine
replays), drawn by tqdm only when the run lasts longer than :data:`PROGRESS_AFTER_S`.

One bar lives for the whole run (:func:`run_progress`); the code doing the work names
its stage with :func:`stage` (a description, a total and a unit, or no total) and
reports with :func:`advance`; both do nothing when no bar is running, so the library
stays silent when called from Python. A watcher thread draws the bar once the run is
:data:`PROGRESS_AFTER_S` old and redraws it every :data:`REDRAW_S`, so the bar shows
(with the elapsed time) even while one compiled call holds the work for seconds; the
wave-1 bar (tqdm's ``delay``, drawn only from ``update``) never drew for that reason.
Nothing is drawn under ``--json``, or when stderr is not a terminal.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

PROGRESS_AFTER_S = 2.0  # a bar appears only for a run longer than this
REDRAW_S = 0.25


class _Bar:
    """The run's bar (state and the watcher thread)."""

    def __init__(self, stream: TextIO, after_s: float) -> None:
        self.stream = stream
        self.after_s = after_s
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.desc, self.unit, self.n = "", "it", 0
        self.total: int | None = None
        self.scale = False
        self.bar: Any = None
        self.thread = threading.Thread(target=self._watch, name="kvgate-progress", daemon=True)

    def _draw(self) -> None:  # under the lock
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=self.total, desc=self.desc, unit=self.unit, unit_scale=self.scale,
                            unit_divisor=1024, file=self.stream, leave=False, dynamic_ncols=True,
                            mininterval=REDRAW_S)  # fmt: skip
        self.bar.total = self.total
        self.bar.n = self.n
        self.bar.refresh()

    def _watch(self) -> None:
        if self.stop.wait(self.after_s):
            return
        while True:
            with self.lock:
                self._draw()
            if self.stop.wait(REDRAW_S):
                return

    def set_stage(self, desc: str, total: int | None, unit: str) -> None:
        with self.lock:
            self.desc, self.total, self.unit, self.n = desc, total, unit, 0
            self.scale = unit == "B"
            if self.bar is not None:  # a new stage: a new bar (unit and total change)
                self.bar.close()
                self.bar = None
                self._draw()

    def set_done(self, n: int) -> None:
        with self.lock:
            self.n = n

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        with self.lock:
            if self.bar is not None:
                self.bar.close()
                self.bar = None


_current: _Bar | None = None


@contextmanager
def run_progress(*, quiet: bool = False, stream: TextIO | None = None,
                 after_s: float | None = None) -> Iterator[None]:
    """The bar of one run (module docstring): none when ``quiet`` or ``stream`` (default
    stderr) is not a terminal."""
    global _current
    out = sys.stderr if stream is None else stream
    isatty = getattr(out, "isatty", None)
    if quiet or _current is not None or not (isatty is not None and isatty()):
        yield
        return
    bar = _Bar(out, PROGRESS_AFTER_S if after_s is None else after_s)
    _current = bar
    bar.thread.start()
    try:
        yield
    finally:
        _current = None
        bar.close()


def stage(desc: str, total: int | None = None, unit: str = "it") -> None:
    """Name the work now under way (``total`` in ``unit``, or ``None``: unknown)."""
    if _current is not None:
        _current.set_stage(desc, total, unit)


def advance(done: int, total: int | None = None) -> None:
    """``done`` of the stage's total (``total`` replaces it when given)."""
    if _current is not None:
        if total is not None and total != _current.total:
            _current.total = total
        _current.set_done(done)
