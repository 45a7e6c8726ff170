"""Run CMD under the sampler: settle, start CMD in its own process group, sample until exit.

Outcome rules (the README's exit-code table, ``kvgate.errors``):

- exit 0 → status ``ok``; a non-zero exit or death by a signal → ``failed`` (the exit code
  is kept; a signal is recorded as 128 + signal number, as a shell reports it);
- Ctrl-C, SIGTERM or SIGHUP (a closed terminal or SSH connection) to kvgate → the whole
  process group of CMD is stopped (the same signal, then SIGKILL after ``grace_s``) and
  the partial measurement is ``interrupted``;
- kvgate killed outright (SIGKILL, a crash) → CMD is killed too (the parent-death signal
  and a watchdog process, :mod:`kvgate.measure.procs`), not left holding a GPU;
- processes CMD leaves running after it exits are listed in the notes and in each
  domain's ``extra["leftover_processes"]``; ``kill_leftovers`` stops them;
- the sampler failing (e.g. NVML lost the GPU) stops CMD too and gives ``failed``;
- a CMD that cannot be found → :class:`CommandNotFoundError` before anything runs.

Only an ``ok`` measurement may carry a verdict (DESIGN.md §2, ``no-verdict``).
"""

from __future__ import annotations

import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from kvgate.errors import EXIT_NO_VERDICT, EXIT_OK, KvgateError, exit_signal
from kvgate.measure import host as hostmod
from kvgate.measure import procs
from kvgate.measure.measurement import Basis, Measurement, local_cpu_arch, measurement_file
from kvgate.measure.sampler import DEFAULT_INTERVAL_S, Sampler

HOST_DEFAULT_INTERVAL_S = 0.01  # a /proc read per process per sample: 10 ms keeps it cheap
PROCESS_POLL_S = 0.5  # NVML per-process listing and tree walk, off the fast path
# Idle sampling before CMD starts (benchmarks/RESULTS.md, start-up and wall time: `measure -- true` ≤ 1 s beyond the
# workload): 0.25 s is 250 samples at the 1 ms GPU default (25 on the host's 10 ms), plenty
# for the idle median; it was 2 s.
DEFAULT_SETTLE_S = 0.25


class CommandNotFoundError(KvgateError):
    """CMD is not an executable on PATH. Exit status 127, as a shell reports it."""

    exit_code = 127


class InterruptedBeforeStartError(KvgateError):
    """Ctrl-C / SIGTERM arrived during the settle phase: CMD never ran, nothing measured."""

    exit_code = 130


@dataclass
class Status:
    """What the live status line shows (bytes are ints)."""

    elapsed_s: float
    current_bytes: int | None
    peak_bytes: int | None
    total_bytes: int


@dataclass
class RunOutcome:
    """A finished (or stopped) run: the ``kvgate.measurement/1`` document and its parts."""

    document: dict[str, Any]
    measurements: list[Measurement]
    status: str  # ok | failed | interrupted
    exit_code: int | None  # CMD's, 128 + N when killed by signal N
    signal_name: str | None = None  # the signal that ended CMD, if any
    stopped_by: str | None = None  # SIGINT / SIGTERM received by kvgate
    error: str | None = None  # why the sampler failed
    notes: list[str] = field(default_factory=list)

    @property
    def kvgate_exit_code(self) -> int:
        """Exit status for kvgate itself, as the exit-code table (:mod:`kvgate.errors`) says:
        0 ok; :data:`~kvgate.errors.EXIT_NO_VERDICT` (5) when CMD failed (a non-zero exit
        or killed by a signal: CMD's own code, 128 + N for signal N, is in the
        measurement's ``exit_code``, not kvgate's); 128 + N only when kvgate itself was
        stopped by signal N (so 137 never means "the workload was killed")."""
        if self.stopped_by:
            return exit_signal(getattr(signal, self.stopped_by))
        if self.status == "ok":
            return EXIT_OK
        return EXIT_NO_VERDICT


def resolve_command(cmd: list[str]) -> str:
    """The executable CMD will run, or a one-line error with a hint.

    Raises:
        CommandNotFoundError: empty CMD, or ``cmd[0]`` not found / not executable.
    """
    if not cmd:
        raise CommandNotFoundError("no command given", hint="put the workload after --, e.g. kvgate measure -- python serve.py")
    exe = cmd[0]
    if os.sep in exe:
        if os.path.isfile(exe) and os.access(exe, os.X_OK):
            return exe
    else:
        found = shutil.which(exe)
        if found:
            return found
    raise CommandNotFoundError(f"command not found: {exe}",
                               hint="check the spelling and PATH; the workload goes after --, e.g. -- python run.py")


