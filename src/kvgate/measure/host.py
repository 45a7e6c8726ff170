"""Host memory for ``--domain host`` (a CPU engine; works without a GPU). Linux ``/proc``.

All quantities are ``int`` bytes; ``None`` = not available.

- **total** T: ``MemTotal`` (``/proc/meminfo``, kB × 1024), or the cgroup limit when lower
  (v2 ``memory.max``, v1 ``memory.limit_in_bytes``).
- **used**, the analogue of a GPU's ``total − free``: without a binding cgroup limit,
  ``MemTotal − MemAvailable`` (what ``free -b`` shows as total − available); under a
  limit, the cgroup's working set ``memory.current − inactive_file`` (v1:
  ``usage_in_bytes − total_inactive_file``), the kubelet's rule for what counts toward an
  OOM kill.
- **tree RSS**: the summed RSS of CMD and its descendants, sampled (``ps -o rss``).
- **VmHWM** of each process in the tree (``/proc/PID/status``): the kernel's exact
  per-process peak RSS, last seen before the process exited.
- **cgroup v2 ``memory.peak``** where readable: the cgroup's exact peak since it was
  created (it includes everything else in the cgroup).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvgate.errors import KvgateError

CGROUP_ROOT = Path("/sys/fs/cgroup")
_UNLIMITED = 2**62  # v1 reports "no limit" as a huge number such as 9223372036854771712


class HostMemoryError(KvgateError):
    """/proc/meminfo could not be read (not Linux?)."""


def read_meminfo(path: str | Path = "/proc/meminfo") -> dict[str, int]:
    """``/proc/meminfo`` as ``{key: bytes}`` (the file's kB are KiB: × 1024).

    Raises:
        HostMemoryError: the file cannot be read.
    """
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise HostMemoryError(f"cannot read {path}: {exc.strerror}",
                              hint="--domain host needs Linux /proc") from exc
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[key] = int(parts[0]) * (1024 if len(parts) > 1 and parts[1] == "kB" else 1)
    return out


def _meminfo_kib(text: bytes, key: bytes) -> int | None:
    i = text.find(key)
    if i < 0:
        return None
    j = text.find(b"\n", i)
    parts = text[i + len(key):j if j >= 0 else None].split()
    return int(parts[0]) if parts and parts[0].isdigit() else None


def system_used(path: str = "/proc/meminfo") -> int:
    """``MemTotal − MemAvailable`` bytes (``MemFree`` on kernels without MemAvailable), from
    one read of ``/proc/meminfo`` with no full parse: the sampler's per-sample host figure.

    Raises:
        HostMemoryError: the file cannot be read or lacks ``MemTotal``.
    """
    try:
        with open(path, "rb") as fh:
            text = fh.read()
    except OSError as exc:
        raise HostMemoryError(f"cannot read {path}: {exc.strerror}", hint="--domain host needs Linux /proc") from exc
    total = _meminfo_kib(text, b"MemTotal:")
    avail = _meminfo_kib(text, b"MemAvailable:")
    if avail is None:
        avail = _meminfo_kib(text, b"MemFree:")
    if total is None or avail is None:
        raise HostMemoryError(f"{path} has no MemTotal/MemAvailable", hint="--domain host needs Linux /proc")
    return (total - avail) * 1024


def _read_int(p: Path) -> int | None:
    try:
        text = p.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _stat_field(p: Path, key: str) -> int | None:
    try:
        for line in p.read_text().splitlines():
            k, _, v = line.partition(" ")
            if k == key and v.strip().isdigit():
                return int(v)
    except OSError:
        return None
    return None


class Cgroup:
    """This process's memory cgroup (v2 preferred, v1 fallback), or none.

    ``kind`` is ``"v2"``, ``"v1"`` or ``None``; ``path`` the cgroup directory.
    """

    def __init__(self, root: Path = CGROUP_ROOT, proc_cgroup: str | Path = "/proc/self/cgroup") -> None:
        self.kind: str | None = None
        self.path: Path | None = None
        try:
            lines = Path(proc_cgroup).read_text().splitlines()
        except OSError:
            return
        for line in lines:
            hid, ctrls, rel = (line.split(":", 2) + ["", ""])[:3]
            if hid == "0" and ctrls == "" and (root / rel.lstrip("/") / "memory.current").exists():
                self.kind, self.path = "v2", root / rel.lstrip("/")
                return
        for line in lines:
            hid, ctrls, rel = (line.split(":", 2) + ["", ""])[:3]
            if "memory" in ctrls.split(","):
                for cand in (root / "memory" / rel.lstrip("/"), root / "memory"):
                    if (cand / "memory.usage_in_bytes").exists():
                        self.kind, self.path = "v1", cand
                        return

    def limit(self) -> int | None:
        """The memory limit in bytes, ``None`` when unlimited or unknown."""
        if self.kind == "v2":
            v = _read_int(self.path / "memory.max")  # "max" -> None
        elif self.kind == "v1":
            v = _read_int(self.path / "memory.limit_in_bytes")
        else:
            return None
        return v if v is not None and v < _UNLIMITED else None

    def working_set(self) -> int | None:
        """Usage minus inactive file cache (the kubelet's working set)."""
        if self.kind == "v2":
            cur, inactive = _read_int(self.path / "memory.current"), _stat_field(self.path / "memory.stat", "inactive_file")
        elif self.kind == "v1":
            cur = _read_int(self.path / "memory.usage_in_bytes")
            inactive = _stat_field(self.path / "memory.stat", "total_inactive_file")
        else:
            return None
        if cur is None:
            return None
        return max(0, cur - (inactive or 0))

    def peak(self) -> int | None:
        """cgroup v2 ``memory.peak`` (v1: ``memory.max_usage_in_bytes``), ``None`` if unreadable."""
        if self.kind == "v2":
            return _read_int(self.path / "memory.peak")
        if self.kind == "v1":
            return _read_int(self.path / "memory.max_usage_in_bytes")
        return None


def rss_hwm_bytes(pid: int) -> tuple[int | None, int | None]:
    """``(VmRSS, VmHWM)`` of ``pid`` from one read of ``/proc/PID/status``, in bytes.

    VmHWM is the kernel's exact peak RSS of the process; ``(None, None)`` once it is gone.
    """
    rss = hwm = None
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"VmRSS:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith(b"VmHWM:"):
                    hwm = int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        pass
    return rss, hwm


def process_name(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def descendants(root_pid: int) -> list[int]:
    """``root_pid`` and all its live descendants (``[root_pid]`` if it is gone).

    Reads each member's ``/proc/PID/task/TID/children`` (Linux ≥ 3.5 with
    CONFIG_PROC_CHILDREN), which visits the tree only: psutil's recursive ``children``
    reads every process's ``/proc/PID/stat`` (~20 ms per listing on a VM with 170
    processes). Falls back to psutil where the ``children`` files do not exist.
    """
    import os

    if os.path.exists(f"/proc/{root_pid}/task/{root_pid}/children"):
        out, stack = [root_pid], [root_pid]
        while stack:
            pid = stack.pop()
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue  # exited meanwhile
            for tid in tids:
                try:
                    with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                        kids = [int(x) for x in fh.read().split()]
                except (OSError, ValueError):
                    continue
                out.extend(kids)
                stack.extend(kids)
        return out
    return _descendants_psutil(root_pid)


def _descendants_psutil(root_pid: int) -> list[int]:
    import psutil

    try:
        p = psutil.Process(root_pid)
        return [root_pid] + [c.pid for c in p.children(recursive=True)]
    except psutil.Error:
        return [root_pid]


class HostProbe:
    """Reads host memory for the sampler: ``read()`` → ``[system used, tree RSS]`` bytes.

    Call :meth:`attach` with CMD's pid once it started; before that the tree RSS is 0.
    Cadence (``benchmarks/RESULTS.md``, sampler CPU: ≤ 2% of a core at the 10 ms default): every sample reads the system
    figure (one ``/proc/meminfo`` read, two fields found by ``bytes.find``); each tree
    member's VmRSS and VmHWM are read every ``tree_every_s`` (the tree channel repeats the
    last sum in between; VmHWM is the kernel's exact per-process peak, so nothing is lost
    to the cadence); the tree is re-listed every ``refresh_s`` seconds (listing walks all
    of ``/proc``).
    """

    def __init__(self, *, refresh_s: float = 0.5, tree_every_s: float = 0.1,
                 clock: Callable[[], float] | None = None) -> None:
        import time

        self.clock = clock or time.monotonic
        self.meminfo = read_meminfo()
        self.cgroup = Cgroup()
        mem_total = self.meminfo["MemTotal"]
        limit = self.cgroup.limit()
        self.limited = limit is not None and limit < mem_total
        self.total_bytes = limit if self.limited else mem_total
        self.refresh_s = refresh_s
        self.tree_every_s = tree_every_s
        self._next_tree = 0.0
        self._tree = 0
        self.root_pid: int | None = None
        self._pids: list[int] = []
        self._next_refresh = 0.0
        self.vmhwm: dict[int, int] = {}  # pid -> last VmHWM seen
        self.names: dict[int, str | None] = {}
        self.rss_peak: dict[int, int] = {}  # pid -> largest sampled RSS

    def attach(self, pid: int) -> None:
        self.root_pid = pid
        self._next_refresh = 0.0
        self._next_tree = 0.0

    def used(self) -> int:
        """System used bytes (see module docstring)."""
        if self.limited:
            ws = self.cgroup.working_set()
            if ws is not None:
                return ws
        return system_used()

    def read(self) -> list[int]:
        """One sample: ``[system used, tree RSS]`` bytes; also updates VmHWM per process."""
        now = self.clock()
        if now < self._next_tree:
            return [min(self.used(), self.total_bytes), self._tree]
        self._next_tree = now + self.tree_every_s
        if self.root_pid is not None and now >= self._next_refresh:
            self._pids = descendants(self.root_pid)
            self._next_refresh = now + self.refresh_s
            for pid in self._pids:  # re-read: a fresh child shows its parent's name until exec
                self.names[pid] = process_name(pid) or self.names.get(pid)
        tree = 0
        for pid in self._pids:
            rss, hwm = rss_hwm_bytes(pid)
            if rss is None:
                continue
            tree += rss
            if rss > self.rss_peak.get(pid, -1):
                self.rss_peak[pid] = rss
            if hwm is not None and hwm > self.vmhwm.get(pid, -1):
                self.vmhwm[pid] = hwm
        self._tree = tree
        return [min(self.used(), self.total_bytes), tree]

    def processes(self) -> list[dict]:
        """Per-process figures for the record: pid, name, VmHWM and sampled RSS peak."""
        pids = sorted(set(self.vmhwm) | set(self.rss_peak))
        return [{"pid": pid, "name": self.names.get(pid), "vmhwm_bytes": self.vmhwm.get(pid),
                 "rss_peak_bytes": self.rss_peak.get(pid)} for pid in pids]



DISAGREE_MIN_BYTES = 64 * 2**20  # below this, figures "agree" (page cache, shared libraries)
DISAGREE_SHARE = 10  # percent of the larger figure


def best_host_peak(*, system_peak: int | None, idle: int | None, tree_peak: int | None,
                   cgroup_peak: int | None, cgroup_kind: str | None, limited: bool,
                   total: int) -> tuple[int, str, list[str]]:
    """The host peak P to gate on, which figure it is, and warnings when figures disagree.

    Figures (bytes; ``None`` = not available), best first:

    1. ``cgroup memory.peak`` — only under a binding cgroup v2 limit (T is that limit):
       the kernel's exact peak of what the limit counts (all of the cgroup, page cache
       included; since the cgroup was created, so it can only over-count).
    2. ``idle + process-tree peak`` — U0 plus the largest of the sampled tree RSS and the
       largest per-process VmHWM (both lower bounds of the tree's true peak, exact per
       process). It counts the workload's own memory whatever else the host does.
    3. ``system`` — MemTotal − MemAvailable (or the cgroup working set): it under-counts a
       workload whose pages push out page cache (measured: a steady 2 GiB allocation showed
       as 0.90–1.28 GiB on a VM while the tree peak said 2.01 GiB), and it moves with
       everything else on the host.

    Warns when the workload's share by the system figure (``system_peak − idle``) and
    its tree peak differ by more than ``max(64 MiB, 10% of the larger)``.

    Returns:
        ``(peak_bytes, rule, warnings)``, the peak capped at ``total``.
    """
    warnings: list[str] = []
    if tree_peak is not None and idle is not None and system_peak is not None:
        sys_delta = max(0, system_peak - idle)
        big = max(sys_delta, tree_peak)
        if abs(sys_delta - tree_peak) > max(DISAGREE_MIN_BYTES, big * DISAGREE_SHARE // 100):
            warnings.append(
                f"host figures disagree: the system figure shows the workload as {sys_delta / 2**30:.2f} GiB "
                f"(peak {system_peak:,} B − idle {idle:,} B), its process tree as {tree_peak / 2**30:.2f} GiB "
                f"({tree_peak:,} B); the gate uses the idle + process-tree figure (other processes, page cache "
                "and MemAvailable's estimate move the system figure)")
    if limited and cgroup_kind == "v2" and cgroup_peak is not None:
        return min(cgroup_peak, total), "cgroup v2 memory.peak (the limit's own peak)", warnings
    if tree_peak is not None and idle is not None:
        return min(idle + tree_peak, total), "idle U0 + process-tree peak (sampled RSS sum or largest VmHWM)", warnings
    if system_peak is None:
        raise HostMemoryError("no host memory figure was sampled")
    rule = "cgroup working set (memory.current − inactive_file)" if limited else "system MemTotal − MemAvailable"
    return min(system_peak, total), rule, warnings


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


def run_extra(h: HostProbe, sampler: Any, tree: Any) -> dict[str, Any]:
    """The host figures of a finished run for a measurement's ``extra``: the used/total
    rules, the tree RSS peak (and its time and timeline), the largest VmHWM, the cgroup
    peak. ``sampler`` is the run's :class:`kvgate.measure.sampler.Sampler`, ``tree`` its
    tree-RSS channel."""
    # The tree channel reads 0 until CMD's RSS is first read (before attach, or when CMD
    # exited between samples): with no RSS ever read, the peak is unknown, not 0.
    sampled = bool(h.rss_peak)
    return {
        "used_rule": ("cgroup working set: memory.current - inactive_file" if h.limited
                      else "MemTotal - MemAvailable (/proc/meminfo)"),
        "total_rule": f"{h.cgroup.kind} cgroup memory limit (below MemTotal)" if h.limited else "MemTotal",
        "tree_rss_peak_bytes": tree.peak if sampled else None,
        "tree_rss_peak_time_s": _round(sampler.rel(tree.peak_t)) if sampled else None,
        "tree_rss_timeline": ({"t_s": sampler.timeline(1)["t_s"], "rss_bytes": sampler.timeline(1)["used_bytes"]}
                              if sampled else None),
        "vmhwm_max_bytes": max(h.vmhwm.values()) if h.vmhwm else None,
        "cgroup": h.cgroup.kind,
        "cgroup_peak_bytes": h.cgroup.peak(),
        "cgroup_peak_note": "the whole cgroup's peak since it was created, not only CMD's",
    }


def gate_peak(h: HostProbe, extra: dict[str, Any], ch: Any, system_peak: int, system_t: float | None,
              total: int, notes: list[str]) -> tuple[int, float | None]:
    """The host peak P to gate on (:func:`best_host_peak`) and its time, from a run's
    ``extra`` (:func:`run_extra`) and its system channel ``ch``; records the rule, the
    system figure and any warning in ``extra`` and ``notes``."""
    tree = [v for v in (extra.get("tree_rss_peak_bytes"), extra.get("vmhwm_max_bytes")) if v is not None]
    tree_peak = max(tree) if tree else None
    peak, rule, warns = best_host_peak(
        system_peak=system_peak, idle=ch.idle_value(), tree_peak=tree_peak, cgroup_peak=extra.get("cgroup_peak_bytes"),
        cgroup_kind=extra.get("cgroup"), limited=h.limited, total=total)
    extra.update({"peak_rule": rule, "system_peak_bytes": system_peak, "system_peak_time_s": system_t,
                  "tree_peak_bytes": tree_peak})
    if warns:
        extra.setdefault("warnings", []).extend(warns)
        notes.extend(warns)
    notes.append(f"host peak P = {rule}: {peak:,} B (system figure {system_peak:,} B)")
    if rule.startswith("idle"):
        return peak, extra.get("tree_rss_peak_time_s")
    return peak, system_t if rule.startswith(("system", "cgroup working")) else None
