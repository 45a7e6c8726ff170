"""CPU cost of a whole ``kvgate measure`` process while it samples (issue 16; needs a GPU).

Runs ``python -m kvgate measure --settle 0s [--interval I] -- true`` and ``-- sleep S`` as
child processes and takes each one's CPU time (user + system, from ``os.wait4``: the
process, its threads and the children it waited for, e.g. the watchdog). The cost of
sampling is ``(CPU(sleep S) − CPU(true)) / S``: start-up, NVML init and the record are in
both, so the difference is what the sampler thread, the runner's 20 ms poll of CMD and its
0.5 s process listings cost per second of workload. Target: ≤ 2% of one core at the
default interval.

While the ``sleep`` child runs, its threads' CPU is read every 0.5 s from
``/proc/PID/task/TID/schedstat`` (ns on the CPU; the last reading before exit), so the
split between the main thread (the runner) and the sampling thread is shown too.

    PYTHONPATH=src python benchmarks/measure_cost.py --out measure_cost.json \\
        [--src OTHER/src --label before] [--intervals 1,2] [--seconds 30]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def _threads(pid: int) -> dict[int, int]:
    """``{tid: ns on the CPU}`` of a live process, ``{}`` once it is gone."""
    out = {}
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                    out[int(tid)] = int(fh.read().split()[0])
            except (OSError, ValueError):
                continue
    except OSError:
        pass
    return out


# --pin: the sampling thread pins itself to the CPU it starts on (an experiment: warm caches)
PIN = ("import os, sys; from kvgate.measure import sampler as S; f = S.Sampler._loop\n"
       "def cpu():\n    return int(open('/proc/thread-self/stat').read().rsplit(')', 1)[1].split()[36])\n"
       "def loop(self):\n    os.sched_setaffinity(0, {cpu()}); f(self)\n"
       "S.Sampler._loop = loop; from kvgate.cli import main; sys.exit(main(sys.argv[1:]))")


def run_measure(src: str, cmd: list[str], interval_ms: float | None, out_json: str, pin: bool = False) -> dict:
    """One ``kvgate measure --settle 0s`` child: wall, CPU and the per-thread split."""
    env = {**os.environ, "PYTHONPATH": src}
    argv = [sys.executable, *(["-c", PIN] if pin else ["-m", "kvgate"]), "measure", "--settle", "0s",
            "--out", out_json, "--force"]
    if interval_ms is not None:
        argv += ["--interval", f"{interval_ms:g}ms"]
    t0 = time.monotonic()
    p = subprocess.Popen(argv + ["--", *cmd], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    last: dict[int, int] = {}
    while True:
        done, status, ru = os.wait4(p.pid, os.WNOHANG)
        if done:
            break
        seen = _threads(p.pid)
        if seen:
            last = seen
        time.sleep(0.5)
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    wall = time.monotonic() - t0
    res = {"command": cmd, "interval_ms": interval_ms, "rc": p.returncode, "wall_s": round(wall, 3),
           "user_s": round(ru.ru_utime, 4), "sys_s": round(ru.ru_stime, 4),
           "cpu_s": round(ru.ru_utime + ru.ru_stime, 4)}
    if last:
        main_ns = last.get(p.pid, 0)
        others = sorted((ns for tid, ns in last.items() if tid != p.pid), reverse=True)
        res["threads_last_seen_cpu_s"] = {"main": main_ns / 1e9, "busiest_other": (others[0] / 1e9) if others else None,
                                          "rest": sum(others[1:]) / 1e9, "n_threads": len(last)}
    try:
        with open(out_json) as fh:
            doc = json.load(fh)
        d = doc["domains"][0]
        res.update(status=doc.get("status"), samples=d.get("samples"), max_gap_s=d.get("max_gap_s"),
                   sampler_loop=d["basis"].get("sampler_loop"), basis_interval_s=d["basis"].get("interval_s"),
                   gaps=(d.get("extra") or {}).get("gaps"))
    except (OSError, ValueError, KeyError, IndexError) as exc:
        res["record_error"] = f"{type(exc).__name__}: {exc}; stderr: {err[-500:]}"
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="CPU cost of `kvgate measure` per second of workload")
    ap.add_argument("--out", required=True)
    ap.add_argument("--src", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"),
                    help="the kvgate source tree to run (default: this checkout's src)")
    ap.add_argument("--label", default="this tree")
    ap.add_argument("--intervals", default="default", help="comma list of ms, or 'default' (the CLI's)")
    ap.add_argument("--seconds", type=float, default=30.0, help="the sleep (default 30)")
    ap.add_argument("--pin", action="store_true", help="pin the sampling thread to one CPU (experiment)")
    ap.add_argument("--repeat-true", type=int, default=2, help="runs of `-- true` per interval (the min is used)")
    a = ap.parse_args(argv)
    src = os.path.abspath(a.src)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for iv in a.intervals.split(","):
            ms = None if iv == "default" else float(iv)
            trues = [run_measure(src, ["true"], ms, os.path.join(tmp, "t.json"), a.pin) for _ in range(a.repeat_true)]
            sl = run_measure(src, ["sleep", f"{a.seconds:g}"], ms, os.path.join(tmp, "s.json"), a.pin)
            base = min(t["cpu_s"] for t in trues)
            share = (sl["cpu_s"] - base) / a.seconds
            row = {"label": a.label, "pinned": a.pin, "interval_ms": ms, "seconds": a.seconds, "true": trues, "sleep": sl,
                   "cost_share_of_one_core": share}
            rows.append(row)
            th = sl.get("threads_last_seen_cpu_s") or {}
            print(f"{a.label}, interval {iv}: measure -- true {base:.3f} CPU-s (min of {len(trues)}); "
                  f"-- sleep {a.seconds:g} {sl['cpu_s']:.3f} CPU-s in {sl['wall_s']:.2f} s → "
                  f"{share * 100:.2f}% of one core; threads of the sleep run: main {th.get('main', 0):.3f} s, "
                  f"sampler {th.get('busiest_other') or 0:.3f} s, rest {th.get('rest', 0):.3f} s; "
                  f"loop {sl.get('sampler_loop')!r}, {sl.get('samples')} samples, max gap "
                  f"{(sl.get('max_gap_s') or 0) * 1e3:.2f} ms at "
                  f"{[g['at_s'] for g in (sl.get('gaps') or {}).get('largest', [])][:3]} s", flush=True)
    with open(a.out, "w") as fh:
        json.dump({"rows": rows, "python": sys.version.split()[0], "cpus": os.cpu_count()}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