class _Probe:
    """The sampler's channels and everything needed to describe them afterwards."""

    def __init__(self, reader: Callable[[], list[int]], domains: list[str], totals: list[int],
                 bases: list[Basis], reserved: list[int | None]) -> None:
        self.reader, self.domains, self.totals, self.bases, self.reserved = reader, domains, totals, bases, reserved
        self.host: hostmod.HostProbe | None = None
        self.nvml: Any = None
        self.handles: list[Any] = []


def gpu_probe(gpus: str, nvml: Any = None) -> _Probe:
    """NVML channels for the GPU selection (``"0"``, ``"0,1"``, ``"all"``).

    Raises:
        NvmlError (KvgateError): NVML missing or failing, or a GPU that does not exist.
    """
    from kvgate.measure import nvml as nvmlmod

    nv = nvml or nvmlmod.session()
    indices = nvmlmod.parse_gpu_selection(gpus, nv.device_count())
    infos = [nv.device_info(i) for i in indices]
    versions = nv.versions()
    handles = [nv.handle(i) for i in indices]
    bases = [Basis(domain=f"gpu:{d.index}", device_name=d.name, device_uuid=d.uuid, total_bytes=d.total_bytes,
                   cpu_arch=local_cpu_arch(), sampler="nvml", **versions) for d in infos]
    probe = _Probe(nv.used_reader(handles), [b.domain for b in bases], [d.total_bytes for d in infos], bases,
                   [d.reserved_bytes for d in infos])
    probe.nvml, probe.handles = nv, handles
    return probe


def _cpu_model() -> str | None:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def host_probe() -> _Probe:
    """Host channels: ``[system used, CMD tree RSS]`` (see :mod:`kvgate.measure.host`)."""
    h = hostmod.HostProbe()
    cpu = _cpu_model()
    name = (f"{cpu} " if cpu else "") + ("RAM, cgroup limit" if h.limited else "RAM")
    basis = Basis(domain="host", device_name=name, total_bytes=h.total_bytes, cpu_arch=local_cpu_arch(),
                  sampler="psutil+/proc")
    probe = _Probe(h.read, ["host", "host:tree-rss"], [h.total_bytes, h.total_bytes], [basis], [None])
    probe.host = h
    return probe


def _utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class _Signals:
    """Catch SIGINT, SIGTERM and SIGHUP in the main thread for the duration of a run."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self) -> _Signals:
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)):
                if s is not None:
                    self._old[s] = signal.signal(s, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is None:
            self.received = signum

    def __exit__(self, *exc: Any) -> None:
        for s, old in self._old.items():
            signal.signal(s, old)


def _stop_group(proc: subprocess.Popen, sig: int, grace_s: float) -> None:
    """Send ``sig`` to CMD's process group; SIGKILL the group if it outlives ``grace_s``."""
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # stragglers of the group too
    except ProcessLookupError:
        pass
    proc.wait()


