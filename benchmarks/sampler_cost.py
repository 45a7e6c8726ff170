"""Sampler cost: CPU time of kvgate's sampler thread per second of wall time, at several
intervals, and the cost of one NVML memory query (issue 3; target ≤ 2% of one core at the
default interval). Needs an NVIDIA GPU and nvidia-ml-py; not a timed test.

    PYTHONPATH=src python benchmarks/sampler_cost.py --out sampler_cost.json

The thread's CPU time comes from its own POSIX CPU clock
(``time.pthread_getcpuclockid``), so it excludes everything else in the process. To split
the cost per sample, the same is measured with a reader that returns a fixed int (no NVML:
the sampler's own Python work plus the wake-up) and for a bare ``time.sleep`` loop (the
wake-up alone).

``--probe-out F --probe-seconds S`` instead runs a bare NVML loop in this process alone
(no kvgate sampler, no other thread) for S seconds and logs every memory query that took
longer than 5 ms and every gap over 5 ms, with ``time.time()`` stamps: run it beside a
workload to see whether NVML itself blocks (e.g. while another process initialises CUDA).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
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
    n1 = max(n1, s.samples - 1)  # held samples are counted every ~HOLD_MAX intervals: count them all
    wall = w1 - w0
    py = c1 - c0
    return {"loop": s.loop, "interval_s": interval_s, "wall_s": round(wall, 3),
            "samples": n1 - n0, "samples_per_s": round((n1 - n0) / wall, 1), "cpu_s": round(py, 6),
            "cpu_share_of_one_core": py / wall, "max_gap_s": s.max_gap_s,
            "mean_gap_s": wall / max(1, n1 - n0)}


def host_costs(seconds: float) -> list[dict]:
    """The host sampler's thread CPU at its 10 ms default, attached to a small process tree
    (a shell with three sleeping children): as before issue 9 (full /proc/meminfo parse and
    every member's /proc/PID/status each sample, tree re-listed every 0.1 s) and now."""
    import subprocess

    from kvgate.measure import host as hostmod

    child = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60 & sleep 60 & wait"], start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out = []
    try:
        time.sleep(0.2)
        for name in ("host, before (every sample: meminfo parse + tree status)", "host, now (tree every 0.1 s)"):
            if "before" in name:
                h = hostmod.HostProbe(refresh_s=0.1, tree_every_s=0.0)

                def old_used() -> int:
                    m = hostmod.read_meminfo()
                    return m["MemTotal"] - m.get("MemAvailable", m.get("MemFree", 0))

                h.used = old_used  # the per-sample system figure as it was
                saved = hostmod.descendants
                hostmod.descendants = hostmod._descendants_psutil  # the tree listing as it was
            else:
                h = hostmod.HostProbe()
            h.attach(child.pid)
            try:
                r = thread_cost(h.read, 0.01, seconds)
            finally:
                if "before" in name:
                    hostmod.descendants = saved
            r["variant"] = name
            r["tree_pids"] = len(h._pids)
            out.append(r)
    finally:
        os.killpg(child.pid, signal.SIGKILL)  # the shell and its sleeps: its own session
        child.wait()
    return out


def pynvml_reader(mod, handles):
    """The reader as it was before issue 9: pynvml's own call per GPU per sample."""
    query, args = mod.nvmlDeviceGetMemoryInfo, (mod.nvmlMemory_v2,)

    def read():
        out = []
        for h in handles:
            m = query(h, *args)
            out.append(m.total - m.free)
        return out

    return read


def gil_held_reader(mod, handle):
    """The ctypes v2 query through a ``PYFUNCTYPE`` prototype: the GIL stays held during the
    NVML call (kvgate's reader releases it, as every ctypes ``CDLL`` call does)."""
    import ctypes

    fn = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)(
        ctypes.cast(mod._nvmlGetFunctionPointer("nvmlDeviceGetMemoryInfo_v2"), ctypes.c_void_p).value)
    mem = mod.c_nvmlMemory_v2_t()
    mem.version = mod.nvmlMemory_v2
    ref, hv = ctypes.addressof(mem), ctypes.cast(handle, ctypes.c_void_p).value

    def read():
        if fn(hv, ref):
            raise RuntimeError("NVML query failed")
        return [mem.total - mem.free]

    return read


