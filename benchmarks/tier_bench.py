"""Benchmark (not CI): ``kvgate tier`` at 10^5, 10^6, 10^7 requests against a C Fenwick-tree
peer, in the same run, on the Mooncake-shaped synthetic trace of ``benchmarks/tier_synth.py``.

For each size: the trace is generated once (kept in ``--dir``), the peer
(``benchmarks/tier_fenwick_peer.c``) is compiled here with ``cc -O2`` (never by kvgate), then
three processes run one after the other, each timed (wall) with its own peak RSS
(``os.wait4``'s ``ru_maxrss``): the peer, ``kvgate tier`` exact, ``kvgate tier
--sample-rate 0.01`` (SHARDS). The exact figures must equal the peer's at every printed
capacity; SHARDS' error is the largest gap in hit share at those capacities.

Run: ``nice python benchmarks/tier_bench.py 1e5 1e6 [1e7] --dir /tmp/tier --out F.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CAPS = [64, 256, 1024, 4096, 16384, 65536, 262144, 1048576]
KVGATE = [sys.executable, "-m", "kvgate"]


def run_rss(cmd: list[str]) -> tuple[str, float, int]:
    """(stdout, wall seconds, peak RSS bytes) of one process (``os.wait4``'s own rusage)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as so, tempfile.TemporaryFile("w+") as se:
        pid = os.posix_spawnp(cmd[0], cmd, os.environ, file_actions=[
            (os.POSIX_SPAWN_DUP2, so.fileno(), 1), (os.POSIX_SPAWN_DUP2, se.fileno(), 2)])
        _, status, ru = os.wait4(pid, 0)
        wall = time.perf_counter() - t0
        so.seek(0)
        se.seek(0)
        if os.waitstatus_to_exitcode(status):
            raise SystemExit(f"{cmd}: exit {status}\n{se.read()[-2000:]}")
        return so.read(), wall, ru.ru_maxrss * 1024


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("sizes", nargs="+")
    ap.add_argument("--dir", default="/tmp/kvgate-tier-bench")
    ap.add_argument("--out", default=None)
    ap.add_argument("--rate", type=float, default=0.01)
    a = ap.parse_args()
    d = Path(a.dir)
    d.mkdir(parents=True, exist_ok=True)
    peer = d / "tier_fenwick_peer"
    subprocess.run(["cc", "-O2", "-o", str(peer), str(ROOT / "benchmarks" / "tier_fenwick_peer.c")], check=True)
    rows = []
    for s in a.sizes:
        n = int(float(s))
        trace = d / f"synth_{n}.jsonl"
        if not trace.exists():
            subprocess.run([sys.executable, str(ROOT / "benchmarks" / "tier_synth.py"), str(n), str(trace)], check=True)
        load_before = os.getloadavg()
        out, p_wall, p_rss = run_rss([str(peer), str(trace), "512", *map(str, CAPS)])
        pv = dict(line.split() for line in out.splitlines())
        base = [*KVGATE, "tier", "--trace", str(trace), "--model", "llama-3.1-8b",
                "--at-capacity-blocks", ",".join(map(str, CAPS)), "--json"]
        out, e_wall, e_rss = run_rss(base)
        ex = json.loads(out)
        out, s_wall, s_rss = run_rss([*base, "--sample-rate", str(a.rate)])
        sh = json.loads(out)
        prompt = ex["prompt_tokens"]
        exact = {p["capacity_blocks"]: p["hit_tokens"] for p in ex["curve"]}
        samp = {p["capacity_blocks"]: p["hit_tokens"] for p in sh["curve"]}
        same = all(exact[c] == int(pv[f"hit_tokens_at_{c}"]) for c in CAPS) \
            and ex["unbounded_hit_tokens"] == int(pv["unbounded_hit_tokens"])
        err = max(abs(samp[c] - exact[c]) / prompt for c in CAPS)
        row = {"requests": n, "accesses": int(pv["accesses"]), "distinct_blocks": int(pv["distinct"]),
               "trace_bytes": trace.stat().st_size, "peer_s": p_wall, "peer_rss": p_rss,
               "exact_s": e_wall, "exact_rss": e_rss, "shards_s": s_wall, "shards_rss": s_rss,
               "exact_equals_peer": same, "shards_max_error_points": 100 * err,
               "load_average_1_5_15_before": load_before, "load_average_1_5_15_after": os.getloadavg(),
               "share_at": {c: exact[c] / prompt for c in CAPS}, "shards_share_at": {c: samp[c] / prompt for c in CAPS}}
        rows.append(row)
        print(f"{n:>10,} req {row['accesses']:>12,} acc {row['distinct_blocks']:>11,} distinct | "
              f"peer {p_wall:6.1f} s {p_rss / 2**20:6.0f} MiB | exact {e_wall:6.1f} s {e_rss / 2**20:6.0f} MiB "
              f"({e_wall / p_wall:.2f}x) same={same} | SHARDS {s_wall:5.1f} s {s_rss / 2**20:5.0f} MiB "
              f"({s_rss / e_rss:.0%}) max err {100 * err:.2f} pt | load {load_before[0]:.1f} -> "
              f"{os.getloadavg()[0]:.1f}", flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
