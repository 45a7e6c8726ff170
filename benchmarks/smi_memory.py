"""Peak memory (max RSS) and time of ``kvgate import-smi`` on a generated nvidia-smi log.

    .venv/bin/python benchmarks/smi_memory.py [--mb 50] [--old PATH/TO/old/src]

Writes a two-GPU ``--format=csv`` log of about ``--mb`` MB (H200 rows at 2 Hz), then runs
``python -m kvgate import-smi LOG --json`` in a fresh process per reader and reports its
max RSS (``os.wait4``'s rusage), wall time and the interpreter's own
baseline (``python -c 'import kvgate.measure.smi_csv, numpy'``), so the log's share is
RSS − baseline. ``--old`` points at another checkout's ``src`` to compare readers.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
HEAD = ("timestamp, index, name, uuid, driver_version, memory.total [MiB], memory.free [MiB], "
        "memory.used [MiB], memory.reserved [MiB]\n")


def write_log(path: Path, mb: float) -> int:
    """A two-GPU log of about ``mb`` MB; returns its line count."""
    t = datetime(2026, 11, 29, 10, 0, 0)
    n = 0
    with open(path, "w") as fh:
        fh.write(HEAD)
        while fh.tell() < mb * 1e6:
            ts = t.strftime("%Y/%m/%d %H:%M:%S.") + f"{t.microsecond // 1000:03d}"
            for gpu in (0, 1):
                used = 616 + (n * 37) % 60_000 if gpu == 0 else 30_000
                fh.write(f"{ts}, {gpu}, NVIDIA H200, GPU-0000000{gpu}, 570.86.15, 143771 MiB, "
                         f"{143771 - used} MiB, {used - 616} MiB, 616 MiB\n")
                n += 1
            t += timedelta(milliseconds=500)
    return n + 1


def child_run(src: str, argv: list[str]) -> tuple[float, int]:
    """(seconds, max RSS in bytes) of ``python argv`` with ``src`` first on the path."""
    env = {**os.environ, "PYTHONPATH": src}
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # a fresh child per measurement: its own max RSS
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
            os.execvpe(sys.executable, [sys.executable, *argv], env)
    _, status, usage = os.wait4(pid, 0)
    dt = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{argv} failed with {os.waitstatus_to_exitcode(status)}")
    return dt, usage.ru_maxrss * 1024  # Linux: KiB


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, default=50.0)
    ap.add_argument("--old", default=None, help="another checkout's src directory, to compare")
    args = ap.parse_args()
    src = str(HERE.parent / "src")
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "smi.csv"
        lines = write_log(log, args.mb)
        size = log.stat().st_size
        print(f"log: {size / 1e6:,.1f} MB, {lines:,} lines")
        print(f"{'reader':<8} {'seconds':>8} {'max RSS':>10} {'baseline':>9} {'log share':>10} {'× log':>6}")
        for name, path in [("this", src)] + ([("old", args.old)] if args.old else []):
            _, base = child_run(path, ["-c", "import kvgate.measure.smi_csv, kvgate.cli, numpy"])
            dt, rss = child_run(path, ["-m", "kvgate", "import-smi", str(log), "--json"])
            share = rss - base
            print(f"{name:<8} {dt:>8.1f} {rss / 2**20:>8.0f} MiB {base / 2**20:>5.0f} MiB {share / 2**20:>6.0f} MiB "
                  f"{share / size:>6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
