"""The workload's processes: they die with kvgate, and what they leave behind is reported.

- **Parent-death signal.** On Linux CMD's first process asks the kernel for SIGKILL when
  kvgate dies (``prctl(PR_SET_PDEATHSIG, SIGKILL)``, ``man 2 prctl``), set between fork
  and exec (:func:`pdeathsig_preexec`). It covers only that one process.
- **Watchdog.** A small process (a fork of kvgate) in its own session (so a terminal's SIGHUP/SIGINT do not
  reach it) holds the read end of a pipe from kvgate. When kvgate exits in any way,
  SIGKILL included, the pipe closes; unless kvgate said ``done`` first, the watchdog sends
  SIGTERM to CMD's whole process group, then SIGKILL after a grace period
  (:class:`Watchdog`).
- **Leftovers.** Processes of CMD's process group, or descendants seen while it ran, that
  are still alive after CMD exited (a daemonized server, a worker pool) are listed
  (:func:`leftovers`); ``--kill-leftovers`` stops them (:func:`stop_leftovers`).
  Memory they hold after CMD exited is not in the measurement.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

_WATCHDOG = """\
import os, signal, sys, time
for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
    signal.signal(s, signal.SIG_IGN)
grace = float(sys.argv[1])
line = sys.stdin.readline()
rest = sys.stdin.read()  # returns when kvgate closes the pipe, or dies
if line.strip().isdigit() and "done" not in rest:
    pg = int(line)
    try:
        os.killpg(pg, signal.SIGTERM)
    except OSError:
        sys.exit(0)
    end = time.monotonic() + grace
    while time.monotonic() < end:
        try:
            os.killpg(pg, 0)
        except OSError:
            sys.exit(0)
        time.sleep(0.05)
    try:
        os.killpg(pg, signal.SIGKILL)
    except OSError:
        pass
"""


def pdeathsig_preexec() -> Callable[[], None] | None:
    """A ``preexec_fn`` that sets ``PR_SET_PDEATHSIG`` to SIGKILL (Linux; ``None``
    elsewhere or when libc's ``prctl`` cannot be found). If kvgate already died before
    the call, the child kills itself (the signal would never come)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


class Watchdog:
    """Stops CMD's process group if kvgate dies without saying :meth:`done` (see the
    module docstring). Start it before CMD (and, for the cheap path, before any thread),
    :meth:`arm` it with CMD's pid (its process group id), call :meth:`done` when kvgate
    has dealt with CMD itself.

    With only one thread running, the watchdog is a ``fork`` of kvgate that runs no
    Python beyond a read loop and ``killpg`` (no interpreter start-up: about 1 ms);
    otherwise a small ``python -c`` process (:data:`_WATCHDOG`). Either holds only the
    pipe's read end (its standard streams are ``/dev/null``), in a session of its own.
    """

    def __init__(self, grace_s: float = 5.0) -> None:
        self.proc: subprocess.Popen | None = None
        self._pid: int | None = None  # the forked watchdog
        self._wfd: int | None = None
        if hasattr(os, "fork") and threading.active_count() == 1:
            self._fork(grace_s)
            if self._pid is not None:
                return
        try:
            self.proc = subprocess.Popen([sys.executable, "-c", _WATCHDOG, str(grace_s)], stdin=subprocess.PIPE,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         start_new_session=True, close_fds=True)
        except OSError:
            self.proc = None  # the parent-death signal still covers CMD's first process

    def _fork(self, grace_s: float) -> None:
        try:
            rfd, wfd = os.pipe()  # both close-on-exec: CMD never inherits the write end
        except OSError:
            return
        try:
            pid = os.fork()
        except OSError:
            os.close(rfd)
            os.close(wfd)
            return
        if pid == 0:  # the watchdog
            try:
                _watch(rfd, wfd, grace_s)
            finally:
                os._exit(0)
        os.close(rfd)
        self._pid, self._wfd = pid, wfd

    def arm(self, pgid: int) -> None:
        self._send(f"{pgid}\n")

    def done(self) -> None:
        """kvgate handled CMD: the watchdog exits without signalling anything."""
        self._send("done\n")
        if self._wfd is not None:
            os.close(self._wfd)
            self._wfd = None
        if self._pid is not None:
            try:
                os.waitpid(self._pid, 0)
            except ChildProcessError:
                pass
            self._pid = None
        if self.proc is not None:
            try:
                if self.proc.stdin is not None:
                    self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.proc = None

    def _send(self, text: str) -> None:
        try:
            if self._wfd is not None:
                os.write(self._wfd, text.encode())
            elif self.proc is not None and self.proc.stdin is not None:
                self.proc.stdin.write(text.encode())
                self.proc.stdin.flush()
        except (OSError, ValueError):
            pass

    @property
    def pid(self) -> int | None:
        if self._pid is not None:
            return self._pid
        return self.proc.pid if self.proc is not None else None


def _watch(rfd: int, wfd: int, grace_s: float) -> None:
    """The forked watchdog's body: read the pipe to its end, then stop the group unless
    told ``done``. Runs in a process forked while kvgate had one thread."""
    os.close(wfd)
    os.setsid()  # a closed terminal's SIGHUP and Ctrl-C's SIGINT go to kvgate's group, not here
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)  # never hold kvgate's stdout/stderr open (a reader waits for their end)
    os.closerange(3, rfd)
    os.closerange(rfd + 1, 65536)
    data = b""
    while True:
        chunk = os.read(rfd, 4096)
        if not chunk:
            break
        data += chunk
    first, _, rest = data.partition(b"\n")
    if not first.strip().isdigit() or b"done" in rest:
        return
    pg = int(first)
    try:
        os.killpg(pg, signal.SIGTERM)
    except OSError:
        return
    end = time.monotonic() + grace_s
    while time.monotonic() < end:
        try:
            os.killpg(pg, 0)
        except OSError:
            return
        time.sleep(0.05)
    try:
        os.killpg(pg, signal.SIGKILL)
    except OSError:
        pass


