"""Benchmark input (not CI): a Mooncake-shaped synthetic hashed trace of N requests, JSONL in
the Mooncake conversation trace's own keys (``timestamp`` ms, ``input_length``,
``output_length``, ``hash_ids`` of 512-token blocks).

Shape, taken from ``../shared/traces/mooncake_conversation_trace.jsonl`` (12,031 requests):
every request starts with the shared block 0 (as there: 100% of its requests), ~24 hash
blocks per request on average (there 23.98, median 14, p90 54), a conversation's next turn
repeats the earlier turn's blocks and adds its own. Conversations come in windows of
2,000 (their turns interleaved in time inside the window), so reuse distances stay those of
a server's recent traffic. Every id other than 0 is fresh (never seen in an earlier
conversation), so the distinct blocks grow with N: the table in RESULTS.md prints them.

Written with numpy in chunks, seeded: ``python benchmarks/tier_synth.py N OUT.jsonl [SEED]``.
"""

from __future__ import annotations

import sys
import time

import numpy as np

WINDOW = 2_000  # conversations whose turns are interleaved
BLOCK = 512


def window(rng: np.random.Generator, n_conv: int, first_id: int, t0: int) -> tuple[list[str], int, int]:
    """JSONL lines of ``n_conv`` conversations; returns (lines, next fresh id, next time)."""
    turns = rng.geometric(1 / 3.0, n_conv)  # 3 turns on average
    first = np.maximum(1, np.round(rng.lognormal(2.3, 0.95, n_conv))).astype(np.int64)  # median ~10 blocks
    lines: list[str] = []
    reqs: list[tuple[int, int, int]] = []  # (time, conversation, blocks)
    start = np.zeros(n_conv, dtype=np.int64)
    nid = first_id
    for c in range(n_conv):
        grow = rng.poisson(3.0, int(turns[c]) - 1) + 1
        sizes = np.concatenate(([first[c]], first[c] + np.cumsum(grow)))
        start[c] = nid
        nid += int(sizes[-1]) - 1  # block 0 is shared; the rest are this conversation's
        times = t0 + int(rng.integers(0, 600_000)) + np.cumsum(rng.integers(5_000, 120_000, len(sizes)))
        reqs.extend((int(t), c, int(s)) for t, s in zip(times, sizes))
    reqs.sort()
    out = rng.integers(1, 1000, len(reqs))
    short = rng.integers(0, BLOCK, len(reqs))
    for (t, c, s), o, cut in zip(reqs, out, short):
        a = int(start[c])
        ids = "0" if s == 1 else "0, " + ", ".join(map(str, range(a, a + s - 1)))
        lines.append(f'{{"timestamp": {t}, "input_length": {s * BLOCK - int(cut)}, "output_length": {int(o)}, '
                     f'"hash_ids": [{ids}]}}\n')
    return lines, nid, reqs[-1][0]


def main() -> int:
    n = int(float(sys.argv[1]))
    path = sys.argv[2]
    rng = np.random.default_rng(int(sys.argv[3]) if len(sys.argv) > 3 else 0)
    t_start = time.perf_counter()
    written = 0
    nid, t = 1, 0
    with open(path, "w", buffering=1 << 22) as fh:
        while written < n:
            lines, nid, t = window(rng, WINDOW, nid, t)
            lines = lines[: n - written]
            fh.writelines(lines)
            written += len(lines)
    print(f"{path}: {written:,} requests, ids 0..{nid - 1:,}, {time.perf_counter() - t_start:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