def measure_command(cmd: list[str], *, domain: str = "gpu", gpus: str = "0", interval_s: float | None = None,
                    settle_s: float = DEFAULT_SETTLE_S, on_status: Callable[[Status], None] | None = None,
                    status_every_s: float = 0.25, grace_s: float = 5.0, nvml: Any = None,
                    timeline_points: int | None = None, stdout_to_stderr: bool = False,
                    kill_leftovers: bool = False) -> RunOutcome:
    """Measure one run of ``cmd``. See the module docstring for the outcome rules.

    Args:
        domain: ``"gpu"`` (NVML) or ``"host"``.
        gpus: GPU selection for the gpu domain.
        interval_s: sampling interval; default 1 ms (gpu) or 10 ms (host).
        settle_s: idle sampling before CMD starts, for the idle baseline U0.
        on_status: called about every ``status_every_s`` with a :class:`Status`; an
            ``OSError`` from it (the terminal went away) turns it off, the run goes on.
        stdout_to_stderr: CMD's standard output goes to kvgate's standard error (for
            ``--json``: kvgate's standard output then holds only its document).
        kill_leftovers: stop the processes CMD leaves running after it exits.

    Raises:
        CommandNotFoundError: CMD not found (checked before sampling starts).
        NvmlError: NVML missing or failing at the start (gpu domain).
        InterruptedBeforeStartError: stopped during settle.
        KvgateError: ``domain`` unknown, or the sampler failed before CMD's first sample.
    """
    resolve_command(cmd)
    if domain == "gpu":
        probe = gpu_probe(gpus, nvml)
    elif domain == "host":
        probe = host_probe()
    else:
        raise KvgateError(f"unknown domain {domain!r}", hint="use --domain gpu or --domain host")
    if interval_s is None:
        interval_s = DEFAULT_INTERVAL_S if domain == "gpu" else HOST_DEFAULT_INTERVAL_S
    kw = {"timeline_points": timeline_points} if timeline_points else {}
    sampler = Sampler(probe.reader, len(probe.domains), interval_s=interval_s, **kw)
    old_switch = sys.getswitchinterval()
    sys.setswitchinterval(min(old_switch, 0.0005))  # the sampler thread waits ≤ 0.5 ms for the GIL
    gpu_procs: dict[int, dict[str, Any]] = {}
    procs_available = probe.nvml is not None
    nvml_pids_seen: set[int] = set()
    try:
        with _Signals() as sigs:
            watchdog = procs.Watchdog(grace_s)  # before the sampler's thread: a cheap fork
            sampler.start()
            settle_end = time.monotonic() + max(0.0, settle_s)
            while time.monotonic() < settle_end and sigs.received is None and sampler.error is None:
                time.sleep(min(0.02, max(0.0, settle_end - time.monotonic())))
            if sigs.received is not None:
                sampler.stop()
                watchdog.done()
                raise InterruptedBeforeStartError("interrupted during --settle; the command was not started")
            if sampler.error is not None:
                sampler.stop()
                watchdog.done()
                raise _as_kvgate(sampler.error)
            start_iso = _utc_now()
            start_t = sampler.mark_start()
            try:
                proc = subprocess.Popen(cmd, **_group_kwargs(stdout_to_stderr))
            except OSError as exc:
                sampler.stop()
                watchdog.done()
                raise CommandNotFoundError(f"cannot run {cmd[0]}: {exc.strerror}",
                                           hint="check that it is an executable file") from exc
            watchdog.arm(proc.pid)
            tracker = procs.TreeTracker(proc.pid)
            if probe.host is not None:
                probe.host.attach(proc.pid)
            next_status, next_procs, next_tree = time.monotonic() + status_every_s, 0.0, 0.0
            while proc.poll() is None:
                time.sleep(0.02)  # one wake-up per 20 ms (Popen.wait(timeout) polls far more often)
                if sigs.received is not None or sampler.error is not None:
                    _stop_group(proc, sigs.received or signal.SIGTERM, grace_s)
                    break
                now = time.monotonic()
                if procs_available and now >= next_procs:
                    procs_available = _poll_gpu_processes(probe, proc.pid, gpu_procs, nvml_pids_seen)
                    next_procs = now + PROCESS_POLL_S
                if now >= next_tree:
                    tracker.poll()
                    next_tree = now + PROCESS_POLL_S
                if on_status is not None and now >= next_status:
                    ch = sampler.channels[0]
                    try:
                        on_status(Status(now - start_t, ch.last, ch.peak, probe.totals[0]))
                    except OSError:  # the terminal went away (SIGHUP): keep measuring
                        on_status = None
                    next_status = now + status_every_s
            sampler.stop()
            end_iso = _utc_now()
            stopped = sigs.received
            left = procs.leftovers(proc.pid, tracker, exclude={watchdog.pid} if watchdog.pid else set())
            still = procs.stop_leftovers(left, proc.pid, grace_s) if (left and kill_leftovers) else None
            watchdog.done()
    finally:
        sys.setswitchinterval(old_switch)
    outcome = _outcome(cmd, probe, sampler, proc.returncode, stopped, start_iso, end_iso,
                       gpu_procs if procs_available else None, nvml_pids_seen)
    if left:
        outcome.notes.append(procs.note_leftovers(outcome.measurements, left, still))
        outcome.document["domains"] = [m.to_dict() for m in outcome.measurements]
    return outcome


def _group_kwargs(stdout_to_stderr: bool = False) -> dict[str, Any]:
    """CMD in its own process group, so the whole group can be stopped at once, with the
    parent-death signal set (:func:`kvgate.measure.procs.pdeathsig_preexec`).

    A background process group that reads the terminal is stopped by SIGTTIN (and would
    hang the run), so when stdin is a terminal CMD gets /dev/null instead; piped input
    is passed through. ``stdout_to_stderr``: CMD writes its standard output to file
    descriptor 2.
    """
    kw: dict[str, Any] = {"process_group": 0} if sys.version_info >= (3, 11) else {"start_new_session": True}
    pre = procs.pdeathsig_preexec()
    if pre is not None:
        kw["preexec_fn"] = pre
    if stdout_to_stderr:
        kw["stdout"] = 2
    try:
        if sys.stdin is not None and sys.stdin.isatty():
            kw["stdin"] = subprocess.DEVNULL
    except (ValueError, OSError, AttributeError):  # closed or replaced stdin
        pass
    return kw