class TreeTracker:
    """CMD's descendants seen while it ran: ``{pid: (create_time, name)}`` (psutil)."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.seen: dict[int, tuple[float, str | None]] = {}

    def poll(self) -> None:
        import psutil

        try:
            kids = psutil.Process(self.root).children(recursive=True)
        except psutil.Error:
            return
        for k in kids:
            try:
                self.seen.setdefault(k.pid, (k.create_time(), k.name()))
            except psutil.Error:
                continue


def leftovers(pgid: int, tracker: TreeTracker | None = None, *, exclude: set[int] | frozenset[int] = frozenset()
              ) -> list[dict[str, Any]]:
    """Processes still alive that belong to CMD: members of process group ``pgid``, and
    descendants ``tracker`` saw that still run (same pid and start time).

    Returns ``[{"pid", "name", "how"}]`` sorted by pid; ``how`` is ``"process group"`` or
    ``"descendant"``. Processes of other users that cannot be inspected are skipped.
    """
    import psutil

    out: dict[int, dict[str, Any]] = {}
    me = {os.getpid()} | set(exclude)
    for pid in psutil.pids():
        if pid in me:
            continue
        try:
            if os.getpgid(pid) == pgid and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out[pid] = {"pid": pid, "name": _name(pid), "how": "process group"}
        except (OSError, psutil.Error):
            continue
    if tracker is not None:
        for pid, (created, name) in tracker.seen.items():
            if pid in out or pid in me:
                continue
            try:
                p = psutil.Process(pid)
                if p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE:
                    out[pid] = {"pid": pid, "name": name, "how": "descendant"}
            except psutil.Error:
                continue
    return [out[k] for k in sorted(out)]


def _name(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip()
    except OSError:
        try:
            import psutil

            return psutil.Process(pid).name()
        except Exception:  # noqa: BLE001 - a name is optional
            return None


def stop_leftovers(procs: list[dict[str, Any]], pgid: int, grace_s: float = 5.0) -> list[int]:
    """SIGTERM ``procs`` (the group at once, descendants one by one), SIGKILL whatever
    outlives ``grace_s``. Returns the pids still alive afterwards (normally none)."""
    import psutil

    if any(p["how"] == "process group" for p in procs):
        try:
            os.killpg(pgid, signal.SIGTERM)
        except OSError:
            pass
    handles = []
    for p in procs:
        try:
            h = psutil.Process(p["pid"])
            if p["how"] != "process group":
                h.terminate()
            handles.append(h)
        except psutil.Error:
            continue
    _, alive = psutil.wait_procs(handles, timeout=grace_s)
    for h in alive:
        try:
            h.kill()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(alive, timeout=1.0)
    time.sleep(0)  # let the kernel reap
    return [h.pid for h in alive]


def note_leftovers(measurements: list[Any], left: list[dict[str, Any]], still: list[int] | None) -> str:
    """Record ``left`` in each measurement's ``extra`` (``leftover_processes``,
    ``leftovers_stopped``) and return the note saying which processes CMD left running
    and whether they were stopped (``still``: ``None`` = not asked to, else the pids
    that survived :func:`stop_leftovers`)."""
    names = ", ".join(f"pid {p['pid']} ({p.get('name') or '?'}, {p['how']})" for p in left[:5])
    more = f" and {len(left) - 5} more" if len(left) > 5 else ""
    if still is None:
        what = ("still running after it exited; memory they hold now is not in this measurement "
                "(--kill-leftovers stops them)")
    elif still:
        what = f"stopped with SIGTERM/SIGKILL, but {len(still)} still run: {', '.join(map(str, still))}"
    else:
        what = "stopped (--kill-leftovers: SIGTERM, then SIGKILL after the grace period)"
    for m in measurements:
        m.extra["leftover_processes"] = [dict(p) for p in left]
        m.extra["leftovers_stopped"] = still is not None and not still
    return f"the workload left {len(left)} process(es): {names}{more}; {what}"
