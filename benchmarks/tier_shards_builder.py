"""Benchmark (not CI): the SHARDS builder alone (no JSON), this tree's
``kvgate.tier.shards`` against another version of that file, on ``synthetic_hashed``
requests fed 5,000 at a time, with small ids and with the same ids scattered over 62 bits
(new ids then land inside the followed set). The two curves must be equal.

Run: ``git show REV:src/kvgate/tier/shards.py > /tmp/old.py;
nice python benchmarks/tier_shards_builder.py /tmp/old.py 300000 0.1``.
"""

from __future__ import annotations

import importlib.util
import sys
import time

import numpy as np

import kvgate.tier.shards as new
from kvgate.tier.traces import synthetic_hashed


def main() -> int:
    spec = importlib.util.spec_from_file_location("shards_other", sys.argv[1])
    assert spec is not None and spec.loader is not None
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    t = synthetic_hashed(int(sys.argv[2]), seed=1, mean_blocks=24, share=0.3)
    rate = float(sys.argv[3])
    ids = t.ids.astype(np.int64)
    scattered = ((ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(12345)) >> np.uint64(2)).astype(
        np.int64)
    for name, x in (("small ids", ids), ("scattered ids", scattered)):
        hists = []
        for label, mod in (("other", old), ("this tree", new)):
            b = mod.SampledCurveBuilder(512, rate)
            t0 = time.perf_counter()
            for lo in range(0, t.n_requests, 5000):
                hi = min(lo + 5000, t.n_requests)
                b.add(t.input_length[lo:hi], t.offsets[lo : hi + 1], x[t.offsets[lo] : t.offsets[hi]])
            r = b.result()
            hists.append(r.hist)
            print(f"{name:14} {label:10} {time.perf_counter() - t0:6.2f} s  {r.distinct_blocks:,} followed blocks")
        assert np.array_equal(hists[0], hists[1]), "the curves differ"
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