def current_cpu() -> int:
    """The CPU the calling thread runs on now (``/proc/thread-self/stat``, field 39)."""
    with open("/proc/thread-self/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[36])


def pinned(reader):
    """``reader``, but its first call pins the calling thread (the sampler's) to the CPU it
    is on: does keeping the thread on one core (warm caches) make a sample cheaper?"""
    state = {"done": False}

    def read():
        if not state["done"]:
            os.sched_setaffinity(0, {current_cpu()})
            state["done"] = True
        return reader()

    return read


def sleep_cost(interval_s: float, seconds: float) -> dict:
    """CPU time per wake-up of a bare deadline ``time.sleep`` loop on its own thread."""
    out: dict = {}

    def run() -> None:
        n, nxt, c0 = 0, time.monotonic(), time.thread_time()
        end = nxt + seconds
        while nxt < end:
            nxt += interval_s
            d = nxt - time.monotonic()
            if d > 0:
                time.sleep(d)
            n += 1
        out.update(interval_s=interval_s, wakes=n, cpu_us_per_wake=(time.thread_time() - c0) / n * 1e6)

    th = threading.Thread(target=run)
    th.start()
    th.join()
    return out


def probe(out: str, seconds: float, gpu: int, slow_s: float = 0.005) -> int:
    """A bare NVML loop at ~1 ms; logs slow queries and long gaps (``time.time()`` s)."""
    import pynvml

    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(gpu)
    slow, gaps, n = [], [], 0
    now = time.time
    end = now() + seconds
    prev = None
    while True:
        a = now()
        m = pynvml.nvmlDeviceGetMemoryInfo(h)
        b = now()
        n += 1
        used = m.total - m.free
        if b - a > slow_s:
            slow.append({"t_start": a, "call_s": round(b - a, 6), "used_bytes": used})
        if prev is not None and b - prev > slow_s:
            gaps.append({"t_prev": prev, "gap_s": round(b - prev, 6), "used_bytes": used})
        prev = b
        if b >= end:
            break
        time.sleep(0.001)
    with open(out, "w") as fh:
        json.dump({"queries": n, "seconds": seconds, "slow_threshold_s": slow_s, "slow_calls": slow, "gaps": gaps}, fh,
                  indent=1)
    print(f"probe: {n} NVML queries in {seconds:g} s; {len(slow)} took > {slow_s * 1e3:g} ms: "
          + ", ".join(f"{x['call_s'] * 1e3:.1f} ms at {x['t_start']:.3f}" for x in slow[:8]))
    return 0


def _print_host(rows: list[dict]) -> None:
    for t in rows:
        print(f"{t['variant']:<58} 10 ms: {t['cpu_share_of_one_core'] * 100:.2f}% of one core, "
              f"{t['cpu_s'] / max(1, t['samples']) * 1e6:.1f} µs/sample ({t['tree_pids']} processes in the tree)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="kvgate sampler cost")
    ap.add_argument("--out")
    ap.add_argument("--seconds", type=float, default=3.0, help="per interval (default 3)")
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--intervals", default=None, help="comma list of intervals in ms (default 0.25,0.5,1,2,10,500)")
    ap.add_argument("--host-only", action="store_true", help="only the host sampler's cost (no GPU needed)")
    ap.add_argument("--probe-out", default=None, help="run the bare NVML probe instead, writing here")
    ap.add_argument("--probe-seconds", type=float, default=30.0)
    a = ap.parse_args(argv)
    if a.probe_out:
        return probe(a.probe_out, a.probe_seconds, a.gpu)
    if not a.out:
        ap.error("--out is required")
    sys.setswitchinterval(0.0005)  # as kvgate measure does
    if a.host_only:
        res = {"host": host_costs(max(a.seconds, 3.0))}
        with open(a.out, "w") as fh:
            json.dump(res, fh, indent=2)
        _print_host(res["host"])
        return 0
    nv = session()
    h = nv.handle(a.gpu)
    mod = nv._init()
    info = nv.device_info(a.gpu)
    res = {"device": info.name, **nv.versions(), "default_interval_s": DEFAULT_INTERVAL_S}
    res["query_v2"] = query_cost_us(lambda: mod.nvmlDeviceGetMemoryInfo(h, mod.nvmlMemory_v2))
    res["query_v1"] = query_cost_us(lambda: mod.nvmlDeviceGetMemoryInfo(h))
    reader = nv.used_reader([h])
    old = pynvml_reader(mod, [h])
    res["kvgate_reader"] = query_cost_us(reader)
    res["pynvml_reader"] = query_cost_us(old)
    held = gil_held_reader(mod, h)
    res["gil_held_reader"] = query_cost_us(held)
    res["compute_procs"] = query_cost_us(lambda: nv.processes(h), n=500)
    ivs = tuple(float(x) / 1000 for x in a.intervals.split(",")) if a.intervals else INTERVALS_S
    res["variants"] = []
    for i in ivs:
        for name, rd in (("pynvml reader", old), ("ctypes reader (kvgate)", reader), ("ctypes, GIL held", held),
                         ("ctypes, thread pinned", pinned(reader))):
            r = thread_cost(rd, i, a.seconds if i < 0.1 else max(a.seconds, 3.0))
            r["variant"] = name
            res["variants"].append(r)
    res["threads"] = [r for r in res["variants"] if r["variant"] == "ctypes reader (kvgate)"]
    fixed = [int(info.total_bytes // 3)]
    res["fixed_reader_threads"] = [thread_cost(lambda: fixed, i, a.seconds) for i in (0.001, 0.002)]
    res["sleep_only"] = [sleep_cost(i, a.seconds) for i in (0.001, 0.002)]
    res["host"] = host_costs(max(a.seconds, 3.0))
    with open(a.out, "w") as fh:
        json.dump(res, fh, indent=2)
    print(f"{info.name}, driver {res['driver_version']}: one NVML memory query v2 "
          f"{res['query_v2']['median_us']:.2f} µs (p99 {res['query_v2']['p99_us']:.2f}), v1 "
          f"{res['query_v1']['median_us']:.2f} µs; kvgate reader {res['kvgate_reader']['median_us']:.2f} µs; "
          f"process list {res['compute_procs']['median_us']:.0f} µs")
    print(f"pynvml reader {res['pynvml_reader']['median_us']:.2f} µs per call; GIL-held ctypes reader "
          f"{res['gil_held_reader']['median_us']:.2f} µs")
    print(f"{'variant':<30}{'interval':>9} {'samples/s':>10} {'CPU % of 1 core':>16} {'CPU µs/sample':>14} "
          f"{'max gap ms':>11}")
    for t in res["variants"]:
        print(f"{t['variant']:<30}{t['interval_s'] * 1e3:>7g}ms {t['samples_per_s']:>10.0f} "
              f"{t['cpu_share_of_one_core'] * 100:>15.2f}% {t['cpu_s'] / max(1, t['samples']) * 1e6:>14.1f} "
              f"{(t['max_gap_s'] or 0) * 1e3:>11.2f}")
    for t, z in zip(res["fixed_reader_threads"], res["sleep_only"]):
        print(f"{t['interval_s'] * 1e3:g} ms, per sample: fixed-int reader, Python loop "
              f"{t['cpu_s'] / max(1, t['samples']) * 1e6:.1f} µs CPU; bare time.sleep loop {z['cpu_us_per_wake']:.1f} µs")
    _print_host(res["host"])
    d = [t for t in res["threads"] if t["interval_s"] == DEFAULT_INTERVAL_S]
    if d:
        share = d[0]["cpu_share_of_one_core"]
        print(f"default ({d[0]['loop']}) at {DEFAULT_INTERVAL_S * 1e3:g} ms: {share * 100:.2f}% of one core; "
              f"target ≤ 2%: {'met' if share <= 0.02 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
