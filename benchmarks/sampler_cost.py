"""Sampler cost: CPU time of kvgate's sampler thread per second of wall time, at several
intervals, and the cost of one NVML memory query (issue 3; target ≤ 2% of one core at the
default interval). Needs an NVIDIA GPU and nvidia-ml-py; not a timed test.

    PYTHONPATH=src python benchmarks/sampler_cost.py --out sampler_cost.json

The thread's CPU time comes from its own POSIX CPU clock
(``time.pthread_getcpuclockid``), so it excludes everything else in the process.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from kvgate.measure.nvml import session
from kvgate.measure.sampler import DEFAULT_INTERVAL_S, Sampler

INTERVALS_S = (0.00025, 0.0005, 0.001, 0.002, 0.01, 0.5)


def query_cost_us(fn, n: int = 20000) -> dict:
    """Median and p99 of ``fn()`` wall time in µs over ``n`` calls (after 200 warm-up)."""
    for _ in range(200):
        fn()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        ts.append(time.perf_counter_ns() - t0)
    ts.sort()
    return {"n": n, "median_us": ts[n // 2] / 1e3, "p99_us": ts[int(n * 0.99)] / 1e3, "mean_us": sum(ts) / n / 1e3}


def thread_cost(reader, interval_s: float, seconds: float) -> dict:
    """Run a kvgate Sampler for ``seconds``; CPU time of its thread per wall second."""
    s = Sampler(reader, 1, interval_s=interval_s)
    s.start()
    time.sleep(0.05)
    clk = time.pthread_getcpuclockid(s._thread.ident)
    s.mark_start()
    c0, w0, n0 = time.clock_gettime(clk), time.monotonic(), s.samples
    time.sleep(seconds)
    c1, w1, n1 = time.clock_gettime(clk), time.monotonic(), s.samples
    s.stop()
    wall = w1 - w0
    return {"interval_s": interval_s, "wall_s": round(wall, 3), "samples": n1 - n0,
            "samples_per_s": round((n1 - n0) / wall, 1), "cpu_s": round(c1 - c0, 6),
            "cpu_share_of_one_core": (c1 - c0) / wall, "max_gap_s": s.max_gap_s,
            "mean_gap_s": wall / max(1, n1 - n0)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="kvgate sampler cost")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=3.0, help="per interval (default 3)")
    ap.add_argument("--gpu", type=int, default=0)
    a = ap.parse_args(argv)
    sys.setswitchinterval(0.0005)  # as kvgate measure does
    nv = session()
    h = nv.handle(a.gpu)
    mod = nv._init()
    info = nv.device_info(a.gpu)
    res = {"device": info.name, **nv.versions(), "default_interval_s": DEFAULT_INTERVAL_S}
    res["query_v2"] = query_cost_us(lambda: mod.nvmlDeviceGetMemoryInfo(h, mod.nvmlMemory_v2))
    res["query_v1"] = query_cost_us(lambda: mod.nvmlDeviceGetMemoryInfo(h))
    reader = nv.used_reader([h])
    res["kvgate_reader"] = query_cost_us(reader)
    res["compute_procs"] = query_cost_us(lambda: nv.processes(h), n=500)
    res["threads"] = [thread_cost(reader, i, a.seconds if i < 0.1 else max(a.seconds, 3.0)) for i in INTERVALS_S]
    with open(a.out, "w") as fh:
        json.dump(res, fh, indent=2)
    print(f"{info.name}, driver {res['driver_version']}: one NVML memory query v2 "
          f"{res['query_v2']['median_us']:.2f} µs (p99 {res['query_v2']['p99_us']:.2f}), v1 "
          f"{res['query_v1']['median_us']:.2f} µs; kvgate reader {res['kvgate_reader']['median_us']:.2f} µs; "
          f"process list {res['compute_procs']['median_us']:.0f} µs")
    print(f"{'interval':>10} {'samples/s':>10} {'CPU % of 1 core':>16} {'max gap ms':>11}")
    for t in res["threads"]:
        mark = "  <- default" if t["interval_s"] == DEFAULT_INTERVAL_S else ""
        print(f"{t['interval_s'] * 1e3:>8g}ms {t['samples_per_s']:>10.0f} {t['cpu_share_of_one_core'] * 100:>15.2f}% "
              f"{(t['max_gap_s'] or 0) * 1e3:>11.2f}{mark}")
    d = [t for t in res["threads"] if t["interval_s"] == DEFAULT_INTERVAL_S][0]
    print(f"target ≤ 2% of one core at the default: {'met' if d['cpu_share_of_one_core'] <= 0.02 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