def _poll_gpu_processes(probe: _Probe, root: int, seen: dict[int, dict[str, Any]], nvml_pids: set[int]) -> bool:
    """Record NVML's per-process bytes for CMD's process tree. ``False``: not available."""
    tree = None
    for domain, h in zip(probe.domains, probe.handles):
        try:
            procs = probe.nvml.processes(h)
        except KvgateError:
            return False
        if procs is None:
            return False
        nvml_pids.update(procs)
        if procs and tree is None:
            tree = set(hostmod.descendants(root))
        for pid, used in procs.items():
            if tree and pid in tree:
                rec = seen.setdefault((domain, pid), {"domain": domain, "pid": pid, "name": hostmod.process_name(pid),
                                                      "peak_used_bytes": None})
                if used is not None and (rec["peak_used_bytes"] is None or used > rec["peak_used_bytes"]):
                    rec["peak_used_bytes"] = used
    return True


def _as_kvgate(exc: BaseException) -> KvgateError:
    if isinstance(exc, KvgateError):
        return exc
    return KvgateError(f"the sampler failed: {exc}")


def _outcome(cmd: list[str], probe: _Probe, sampler: Sampler, returncode: int, stopped: int | None,
             start_iso: str, end_iso: str, gpu_procs: dict | None, nvml_pids: set[int]) -> RunOutcome:
    sig_name = None
    if returncode < 0:
        sig_name = signal.Signals(-returncode).name
        exit_code = 128 - returncode
    else:
        exit_code = returncode
    error = None
    if sampler.error is not None:
        error = str(getattr(sampler.error, "message", None) or sampler.error)
        if all(ch.peak is None for ch in sampler.channels):
            raise _as_kvgate(sampler.error)
    if stopped is not None:
        status = "interrupted"
    elif error is not None or exit_code != 0:
        status = "failed"
    else:
        status = "ok"
    notes = []
    if sampler.max_gap_s is not None:
        g = sampler.gaps[0]
        notes.append(f"largest gap between samples {sampler.max_gap_s * 1e3:.2f} ms at {sampler.rel(g.t0):.3f} s: "
                     "a spike shorter than that can be missed then; "
                     f"{sampler.long_gaps} gap(s) over {sampler.long_gap_s * 1e3:g} ms")

    extra_common: dict[str, Any] = {}
    if sig_name:
        extra_common["signal"] = sig_name
    if stopped is not None:
        extra_common["stopped_by"] = signal.Signals(stopped).name
    if error:
        extra_common["error"] = error

    measurements: list[Measurement] = []
    n_basis = len(probe.bases)
    for i in range(n_basis):
        ch = sampler.channels[i]
        b = probe.bases[i]
        b.interval_s = sampler.interval_s
        b.sampler_loop = sampler.loop
        b.command = list(cmd)
        b.exit_code = exit_code
        b.start_time, b.end_time = start_iso, end_iso
        total = probe.totals[i]
        peak = ch.peak if ch.peak is not None else (ch.last or 0)
        extra = dict(extra_common)
        if sampler.gaps:
            extra["gaps"] = sampler.gap_summary(i)
        processes = None
        if probe.host is not None:
            tree = sampler.channels[1]
            extra.update(hostmod.run_extra(probe.host, sampler, tree))
            processes = probe.host.processes() or None
        elif gpu_procs is not None:
            mine = [dict(v) for (d, _), v in sorted(gpu_procs.items(), key=lambda kv: kv[0][1]) if d == b.domain]
            processes = mine or None
            if not mine:
                extra["processes_note"] = (
                    f"NVML listed {len(nvml_pids)} process(es), none in CMD's process tree "
                    "(a container's PID namespace hides host PIDs): per-process memory not available")
        else:
            extra["processes_note"] = "NVML cannot list processes here: per-process memory not available"
        peak, peak_t = min(peak, total), _round(sampler.rel(ch.peak_t))
        if probe.host is not None:
            peak, peak_t = hostmod.gate_peak(probe.host, extra, ch, peak, peak_t, total, notes)
        measurements.append(Measurement(
            total_bytes=total, peak_used_bytes=peak, idle_used_bytes=ch.idle_value(),
            basis=b, peak_time_s=peak_t, reserved_bytes=probe.reserved[i],
            max_gap_s=_round(sampler.max_gap_s), samples=ch.run_samples, status=status,
            timeline=sampler.timeline(i), processes=processes, extra=extra))
    doc = measurement_file(measurements, status=status, command=list(cmd), exit_code=exit_code)
    return RunOutcome(doc, measurements, status, exit_code, sig_name,
                      signal.Signals(stopped).name if stopped is not None else None, error, notes)


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


