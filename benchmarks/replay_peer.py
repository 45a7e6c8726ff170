"""A pyarrow + numpy peer of ``kvgate replay``: the same figures from the same trace file,
written the way a numpy user would, to time kvgate against (``replay_scaling.py --peer``).

    python benchmarks/replay_peer.py TRACE.csv --budget BYTES | --slots N   # prints JSON

The trace is a CSV of seconds (``arrival_time,prompt_tokens,output_tokens``, as
``replay_scaling.py --end-to-end`` writes it); geometry and service model are the
benchmark's (S = 415,236,096 B, blocks of 16 positions = 811,008 B, max_seq 8192,
50 tokens/s, speed 1). It prints the figures ``kvgate replay`` prints per allocator
(peak reserved, written at the peak, peak written, means over time, most live, queueing
delays, admitted / rejected, last request done) and the summary (bound, measured reclaim,
unwritten at the peak), which ``replay_scaling.py --peer`` checks equal to kvgate's.

Written independently of kvgate's code, from the service model of
``kvgate.replay.simulate``: pyarrow reads the three columns; numpy does every step that is
not sequential: arrival steps, rejections, where admission first has to wait, the epochs
between admission/finish events (one stable sort of all events, running sums), blocks
per epoch (per-residue running counts, one pass per residue), the peaks and the means.
FIFO admission itself is sequential (request i's admission depends on i − 1's and on
which requests have finished), so from the first request that waits it is a ``heapq``
loop in Python: numpy has no vectorized form of it.
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

S = 415_236_096
BB = 16 * 48 * 1056
B = 16
L = 8192
RATE = 50.0


def read(path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    cols = ["arrival_time", "prompt_tokens", "output_tokens"]
    t = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(
        include_columns=cols, column_types={"arrival_time": pa.float64(), "prompt_tokens": pa.int64(),
                                            "output_tokens": pa.int64()}))  # fmt: skip
    a, p, o = (t.column(c).to_numpy() for c in cols)
    del t
    pa.default_memory_pool().release_unused()
    return a - a[0], p, o


def waits_from(arrive: np.ndarray, service: np.ndarray, cost: np.ndarray, cap: int) -> int:
    """First request that cannot be admitted at its arrival when all before it were."""
    used = np.cumsum(cost)
    zero = service == 0
    used -= np.cumsum(np.where(zero, cost, 0)) - np.where(zero, cost, 0)
    fin = (arrive + service)[~zero]
    o = np.argsort(fin, kind="stable")
    freed = np.concatenate([[0], np.cumsum(cost[~zero][o])])
    used -= freed[np.searchsorted(fin[o], arrive, side="right")]
    over = np.flatnonzero(used > cap)
    return int(over[0]) if len(over) else len(arrive)


def fifo(arrive: np.ndarray, service: np.ndarray, cost: np.ndarray, cap: int) -> np.ndarray:
    """Admission steps: FIFO, head of line blocking, Σ cost of the live ≤ cap (slots: cost 1)."""
    k = waits_from(arrive, service, cost, cap)
    out = arrive.copy()
    if k == len(arrive):
        return out
    fin = arrive[:k] + service[:k]
    live = np.flatnonzero(fin > arrive[k])
    heap = list(zip(fin[live].tolist(), cost[live].tolist()))
    heapq.heapify(heap)
    used = sum(c for _, c in heap)
    prev = int(arrive[k])
    times, svc, cst = arrive[k:].tolist(), service[k:].tolist(), cost[k:].tolist()
    for i in range(len(times)):
        t = max(times[i], prev)
        c = cst[i]
        while heap and heap[0][0] <= t:
            used -= heapq.heappop(heap)[1]
        while used + c > cap:
            f, cc = heapq.heappop(heap)
            used -= cc
            t = max(t, f)
        times[i] = prev = t
        heapq.heappush(heap, (t + svc[i], c))
        used += c
    out[k:] = times
    return out


def epochs(s: np.ndarray, p: np.ndarray, o: np.ndarray, fixed: int, contiguous: bool) -> dict:
    """Per-epoch live, written and reserved bytes of a schedule; the figures off them."""
    keep = o > 0
    s, p, o = s[keep], p[keep], o[keep]
    m = len(s)
    if m == 0:
        return dict(peak=0, peak_time=None, written_at_peak=0, peak_written=0, max_live=0, as_paged_peak=0)
    ticks = np.concatenate([s + o, s])
    order = np.argsort(ticks, kind="stable")
    ticks = ticks[order]
    j = np.where(order < m, order, order - m)
    sign = np.where(order < m, -1, 1)
    del order
    c = p[j] - s[j] + 1
    q, r = np.divmod(c + B - 1, B)
    rows = np.flatnonzero(ticks[1:] != ticks[:-1])  # each step's last event, but the final step's
    st, t_last = ticks[rows], ticks[rows + 1] - 1
    n = np.cumsum(sign)[rows]
    pos_first = np.cumsum(sign * c)[rows] + n * st
    qsum = np.cumsum(sign * q)[rows]
    h_first, h_last = (B - st % B) % B, (B - t_last % B) % B
    ge_first, ge_last = np.zeros(len(rows), np.int64), np.zeros(len(rows), np.int64)
    for h in range(1, B):  # live sequences with residue ≥ h
        cnt = np.cumsum(np.where(r >= h, sign, 0))[rows]
        ge_first[h_first == h] = cnt[h_first == h]
        ge_last[h_last == h] = cnt[h_last == h]
    del ticks, j, sign, c, q, r
    pos_last = pos_first + n * (t_last - st)
    blocks_last = qsum + n * (t_last // B) + ge_last
    written = n * fixed + pos_last * BB // B
    as_paged = n * fixed + blocks_last * BB
    reserved = n * S if contiguous else as_paged
    peak = int(reserved.max())
    at = np.flatnonzero(reserved == peak)
    return dict(peak=peak, peak_time=float((st[at[0]] if contiguous else t_last[at[0]]) / RATE),
                written_at_peak=int(written[at].max()), peak_written=int(written.max()), max_live=int(n.max()),
                as_paged_peak=int(as_paged.max()))  # fmt: skip


def allocator(s, arrive, p, o, fixed, contiguous, too_long, over) -> dict:
    e = epochs(s, p, o, fixed, contiguous)
    w = (s - arrive) / RATE
    t_end = int((s + o).max())
    pos = int((o * p + o * (o + 1) // 2).sum())  # position·steps: a request holds p + k in its k-th step
    seq = int(o.sum())

    def F(x):  # Σ_{w=1}^{x} ceil(w / B)
        qq, rr = np.divmod(x, B)
        return B * qq * (qq + 1) // 2 + rr * (qq + 1)

    blk = int((F(p + o) - F(p)).sum())
    written = Fraction(seq * fixed, t_end) + Fraction(pos * BB, B * t_end)
    reserved = Fraction(seq * S, t_end) if contiguous else Fraction(seq * fixed + blk * BB, t_end)
    p50, p99 = np.percentile(w, [50, 99])
    return {
        "admitted": len(s), "rejected": too_long + over, "peak_reserved_bytes": e["peak"],
        "peak_time_s": e["peak_time"], "written_at_peak_bytes": e["written_at_peak"],
        "reclaim_at_peak_bytes": e["peak"] - e["written_at_peak"], "peak_written_bytes": e["peak_written"],
        "max_concurrency": e["max_live"], "queue_delay_p50_s": float(p50), "queue_delay_p99_s": float(p99),
        "queue_delay_max_s": float(w.max()), "queue_delay_mean_s": float(w.mean()),
        "mean_reserved_bytes": int(reserved), "mean_written_bytes": int(written), "end_time_s": t_end / RATE,
        "_as_paged_peak": e["as_paged_peak"],
    }  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--budget", type=int)
    g.add_argument("--slots", type=int)
    a = ap.parse_args()
    budget = a.budget if a.budget is not None else a.slots * S
    K = budget // S if a.slots is None else min(a.slots, budget // S)
    fixed = S - L * BB // B
    arrival, p, o = read(a.trace)
    arrive = np.ceil(np.round(arrival * RATE, 6)).astype(np.int64)
    del arrival
    ok = p + o <= L
    too_long = int((~ok).sum())
    arrive, p, o = arrive[ok], p[ok], o[ok]
    s_c = fifo(arrive, o, np.ones(len(o), np.int64), K)
    cont = allocator(s_c, arrive, p, o, fixed, True, too_long, 0)
    del s_c
    cost = (p + o + B - 1) // B * BB + fixed
    fits = cost <= budget
    over = int((~fits).sum())
    arrive, p, o, cost = arrive[fits], p[fits], o[fits], cost[fits]
    paged = allocator(fifo(arrive, o, cost, budget), arrive, p, o, fixed, False, too_long, over)
    as_paged = cont.pop("_as_paged_peak")
    paged.pop("_as_paged_peak")
    summary = {"bound_bytes": K * S, "measured_reclaim_bytes": cont["peak_reserved_bytes"] - as_paged,
               "unwritten_at_peak_bytes": cont["reclaim_at_peak_bytes"]}  # fmt: skip
    summary["ratio"] = float(Fraction(summary["measured_reclaim_bytes"], summary["bound_bytes"]))
    json.dump({"contiguous": cont, "paged": paged, "summary": summary}, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
